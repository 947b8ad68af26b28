"""BLAS threads: one per operation in a server by default, as many as configured, none changed at 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from teleo_server import blas

_PROBE = """
import json, sys
import numpy as np
from teleo_server import blas
from teleo_server.config import Settings
from tests._server import InThreadServer
before = blas.threads()
extra = json.loads(sys.argv[1])
srv = InThreadServer.start(Settings(port=0, data_dir=sys.argv[2], dev_token_file=sys.argv[2] + ".token", **extra))
try:
    print("THREADS " + json.dumps({"before": before, "after": blas.threads()}), flush=True)
finally:
    srv.stop()
"""


def _numpy_blas() -> bool:
    np.ones((2, 2)) @ np.ones((2, 2))
    return bool(blas.threads())


def _server_threads(tmp_path, extra: str) -> dict[str, dict[str, int]]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env["OPENBLAS_NUM_THREADS"] = "2"  # what a 2-core machine's OpenBLAS starts with, on any machine
    out = subprocess.run([sys.executable, "-c", _PROBE, extra, str(tmp_path / "data")], capture_output=True, text=True,
                         env=env, timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("THREADS "))
    return json.loads(line.removeprefix("THREADS "))


def test_limit_threads_sets_every_loaded_openblas_and_reports_it():
    if not _numpy_blas():
        pytest.skip("this NumPy is not linked with OpenBLAS")
    old = blas.threads()
    try:
        changed = blas.limit_threads(1)
        assert set(changed) == set(old)
        assert set(blas.threads().values()) == {1}
        assert blas.limit_threads(0) == []  # 0: the libraries are left as they are
        assert set(blas.threads().values()) == {1}
    finally:
        for n in set(old.values()):
            blas.limit_threads(n)
    assert blas.threads() == old


def test_a_server_runs_blas_on_one_thread_unless_configured(tmp_path):
    if not _numpy_blas():
        pytest.skip("this NumPy is not linked with OpenBLAS")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    default = _server_threads(tmp_path / "default", "{}")
    assert set(default["before"].values()) == {min(2, cores)}  # the library's own, from its environment
    assert set(default["after"].values()) == {1}
    kept = _server_threads(tmp_path / "kept", '{"blas_threads": 0}')
    assert kept["after"] == kept["before"]
    two = _server_threads(tmp_path / "two", '{"blas_threads": 2}')
    assert set(two["after"].values()) == {min(2, cores)}
