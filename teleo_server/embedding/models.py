"""The model code: MiniLM dense + per-token vectors and splade-tiny sparse vectors.

This module is the single implementation of every learned space. Triton's python-backend models
(``triton_models/*/1/model.py``) and :class:`~teleo_server.embedding.inprocess.InProcessEmbedder`
both call it, so the two serving paths give the same vectors for the same batch.

Conventions, decided here once:

* **Window.** MiniLM was trained on up to 256 word pieces, ``[CLS]`` and ``[SEP]`` included.
  An encoder never truncates: a text longer than the window is an error, and splitting long texts
  is :mod:`teleo_server.embedding.chunking`'s job.
* **Dense.** Attention-masked mean of ``last_hidden_state`` over every real token (``[CLS]`` and
  ``[SEP]`` included, as sentence-transformers pools), then L2-normalised. float32 (384,).
* **Per-token.** ``last_hidden_state`` with ``[CLS]``, ``[SEP]`` and padding dropped, because
  they match every query alike and would dominate MaxSim; each row L2-normalised; float16 (T, 384)
  where T = word pieces of the text.
* **Sparse.** splade-tiny: ``max_t(mask_t * log(1 + relu(logits_t)))`` over the vocabulary
  (pooled inside the ONNX graph). Documents keep every non-zero term. Queries keep their
  heaviest terms (``max_terms``, 64 by default): SpMV recall cost scales with query length, and
  a query's tail terms carry little weight. Terms are returned sorted by id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from teleo_server.embedding.repository import dense_per_text, model_repository_dir_of

DENSE_DIM = 384
MAX_WINDOW = 256          # word pieces per model call, [CLS] and [SEP] included
# Word pieces per model call (batch * padded length; a text longer than the budget still goes
# alone). On a CPU a call whose activations leave the caches is slower than several small ones:
# splade-tiny's logits are (B, T, 30522) float32, 250 MB at 2,048 pieces and 16 MB at 128, and
# MiniLM's 1,536-wide layers at 32 chunks of 256 pieces. With 256 and 128 (2-core Intel Xeon, two
# threads, everything a Store computes): 300 LoCoMo turns 3.35 -> 2.60 s, 64 SciFact abstracts
# (116 chunks) 10.7 -> 7.5 s, the same vectors. A GPU takes max_batch texts, splade-tiny up to
# 2,048 pieces (its logits' memory).
DENSE_TOKEN_BUDGET = 256
SPLADE_TOKEN_BUDGET = 128
SPLADE_GPU_TOKEN_BUDGET = 2048
PIPELINE_REVISION = "r1"  # bump when pooling/normalisation here changes the vectors
SPIN_ENTRY = "session.intra_op.allow_spinning"  # onnxruntime's session option (set to "0" below)


def _session(path: Path, threads: int, gpu: int | None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # No arena: onnxruntime's CPU arena grows to the largest batch ever run and never gives the
    # memory back (one 64 KB memory left the server 2.2 GB larger); without it each run's buffers
    # are freed when the run ends.
    opts.enable_cpu_mem_arena = False
    # Intra-op threads sleep when a run ends instead of spinning for more work: in the server
    # they spun through the retrieval that followed a query's embedding, on the same cores
    # (SciFact through gRPC, one client: query embedding 19 -> 11 ms, the pipeline's stages 31 ->
    # 14 ms for `teleological`; a batch of 64 abstracts embeds in the same time).
    opts.add_session_config_entry(SPIN_ENTRY, "0")
    providers: list = ["CPUExecutionProvider"]
    if gpu is not None:
        # a Triton KIND_GPU instance; needs onnxruntime-gpu, which fails here if CUDA is missing
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": gpu}))
    return ort.InferenceSession(str(path), sess_options=opts, providers=providers)


def load_tokenizer(path: Path):
    """A BERT word-piece tokenizer that pads to the longest text and never truncates."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


class WindowExceeded(ValueError):
    """A text has more word pieces than one model window; chunk it first."""


