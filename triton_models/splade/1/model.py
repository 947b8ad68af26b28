"""Triton python-backend model: splade-tiny sparse vectors.

The computation is ``teleo_server.embedding.models.SparseEncoder``, the same code the in-process
embedder runs. ``MAX_TERMS`` > 0 keeps a text's heaviest terms (the query cap); 0 keeps all.
"""

import triton_python_backend_utils as pb_utils

from teleo_server.embedding import triton_backend as tb
from teleo_server.embedding.models import SparseEncoder
from teleo_server.embedding.repository import ModelFiles
from teleo_server.embedding.wire import decode_strings


class TritonPythonModel:
    def initialize(self, args):
        files = ModelFiles.in_dir(tb.repository_root(args))
        self.encoder = SparseEncoder(files.sparse_onnx, files.sparse_tokenizer, **tb.encoder_options(args))

    def execute(self, requests):
        return tb.execute_isolated(pb_utils, requests, self._parse, self._run)

    def _parse(self, request):
        texts = decode_strings(tb.input_array(pb_utils, request, "TEXT"))
        max_terms = tb.input_array(pb_utils, request, "MAX_TERMS").reshape(-1).astype(int)
        if len(max_terms) != len(texts) or (max_terms < 0).any():
            raise ValueError("MAX_TERMS needs one value >= 0 per TEXT")
        return texts, max_terms.tolist()

    def _run(self, items):
        batch = self.encoder.encode([t for texts, _ in items for t in texts],
                                    [m for _, terms in items for m in terms])
        out = []
        for a, b in tb.offsets([len(texts) for texts, _ in items]):
            width = max(1, int(batch.counts[a:b].max(initial=0)))
            out.append({"SPARSE_IDS": tb.fit_axis1(batch.ids[a:b], width),
                        "SPARSE_WEIGHTS": tb.fit_axis1(batch.weights[a:b], width),
                        "SPARSE_COUNT": batch.counts[a:b].reshape(-1, 1)})
        return out
