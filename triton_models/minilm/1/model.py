"""Triton python-backend model: MiniLM sentence and per-token vectors.

The computation is ``teleo_server.embedding.models.DenseEncoder``, the same code the in-process
embedder runs. Requests queued together by the dynamic batcher are embedded as one batch.
"""

import triton_python_backend_utils as pb_utils

from teleo_server.embedding import triton_backend as tb
from teleo_server.embedding.models import DenseEncoder
from teleo_server.embedding.repository import ModelFiles
from teleo_server.embedding.wire import decode_strings


class TritonPythonModel:
    def initialize(self, args):
        files = ModelFiles.in_dir(tb.repository_root(args))
        self.encoder = DenseEncoder(files.dense_onnx, files.dense_tokenizer, **tb.encoder_options(args))

    def execute(self, requests):
        return tb.execute_isolated(pb_utils, requests, self._parse, self._run)

    def _parse(self, request):
        return decode_strings(tb.input_array(pb_utils, request, "TEXT"))

    def _run(self, items):
        batch = self.encoder.encode([t for texts in items for t in texts])
        out = []
        for a, b in tb.offsets([len(texts) for texts in items]):
            counts = batch.token_counts[a:b]
            out.append({"DENSE": batch.dense[a:b],
                        "TOKENS": tb.fit_axis1(batch.tokens[a:b], max(1, int(counts.max(initial=0)))),
                        "TOKEN_COUNT": counts.reshape(-1, 1)})
        return out