def _encode_ids(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encs = tokenizer.encode_batch(texts)
    ids = np.asarray([e.ids for e in encs], dtype=np.int64)
    mask = np.asarray([e.attention_mask for e in encs], dtype=np.int64)
    if ids.shape[1] > MAX_WINDOW:
        lengths = mask.sum(axis=1)
        worst = int(np.argmax(lengths))
        raise WindowExceeded(
            f"text {worst} has {int(lengths[worst])} word pieces; the window is {MAX_WINDOW}"
        )
    return ids, mask


def _length_batches(lengths: np.ndarray, max_batch: int, token_budget: int | None = None):
    """Index groups of similar length (less padding), in a deterministic order."""
    order = np.argsort(lengths, kind="stable")
    start = 0
    while start < len(order):
        stop = min(start + max_batch, len(order))
        if token_budget is not None:
            # order is ascending, so the group's padded length is its last member's
            while stop - start > 1 and (stop - start) * int(lengths[order[stop - 1]]) > token_budget:
                stop -= 1
        yield order[start:stop]
        start = stop


@dataclass(slots=True)
class DenseBatch:
    """MiniLM outputs for B texts.

    dense: float32 (B, 384), L2-normalised sentence vectors.
    tokens: float16 (B, Tmax, 384), per-token vectors, zero-padded past ``token_counts``.
    token_counts: int32 (B,), word pieces per text ([CLS]/[SEP] excluded).
    """

    dense: np.ndarray
    tokens: np.ndarray
    token_counts: np.ndarray


@dataclass(slots=True)
class SparseBatch:
    """splade-tiny outputs for B texts, padded to the longest.

    ids: int32 (B, Smax) vocabulary ids, ascending within a row; weights: float32 (B, Smax) > 0;
    counts: int32 (B,) valid entries per row.
    """

    ids: np.ndarray
    weights: np.ndarray
    counts: np.ndarray


class DenseEncoder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime's CPU provider.

    Parameters
    ----------
    onnx_path, tokenizer_path : files materialised by ``build_repo``.
    threads : onnxruntime intra-op threads.
    max_batch : texts per onnxruntime call; texts are grouped by length to limit padding, and on
        a CPU also held to ``DENSE_TOKEN_BUDGET`` word pieces a call (padding included).
    gpu : CUDA device id for onnxruntime's CUDA provider; None runs on the CPU.
    per_text : one text per call, for a graph whose vectors depend on what a text is batched with
        (activations quantised with one scale per call); by default what the repository holding
        ``onnx_path`` says of its graph (``repository.dense_per_text``).
    """

    def __init__(self, onnx_path: Path, tokenizer_path: Path, *, threads: int = 2,
                 max_batch: int = 32, gpu: int | None = None, per_text: bool | None = None) -> None:
        if per_text is None:
            per_text = dense_per_text(model_repository_dir_of(onnx_path))
        self._session = _session(onnx_path, threads, gpu)
        self.tokenizer = load_tokenizer(tokenizer_path)
        self._max_batch = 1 if per_text else max_batch
        self._token_budget = DENSE_TOKEN_BUDGET if gpu is None else None

    def encode(self, texts: list[str]) -> DenseBatch:
        """Embed B texts (each within the window). Raises WindowExceeded otherwise."""
        n = len(texts)
        if n == 0:
            return DenseBatch(np.zeros((0, DENSE_DIM), np.float32),
                              np.zeros((0, 0, DENSE_DIM), np.float16), np.zeros(0, np.int32))
        ids, mask = _encode_ids(self.tokenizer, texts)
        lengths = mask.sum(axis=1)
        counts = (lengths - 2).astype(np.int32)
        dense = np.empty((n, DENSE_DIM), np.float32)
        tokens = np.zeros((n, int(counts.max()), DENSE_DIM), np.float16)
        for group in _length_batches(lengths, self._max_batch, self._token_budget):
            width = int(lengths[group].max())
            g_ids, g_mask = ids[group, :width], mask[group, :width]
            hidden = self._session.run(
                ["last_hidden_state"],
                {"input_ids": g_ids, "attention_mask": g_mask,
                 "token_type_ids": np.zeros_like(g_ids)},
            )[0]
            dense[group] = _mean_pool(hidden, g_mask)
            for row, i in enumerate(group):
                t = int(counts[i])
                tokens[i, :t] = _l2(hidden[row, 1:t + 1].astype(np.float64)).astype(np.float16)
        return DenseBatch(dense, tokens, counts)


def _l2(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float64)
    summed = (hidden.astype(np.float64) * m).sum(axis=1)
    return _l2(summed / np.maximum(m.sum(axis=1), 1.0)).astype(np.float32)


class SparseEncoder:
    """splade-tiny on onnxruntime (the graph built by ``splade_onnx`` ends in the max-pool).

    Parameters
    ----------
    onnx_path, tokenizer_path : files materialised by ``build_repo``.
    threads : onnxruntime intra-op threads.
    max_batch : texts per onnxruntime call, also held to ``SPLADE_TOKEN_BUDGET`` word pieces a
        call on a CPU (``SPLADE_GPU_TOKEN_BUDGET`` on a GPU).
    gpu : CUDA device id for onnxruntime's CUDA provider; None runs on the CPU.
    """

    def __init__(self, onnx_path: Path, tokenizer_path: Path, *, threads: int = 2,
                 max_batch: int = 32, gpu: int | None = None) -> None:
        self._session = _session(onnx_path, threads, gpu)
        self.tokenizer = load_tokenizer(tokenizer_path)
        self._max_batch = max_batch
        self._token_budget = SPLADE_TOKEN_BUDGET if gpu is None else SPLADE_GPU_TOKEN_BUDGET

    def pooled(self, texts: list[str]) -> np.ndarray:
        """Vocabulary-sized SPLADE vectors, float32 (B, 30522), before any query cap."""
        ids, mask = _encode_ids(self.tokenizer, texts)
        lengths = mask.sum(axis=1)
        out: np.ndarray | None = None
        for group in _length_batches(lengths, self._max_batch, self._token_budget):
            width = int(lengths[group].max())
            g_ids = ids[group, :width]
            vec = self._session.run(
                ["SPLADE"],
                {"input_ids": g_ids, "attention_mask": mask[group, :width],
                 "token_type_ids": np.zeros_like(g_ids)},
            )[0]
            if out is None:
                out = np.empty((len(texts), vec.shape[1]), np.float32)
            out[group] = vec
        assert out is not None
        return out

    def encode(self, texts: list[str], max_terms: list[int]) -> SparseBatch:
        """Sparse (id, weight) lists for B texts; ``max_terms[i] > 0`` keeps the heaviest terms
        of text i (the query cap), 0 keeps every non-zero term (documents)."""
        if not texts:
            return SparseBatch(np.zeros((0, 0), np.int32), np.zeros((0, 0), np.float32),
                               np.zeros(0, np.int32))
        pooled = self.pooled(texts)
        rows = [_sparsify(v, m) for v, m in zip(pooled, max_terms)]
        counts = np.asarray([len(r[0]) for r in rows], np.int32)
        width = int(counts.max())
        ids = np.zeros((len(texts), width), np.int32)
        weights = np.zeros((len(texts), width), np.float32)
        for i, (r_ids, r_w) in enumerate(rows):
            ids[i, :len(r_ids)] = r_ids
            weights[i, :len(r_w)] = r_w
        return SparseBatch(ids, weights, counts)


def _sparsify(vec: np.ndarray, top_n: int) -> tuple[np.ndarray, np.ndarray]:
    nz = np.flatnonzero(vec > 0)
    if 0 < top_n < len(nz):
        # heaviest first; equal weights resolved by the lower id so the result is deterministic
        keep = np.lexsort((nz, -vec[nz]))[:top_n]
        nz = np.sort(nz[keep])
    return nz.astype(np.int32), vec[nz].astype(np.float32)


__all__ = [
    "DENSE_DIM",
    "DENSE_TOKEN_BUDGET",
    "DenseBatch",
    "DenseEncoder",
    "MAX_WINDOW",
    "PIPELINE_REVISION",
    "SPIN_ENTRY",
    "SPLADE_GPU_TOKEN_BUDGET",
    "SPLADE_TOKEN_BUDGET",
    "SparseBatch",
    "SparseEncoder",
    "WindowExceeded",
    "load_tokenizer",
]
