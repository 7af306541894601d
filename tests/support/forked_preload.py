"""What the proxy fork server (:mod:`tests.support.forked`) imports once, in the order `sonate serve`
does: the offline settings, spaCy and presidio without torch, the command line and the libraries
the server loads before its models. A forked proxy starts with them imported."""

from __future__ import annotations

import importlib

from proxy import offline

offline.keep_torch_out_of_presidio()
for _name in ("proxy.cli", "proxy.cli.serve", "proxy.server.http.app", "litellm", "openai.resources",
              "onnxruntime", "presidio_analyzer"):
    importlib.import_module(_name)
