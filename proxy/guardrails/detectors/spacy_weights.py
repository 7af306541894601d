"""One copy of a spaCy pipeline's weights for every thread's copy of the pipeline.

Privacy gives each detector thread a presidio analyzer of its own, with its own spaCy pipeline
(spaCy does not document a pipeline as safe for concurrent use: parsing adds strings to the
pipeline's vocabulary). Most of what a loaded pipeline holds is per pipeline and stays so (the
vocabulary and string store, tokenizer rules, the parser's state; no copy loads the package's
string store: :func:`proxy.guardrails.detectors.pii._nlp_engine`); the trained weights of its
components and the lemmatizer's lookup tables are only read while parsing, so every copy can read
the same arrays. For ``en_core_web_sm`` 3.8 that is ~13 MB of weights and ~4 MB of tables of a
~40 MB pipeline. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any


def share_weights(source: Any, target: Any) -> int:
    """Make the components of spaCy pipeline ``target`` read the weight arrays of ``source`` (a
    pipeline loaded from the same package: same component names and layer structure) and share
    its rule lemmatizer's lookup tables. A component or layer whose structure or shapes differ is
    left as it is. Returns the bytes of ``target``'s own arrays given up (0 when nothing matched)."""
    given_up = 0
    for name in target.pipe_names:
        if name not in source.pipe_names:
            continue
        ours, theirs = target.get_pipe(name), source.get_pipe(name)
        given_up += _share_model(getattr(theirs, "model", None), getattr(ours, "model", None))
        if name == "lemmatizer" and hasattr(ours, "lookups") and hasattr(theirs, "lookups"):
            ours.lookups = theirs.lookups
    return given_up


def _share_model(source: Any, target: Any) -> int:
    """Share the parameters of two thinc models of one structure, node by node (``Model.walk``)."""
    if source is None or target is None or not hasattr(source, "walk") or not hasattr(target, "walk"):
        return 0
    theirs_nodes, ours_nodes = list(source.walk()), list(target.walk())
    if len(theirs_nodes) != len(ours_nodes) or any(a.name != b.name for a, b in zip(theirs_nodes, ours_nodes)):
        return 0
    given_up = 0
    for theirs, ours in zip(theirs_nodes, ours_nodes):
        for param in ours.param_names:
            if not (theirs.has_param(param) and ours.has_param(param)):
                continue
            mine, shared = ours.get_param(param), theirs.get_param(param)
            if mine is shared or mine.shape != shared.shape or mine.dtype != shared.dtype:
                continue
            ours.set_param(param, shared)
            given_up += mine.nbytes
    return given_up
