"""What the proxy fork server (:mod:`tests.support.forked`) imports once, in the order `sonate serve`
does: the offline settings, spaCy and presidio without torch, the command line and the libraries
the server loads before its models. A forked proxy starts with them imported.

Not prometheus_client: it picks its multiprocess mode when imported, from
``$PROMETHEUS_MULTIPROC_DIR``, which a supervisor of workers sets first
(:func:`proxy.server.admission.workers.metrics_directory`); so not the server's HTTP modules either.
Imported here, a forked supervisor's workers would each show only their own counts
(tests/e2e/test_workers.py's metrics tests fail then).
"""

from __future__ import annotations

import importlib

from proxy import offline

offline.keep_torch_out_of_presidio()
for _name in ("proxy.cli", "proxy.cli.serve", "proxy.config", "proxy.guardrails.registry", "litellm",
              "openai.resources", "onnxruntime", "aiohttp"):
    importlib.import_module(_name)
