"""``sonate eval conversation``: the Fair Forge conversation metrics over recorded conversations.

Fair Forge (Alquimia AI, https://github.com/Alquimia-ai/fair-forge) defines the metrics; the
data model follows its ``Dataset`` / ``Batch`` fields (``session_id``, ``assistant_id``,
``language``, ``context``, ``conversation`` of ``{qa_id, query, assistant,
ground_truth_assistant}``). Modules, one job each:

- :mod:`.data`: the conversations JSONL reader (the only file parsing here).
- Pure metrics (no I/O): :mod:`.humanity` (NRC emotions, entropy, Spearman), :mod:`.bias`
  (guardians, B(R), Clopper–Pearson), :mod:`.risk` (R_total), :mod:`.quality` (memory,
  language adaptation, Grice, SSA, context adherence from judge verdicts), :mod:`.clustering`
  (HurtLex lexicon, UMAP → HDBSCAN, per-cluster toxicity, silhouette), :mod:`.bestof`
  (single-elimination tournament).
- :mod:`.replay`: the recorded queries through a running proxy (receipt id per answer).
- :mod:`.runner`: one run end to end (metrics over the conversations → the result document).
- :mod:`.results`: the result in the ledger store (append/list) and as JSONL.
- :mod:`.report`: the result as Markdown and as an HTML page (server-side SVG charts).
"""

#: The metrics of a run, in report order (``--metrics`` chooses a subset).
METRICS = ("humanity", "bias", "risk", "quality", "context", "clustering", "bestof")
#: The metrics that need an LLM judge (bias works without one, with the local classifier only).
JUDGE_METRICS = ("quality", "context", "bestof")
