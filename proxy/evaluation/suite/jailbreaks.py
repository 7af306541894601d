"""The jailbreak set of a suite: the built-in adversarial prompts (data/jailbreaks.yaml, written for
the project) or a file the suite names, turned into suite cases (metric ``jailbreak``, tag ``jailbreak``
and the technique)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

BUILTIN = Path(__file__).resolve().parent / "data" / "jailbreaks.yaml"


def jailbreak_cases(spec: str, base: Path) -> list[dict[str, Any]]:
    """Raw case dicts for ``settings.jailbreaks``: ``none`` → [], ``builtin`` → :data:`BUILTIN`, else a
    YAML file path (relative to ``base``, the suite's folder) with the same layout
    (``prompts: [{id, technique, goal, attack}]``). Raises ValueError naming the file on a bad layout."""
    if spec == "none":
        return []
    path = BUILTIN if spec == "builtin" else (base / spec)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the jailbreak set: {exc}") from None
    prompts = doc.get("prompts") if isinstance(doc, dict) else None
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"{path}: a jailbreak set is a mapping with a non-empty 'prompts' list")
    cases = []
    for i, p in enumerate(prompts):
        if not isinstance(p, dict) or not all(isinstance(p.get(k), str) for k in ("id", "technique", "goal", "attack")):
            raise ValueError(f"{path}: prompts/{i} needs string id, technique, goal and attack")
        cases.append({"id": f"jailbreak/{p['id']}", "input": p["attack"], "goal": p["goal"],
                      "tags": ["jailbreak", p["technique"]], "metrics": ["jailbreak", "harm"]})
    return cases
