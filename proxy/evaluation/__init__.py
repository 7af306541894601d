"""Offline measurement: guardrail accuracy, FAR-H, PFI and the training of the harm classifier.

The ``sonate eval`` and ``sonate train`` commands (:mod:`proxy.cli.evaluate`,
:mod:`proxy.cli.train`) call these modules; none of them parses arguments.

- :mod:`.data`: every data reader (evaluation items, training examples, oracle and HolisticBias
  files); one :class:`~proxy.evaluation.data.DataError`.
- :mod:`.client`: the one client of a running proxy (no retries; see its docstring).
- Guardrail evaluation: :mod:`.guardrails` (items through the engine in-process or through a
  proxy), :mod:`.metrics` (span matching, F-beta, latency percentiles, Wilson proportions),
  :mod:`.utility` (the false-intervention side: what happens to ordinary prompts),
  :mod:`.report` (JSON report and its Markdown tables: both sides of every policy, the utility row).
- FAR-H: :mod:`.claims` (claim mining), :mod:`.claim_spans` (model-assisted span pass),
  :mod:`.oracle` (HaluEval/TruthfulQA oracle, regex rules, validators), :mod:`.hallucination`
  (scoring and the result), :mod:`.farh_run` (the steps of a run).
- PFI: :mod:`.fairness` (prompts, PFI and the result), :mod:`.pfi_run` (the steps of a run).
- :mod:`.training`: the harm classifier's training and cross-validation.
"""
