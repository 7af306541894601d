"""Model files derived once from an installed package and cached under the models directory.

The serving process keeps heavy frameworks out (torch for MiniLM, scikit-learn and SciPy for
profanity-check: hundreds of MB of resident memory, seconds of start-up): a
child process imports the framework once, writes the derived file (an ONNX graph, a ``.npz`` of
weights) and exits; the file's sha256 is recorded beside it (``<file>.sha256``) and checked at
every load, so a cache file changed after export is never used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ExportError", "ensure_export", "file_sha256"]

log = logging.getLogger("sonate.models")


class ExportError(RuntimeError):
    """A derived model file could not be exported, or does not match its recorded sha256."""


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of the file at ``path`` (read in 1 MiB blocks). Raises OSError."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_export(path: Path, module: str, what: str, needs: str,
                  error: type[ExportError] = ExportError) -> Path:
    """``path``, exported first when it or its recorded sha256 is missing, by running
    ``python -m <module> <path>`` in a child process (which must create ``path``).

    ``what`` names the model in messages; ``needs`` says what the export imports (shown when it
    fails). Raises ``error`` (an :class:`ExportError`) when the export fails or the file's sha256
    differs from the one recorded at export (delete both files to re-export).
    """
    path = Path(path)
    recorded = path.with_name(path.name + ".sha256")
    if not path.exists() or not recorded.exists():
        log.info("exporting %s to %s (once)", what, path)
        done = subprocess.run([sys.executable, "-m", module, str(path)], capture_output=True, text=True)
        if done.returncode != 0 or not path.exists():
            raise error(f"exporting {what} failed (needs {needs} at export time):\n{done.stderr[-2000:]}")
        tmp = recorded.with_name(f".{recorded.name}.{os.getpid()}.tmp")
        tmp.write_text(file_sha256(path) + "\n")
        os.replace(tmp, recorded)
    if file_sha256(path) != recorded.read_text().strip():
        raise error(f"{path} does not match its recorded sha256 ({recorded}); delete both to re-export")
    return path
