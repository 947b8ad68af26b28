"""NumPy reference scorers (the CPU backend and the test oracle) and backend selection.

Submodules ``sparse``, ``maxsim``, ``dense`` and ``topk`` each hold the function of the same
purpose; they are not re-exported under their module's name, so ``compute.maxsim`` stays the
module.
"""

from teleo_server.compute.backend import Ops, ops, resolve
from teleo_server.compute.dense import dense_scores, dense_topk
from teleo_server.compute.sparse import spmv_scores, spmv_topk

__all__ = ["Ops", "dense_scores", "dense_topk", "ops", "resolve", "spmv_scores", "spmv_topk"]
