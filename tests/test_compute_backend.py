import numpy as np
import pytest

from teleo_server.compute import backend
from teleo_server.errors import Unavailable


def test_numpy_is_always_available():
    assert backend.resolve("numpy") == "numpy"
    ops = backend.ops("numpy")
    assert ops.name == "numpy"
    ids, scores = ops.topk(np.array([0.5, 2.0], np.float32), 1)
    assert ids.tolist() == [1] and scores.tolist() == [2.0]


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend must be one of"):
        backend.resolve("tpu")


def test_auto_follows_cupy_availability():
    ok, _ = backend.cupy_status()
    assert backend.resolve("auto") == ("cupy" if ok else "numpy")


def test_missing_cupy_fails_with_install_hint(monkeypatch):
    monkeypatch.setattr(backend, "cupy_status", lambda: (False, "CuPy is not installed"))
    with pytest.raises(Unavailable, match=r"teleo\[gpu\]") as info:
        backend.resolve("cupy")
    assert info.value.retryable
    assert backend.resolve("auto") == "numpy"


def test_importing_compute_does_not_import_cupy():
    import subprocess
    import sys

    code = "import sys, teleo_server.compute, teleo_server.gpu; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
