"""NumPy reference scorers (the CPU backend and the test oracle) and backend selection."""

from teleo_server.compute.backend import Ops, ops, resolve
from teleo_server.compute.dense import dense_scores, dense_topk
from teleo_server.compute.maxsim import maxsim
from teleo_server.compute.sparse import spmv_scores, spmv_topk
from teleo_server.compute.topk import topk

__all__ = [
    "Ops",
    "dense_scores",
    "dense_topk",
    "maxsim",
    "ops",
    "resolve",
    "spmv_scores",
    "spmv_topk",
    "topk",
]
