"""``sonate eval suite``: evaluation suites for the applications behind the proxy (FrootAI dimensions).

Modules: :mod:`.model` (suite file → dataclasses), :mod:`.metrics` (pure formulas), :mod:`.cost`
(litellm price map), :mod:`.client` (the proxy client with usage, streaming and timing),
:mod:`.runner` (cases → results), :mod:`.regression` (baseline comparison),
:mod:`.report_md` / :mod:`.report_html` (renderings). Documentation: docs/eval-suites.md.
"""
