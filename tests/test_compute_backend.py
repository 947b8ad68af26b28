import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from teleo_server.compute import backend
from teleo_server.errors import InvalidArgument, Unavailable


def test_numpy_is_always_available():
    assert backend.resolve("numpy") == "numpy"
    ops = backend.ops("numpy")
    assert ops.name == "numpy"
    ids, scores = ops.topk(np.array([0.5, 2.0], np.float32), 1)
    assert ids.tolist() == [1] and scores.tolist() == [2.0]


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend must be one of") as info:
        backend.resolve("tpu")
    assert isinstance(info.value, InvalidArgument)


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
    code = "import sys, teleo_server.compute, teleo_server.gpu; assert 'cupy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_compute_never_imports_gpu():
    """``compute`` is the lower layer: ``gpu`` registers into it, never the other way round."""
    compute_dir = Path(backend.__file__).resolve().parent
    offenders = []
    for path in sorted(compute_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "teleo_server.gpu" or n.startswith("teleo_server.gpu.") for n in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"compute imports gpu at {offenders}"


def test_numpy_backend_leaves_gpu_unimported():
    code = (
        "import sys\n"
        "from teleo_server.compute import backend\n"
        "assert backend.ops('numpy').name == 'numpy'\n"
        "assert not any(m.startswith('teleo_server.gpu') for m in sys.modules), sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ops_uses_the_registered_factory(monkeypatch):
    monkeypatch.setattr(backend, "cupy_status", lambda: (True, "1 CUDA device(s)"))
    fake = backend.Ops("cupy", *([lambda *a, **k: None] * 6))
    monkeypatch.setitem(backend._factories, "cupy", lambda: fake)
    assert backend.ops("cupy") is fake
    assert backend.ops("auto") is fake


def test_cupy_backend_registers_itself_when_first_asked():
    """No CuPy needed: the executors are only bundled, not called."""
    code = (
        "import sys\n"
        "from teleo_server.compute import backend\n"
        "backend.cupy_status = lambda: (True, '1 CUDA device(s)')\n"
        "assert 'teleo_server.gpu.ops' not in sys.modules\n"
        "ops = backend.ops('cupy')\n"
        "from teleo_server.gpu import ops as gpu_ops\n"
        "assert ops.name == 'cupy' and ops.dense_topk.__wrapped__ is gpu_ops.dense_topk\n"
        "assert ops.topk.__wrapped__ is gpu_ops.topk\n"
        "emulated = backend.ops('emulated')\n"
        "assert emulated.name == 'emulated' and emulated.topk.__wrapped__ is gpu_ops.topk\n"
        "assert backend.ops('auto') is ops\n"
        "assert 'cupy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_register_takes_concrete_backends_only():
    with pytest.raises(ValueError, match="cannot register backend 'auto'"):
        backend.register("auto", lambda: None)
