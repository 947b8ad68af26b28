"""Triton python-backend BLS model: a text's whole embedding set in one request.

Chunks each text (``teleo_server.embedding.chunking``), sends every chunk of every queued
request to ``minilm`` and ``splade`` concurrently, and assembles one EmbeddingSet per text with
the same code the in-process embedder uses (``teleo_server.embedding.sets``, which also computes
the Python heads), packed as ``teleo_server.embedding.wire`` describes.
"""

import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils

from teleo_server.embedding import sets, wire
from teleo_server.embedding import triton_backend as tb
from teleo_server.embedding.chunking import Chunker, ChunkPlan
from teleo_server.embedding.engine import version_string
from teleo_server.embedding.models import DenseBatch, SparseBatch, load_tokenizer
from teleo_server.embedding.repository import (
    DENSE_MODEL,
    SPARSE_MODEL,
    ModelFiles,
    manifest_version,
)
from teleo_server.plugins import load_plugins, plugins_from_env

ROLES = {"query": True, "document": False}


class TritonPythonModel:
    def initialize(self, args):
        load_plugins(plugins_from_env())  # the server's Python heads, computed here as well
        params = tb.parameters(args)
        root = tb.repository_root(args)
        plan = ChunkPlan(int(params.get("CHUNK_TOKENS", "254")),
                         int(params.get("CHUNK_OVERLAP", "32")))
        self.query_max_terms = int(params.get("QUERY_MAX_TERMS", "64"))
        self.sub_batch = int(params.get("SUB_BATCH", "64"))  # <= max_batch_size of both models
        self.chunker = Chunker(load_tokenizer(ModelFiles.in_dir(root).dense_tokenizer), plan)
        self.version = version_string(manifest_version(root), plan, self.query_max_terms)

    async def execute(self, requests):
        return await tb.execute_isolated_async(pb_utils, requests, self._parse, self._run)

    def _parse(self, request):
        texts = wire.decode_strings(tb.input_array(pb_utils, request, "TEXT"))
        roles = wire.decode_strings(tb.input_array(pb_utils, request, "ROLE"))
        if len(roles) != len(texts) or any(r not in ROLES for r in roles):
            raise ValueError("ROLE needs one of 'query' or 'document' per TEXT")
        return texts, [ROLES[r] for r in roles]

    async def _run(self, items):
        texts = [t for ts, _ in items for t in ts]
        chunks = sets.split(self.chunker, texts, [q for _, qs in items for q in qs])
        max_terms = [self.query_max_terms if q else 0 for q in chunks.is_query]
        groups = [(a, min(a + self.sub_batch, len(chunks))) for a in range(0, len(chunks),
                                                                             self.sub_batch)]
        results = await asyncio.gather(
            *[self._dense(chunks.texts[a:b]) for a, b in groups],
            *[self._sparse(chunks.texts[a:b], max_terms[a:b]) for a, b in groups])
        dense = sets.concat_dense(list(results[:len(groups)]))
        sparse = sets.concat_sparse(list(results[len(groups):]))
        vectors = sets.model_vectors(dense, sparse) | sets.python_vectors(chunks)
        embedded = sets.assemble(len(texts), chunks, vectors, self.version)
        return [wire.pack(embedded[a:b]) for a, b in tb.offsets([len(ts) for ts, _ in items])]

    async def _call(self, model, inputs, outputs):
        response = await pb_utils.InferenceRequest(
            model_name=model, requested_output_names=outputs, inputs=inputs).async_exec()
        if response.has_error():
            raise RuntimeError(f"{model}: {response.error().message()}")
        return [pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in outputs]

    async def _dense(self, texts):
        dense, tokens, counts = await self._call(
            DENSE_MODEL, [pb_utils.Tensor("TEXT", wire.encode_strings(texts))],
            ["DENSE", "TOKENS", "TOKEN_COUNT"])
        return DenseBatch(dense, tokens, counts.reshape(-1))

    async def _sparse(self, texts, max_terms):
        ids, weights, counts = await self._call(
            SPARSE_MODEL, [pb_utils.Tensor("TEXT", wire.encode_strings(texts)),
                           pb_utils.Tensor("MAX_TERMS", np.asarray(max_terms, np.int32)
                                           .reshape(-1, 1))],
            ["SPARSE_IDS", "SPARSE_WEIGHTS", "SPARSE_COUNT"])
        return SparseBatch(ids, weights, counts.reshape(-1))
