"""MiniLM and splade-tiny on the real weights: pooling, per-token vectors, sparse vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import erf

from teleo_server.embedding.models import (
    DENSE_DIM,
    MAX_WINDOW,
    SPIN_ENTRY,
    DenseEncoder,
    SparseEncoder,
    WindowExceeded,
)
from teleo_server.embedding.repository import ModelFiles, default_model_dir

MODEL_DIR = default_model_dir()
FILES = ModelFiles.in_dir(MODEL_DIR)
pytestmark = pytest.mark.skipif(
    bool(FILES.missing()), reason="model repository not materialised: run `make models`")

SENTENCES = [
    "Older adults are at higher risk of falls.",
    "The quick brown fox jumps over the lazy dog.",
    "GPU kernels compute sparse matrix-vector products.",
    "x",
]


@pytest.fixture(scope="module")
def dense() -> DenseEncoder:
    return DenseEncoder(FILES.dense_onnx, FILES.dense_tokenizer, threads=1, max_batch=4)


@pytest.fixture(scope="module")
def sparse() -> SparseEncoder:
    return SparseEncoder(FILES.sparse_onnx, FILES.sparse_tokenizer, threads=1, max_batch=4)


def _random_texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ("memory agent retrieval goal purpose kernel vector sparse dense query older adults "
             "risk river autumn store recall rerank decay").split()
    return [" ".join(rng.choice(words, int(rng.integers(1, 40)))) for _ in range(n)]


def test_sessions_do_not_spin_between_runs(dense, sparse):
    """The intra-op threads sleep when a run ends: spinning, they took the cores from the
    retrieval that follows a query's embedding in the same process."""
    for enc in (dense, sparse):
        assert enc._session.get_session_options().get_session_config_entry(SPIN_ENTRY) == "0"


