"""Both models and the chunker loaded from a model repository, called synchronously.

The in-process embedder runs this on a worker thread; Triton's models hold the same pieces.
"""

from __future__ import annotations

from concurrent.futures import Executor
from pathlib import Path

from teleo_server.domain import EmbeddingSet
from teleo_server.embedding import sets
from teleo_server.embedding.chunking import Chunker, ChunkPlan
from teleo_server.embedding.models import PIPELINE_REVISION, DenseEncoder, SparseEncoder
from teleo_server.embedding.repository import SETUP_HINT, ModelFiles, manifest_version
from teleo_server.errors import Unavailable
from teleo_server.heap import TRIM_AFTER_CHUNKS, release_memory
from teleo_server.heads import heads_signature


def version_string(models_version: str, plan: ChunkPlan, query_max_terms: int) -> str:
    """The model version an EmbeddingSet carries: weights, pooling code, chunking, query cap and
    the Python heads (none by default)."""
    return (f"{models_version}+{PIPELINE_REVISION}+{plan.signature}q{query_max_terms}"
            f"{heads_signature()}")


class Engine:
    """Chunk, embed with both models, assemble. Not thread-safe: call from one thread.

    Parameters
    ----------
    model_dir : a repository materialised by ``build_repo``.
    threads : onnxruntime intra-op threads per model.
    max_batch : chunk texts per onnxruntime call.
    helper : a thread on which splade-tiny runs while MiniLM runs on the caller's (as Triton's
        ``teleo_embed`` sends both models a batch at once), for a batch of queries or a single
        chunk: a query's embedding took 6.6 ms one model after the other, 5.2 side by side, a
        LoCoMo turn stored alone 11.4 -> 10.2 ms (2-core Intel Xeon, two threads each). Larger
        batches of documents run one model after the other: each keeps every core busy alone.
    """

    def __init__(self, model_dir: Path, *, threads: int = 2, max_batch: int = 32,
                 plan: ChunkPlan | None = None, query_max_terms: int = 64, helper: Executor | None = None) -> None:
        files = ModelFiles.in_dir(model_dir)
        missing = files.missing()
        if missing:
            raise Unavailable(f"model files missing ({missing[0]}): {SETUP_HINT}")
        self.plan = plan or ChunkPlan()
        self.version = version_string(manifest_version(model_dir), self.plan, query_max_terms)
        self.dense = DenseEncoder(files.dense_onnx, files.dense_tokenizer, threads=threads,
                                  max_batch=max_batch)
        self.sparse = SparseEncoder(files.sparse_onnx, files.sparse_tokenizer, threads=threads,
                                    max_batch=max_batch)
        self.query_max_terms = query_max_terms
        self.chunker = Chunker(self.dense.tokenizer, self.plan)
        self.helper = helper

    def embed(self, texts: list[str], is_query: list[bool]) -> list[EmbeddingSet]:
        chunks = sets.split(self.chunker, texts, is_query)
        max_terms = [self.query_max_terms if q else 0 for q in chunks.is_query]
        if self.helper is not None and (len(chunks) == 1 or all(chunks.is_query)):
            pending = self.helper.submit(self.sparse.encode, chunks.texts, max_terms)
            try:
                dense = self.dense.encode(chunks.texts)
            finally:
                sparse = pending.result()
        else:
            dense = self.dense.encode(chunks.texts)
            sparse = self.sparse.encode(chunks.texts, max_terms)
        vectors = sets.model_vectors(dense, sparse) | sets.python_vectors(chunks)
        out = sets.assemble(len(texts), chunks, vectors, self.version)
        if len(chunks.texts) > TRIM_AFTER_CHUNKS:
            del dense, sparse, vectors
            release_memory()
        return out


__all__ = ["Engine", "version_string"]