def test_dense_is_masked_mean_of_hidden_states_then_l2(dense):
    out = dense.encode(SENTENCES)
    for i, text in enumerate(SENTENCES):
        # each text's own forward pass (what a batch gives it too: the grouping changes no vector)
        ids = np.array([dense.tokenizer.encode(text).ids], np.int64)
        n = ids.shape[1]
        hidden = dense._session.run(["last_hidden_state"], {
            "input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})[0][0]
        mean = hidden[:n].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(out.dense[i], mean / np.linalg.norm(mean), atol=2e-6)
        # per-token rows are the hidden states of the word pieces, without [CLS] and [SEP]
        assert out.token_counts[i] == n - 2
        rows = hidden[1:n - 1].astype(np.float64)
        np.testing.assert_allclose(out.tokens[i, :n - 2],
                                   rows / np.linalg.norm(rows, axis=1, keepdims=True), atol=1e-3)
        assert not out.tokens[i, n - 2:].any()
    assert out.dense.dtype == np.float32 and out.dense.shape == (4, DENSE_DIM)
    assert out.tokens.dtype == np.float16


def test_dense_vectors_rank_paraphrases_above_unrelated_text(dense):
    out = dense.encode(["elderly people often fall", "Older adults are at higher risk of falls.",
                        "GPU kernels compute sparse matrix-vector products."])
    sims = out.dense @ out.dense[0]
    assert sims[1] > 0.5 > sims[2]


def test_batch_composition_does_not_change_vectors(dense, sparse):
    texts = _random_texts(20, seed=3)
    whole = dense.encode(texts)
    part = dense.encode(texts[5:9])
    np.testing.assert_array_equal(whole.dense[5:9], part.dense)
    width = part.tokens.shape[1]
    np.testing.assert_array_equal(whole.tokens[5:9, :width], part.tokens)
    np.testing.assert_array_equal(sparse.pooled(texts)[5:9], sparse.pooled(texts[5:9]))


class _Recording:
    """An onnxruntime session that records the (batch, length) of every call it runs."""

    def __init__(self, session) -> None:
        self.session, self.shapes = session, []

    def run(self, names, feeds):
        self.shapes.append(feeds["input_ids"].shape)
        return self.session.run(names, feeds)

    def __getattr__(self, name):
        return getattr(self.session, name)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_a_cpu_call_holds_a_few_hundred_word_pieces_and_the_vectors_do_not_move(kind):
    """Calls are held to the CPU budget (batch x padded length; a longer text goes alone), which
    embeds faster than large calls on a CPU; the vectors are those of one call for everything."""
    from teleo_server.embedding import models

    texts = _random_texts(24, seed=8) + [" ".join(["retrieval"] * 200), "x"]
    make = DenseEncoder if kind == "dense" else SparseEncoder
    files = (FILES.dense_onnx, FILES.dense_tokenizer) if kind == "dense" else (FILES.sparse_onnx, FILES.sparse_tokenizer)
    budget = models.DENSE_TOKEN_BUDGET if kind == "dense" else models.SPLADE_TOKEN_BUDGET
    held = make(*files, threads=1, max_batch=32)
    held._session = recording = _Recording(held._session)
    whole = make(*files, threads=1, max_batch=32)
    whole._token_budget = None  # every text in one call (up to max_batch)
    got = held.encode(texts) if kind == "dense" else held.pooled(texts)
    want = whole.encode(texts) if kind == "dense" else whole.pooled(texts)
    assert len(recording.shapes) > 2
    assert all(b * t <= budget or b == 1 for b, t in recording.shapes)
    assert sum(b for b, _ in recording.shapes) == len(texts)
    if kind == "dense":
        np.testing.assert_array_equal(got.dense, want.dense)
        np.testing.assert_array_equal(got.tokens, want.tokens)
    else:
        np.testing.assert_array_equal(got, want)


def test_window_is_an_error_not_a_truncation(dense, sparse):
    fits = " ".join(["memory"] * (MAX_WINDOW - 2))
    assert dense.encode([fits]).token_counts[0] == MAX_WINDOW - 2
    with pytest.raises(WindowExceeded):
        dense.encode([fits + " memory"])
    with pytest.raises(WindowExceeded):
        sparse.encode([fits + " memory"], [0])


def _gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * g + b


def _splade_reference(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BertForMaskedLM + SPLADE pooling, float64 NumPy, straight from the safetensors file."""
    from safetensors.numpy import load_file

    from teleo_server.embedding.build_repo import locate

    w = {k: v.astype(np.float64) for k, v in load_file(str(locate("sparse_weights"))).items()}
    cfg = json.loads(locate("sparse_config").read_text())
    h, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    d = h // nh
    b, t = ids.shape
    x = (w["bert.embeddings.word_embeddings.weight"][ids]
         + w["bert.embeddings.token_type_embeddings.weight"][0]
         + w["bert.embeddings.position_embeddings.weight"][:t])
    x = _layer_norm(x, w["bert.embeddings.LayerNorm.gamma"], w["bert.embeddings.LayerNorm.beta"],
                    eps)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{layer}."

        def lin(y, name, _p=p):
            return y @ w[f"{_p}{name}.weight"].T + w[f"{_p}{name}.bias"]

        q, k, v = (lin(x, f"attention.self.{n}").reshape(b, t, nh, d).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))
        s = np.where(mask[:, None, None, :] > 0, q @ k.transpose(0, 1, 3, 2) / np.sqrt(d), -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        ctx = ((s / s.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, t, h)
        x = _layer_norm(lin(ctx, "attention.output.dense") + x,
                        w[f"{p}attention.output.LayerNorm.gamma"],
                        w[f"{p}attention.output.LayerNorm.beta"], eps)
        x = _layer_norm(lin(_gelu(lin(x, "intermediate.dense")), "output.dense") + x,
                        w[f"{p}output.LayerNorm.gamma"], w[f"{p}output.LayerNorm.beta"], eps)
    y = _gelu(x @ w["cls.predictions.transform.dense.weight"].T
              + w["cls.predictions.transform.dense.bias"])
    y = _layer_norm(y, w["cls.predictions.transform.LayerNorm.gamma"],
                    w["cls.predictions.transform.LayerNorm.beta"], eps)
    logits = y @ w["bert.embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    return (np.log1p(np.maximum(logits, 0)) * mask[..., None]).max(axis=1)


def test_splade_onnx_graph_matches_numpy_reference(sparse):
    texts = SENTENCES + _random_texts(3, seed=7)
    enc = sparse.tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    ref = _splade_reference(ids, mask)
    got = sparse.pooled(texts)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    np.testing.assert_array_equal(got > 0, ref > 1e-6)


def test_splade_graph_pooling_first_gives_the_bits_of_the_first_graph(sparse, tmp_path):
    # the model version keeps the vectors' first tag (build_repo.SPLADE_VECTORS) only because the
    # graph that takes the maximum before the activation computes the very same bits
    from teleo_server.embedding.build_repo import SPLADE_VECTORS, locate, sha256
    from teleo_server.embedding.splade_onnx import export_splade

    export_splade(locate("sparse_weights").parent, tmp_path / "first.onnx", reference_pooling=True)
    first = SparseEncoder(tmp_path / "first.onnx", FILES.sparse_tokenizer, threads=1)
    long = " ".join(_random_texts(40, seed=12))
    while len(sparse.tokenizer.encode(long).ids) > 250:  # a nearly full window, beside short texts (padding)
        long = long[: int(len(long) * 0.9)]
    texts = SENTENCES + _random_texts(6, seed=11) + [long]
    np.testing.assert_array_equal(sparse.pooled(texts), first.pooled(texts))
    assert sha256(locate("sparse_weights")) in SPLADE_VECTORS


def test_splade_expands_terms():
    vocab = json.loads(FILES.sparse_tokenizer.read_text())["model"]["vocab"]
    enc = SparseEncoder(FILES.sparse_onnx, FILES.sparse_tokenizer, threads=1)
    out = enc.encode(["older adults are at risk"], [0])
    terms = {int(i) for i in out.ids[0, :out.counts[0]]}
    # expansion: words that are not in the text but mean the same
    assert {vocab["elderly"], vocab["adult"]} <= terms
    assert vocab["older"] in terms


@pytest.mark.parametrize("cap", [pytest.param(5, id="cap5"), pytest.param(64, id="cap64")])
def test_query_cap_keeps_heaviest_terms_sorted_by_id(sparse, cap):
    text = "GPU kernels compute sparse matrix-vector products for memory retrieval of agents."
    doc = sparse.encode([text], [0])
    query = sparse.encode([text], [cap])
    d_ids, d_w = doc.ids[0, :doc.counts[0]], doc.weights[0, :doc.counts[0]]
    q_ids, q_w = query.ids[0, :query.counts[0]], query.weights[0, :query.counts[0]]
    assert (d_w > 0).all() and (np.diff(d_ids) > 0).all()
    assert len(q_ids) == min(cap, len(d_ids)) and (np.diff(q_ids) > 0).all()
    # every kept term weighs at least as much as every dropped one, with its document weight
    kept = np.isin(d_ids, q_ids)
    np.testing.assert_array_equal(d_w[kept], q_w)
    if (~kept).any():
        assert q_w.min() >= d_w[~kept].max()


def test_empty_text_has_no_tokens_but_has_vectors(dense, sparse):
    d = dense.encode([""])
    assert d.token_counts[0] == 0 and np.isclose(np.linalg.norm(d.dense[0]), 1.0)
    s = sparse.encode([""], [0])
    assert s.counts[0] >= 0


def test_freed_memory_can_be_handed_back_to_the_system():
    """Large embedding calls end by returning the allocator's free pages (glibc here); the call
    answers False, not an error, where the C library has no such function."""
    import platform

    from teleo_server.heap import TRIM_AFTER_CHUNKS, release_memory

    assert TRIM_AFTER_CHUNKS > 0
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert release_memory() is True
    else:
        assert release_memory() in (True, False)
