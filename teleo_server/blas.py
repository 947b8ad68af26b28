"""How many threads the BLAS libraries loaded in this process may use for one operation.

NumPy's wheels bundle OpenBLAS (SciPy's bundle another), and by default OpenBLAS starts one worker
thread per core when it is loaded. The server already runs several operations at once (one per
Retrieve in flight, plus the index and embedding workers), so a matrix product that fans out over
every core mostly contends with the others. Those threads are also started by whichever thread
first loads the library, so they run at the event loop's priority rather than at the workers'
lower one (``workers.py``), and each keeps buffers of its own.

Measured through the server on SciFact (5,183 abstracts, a 2-core Intel Xeon), one
thread instead of the default two: ``teleological`` with 4 clients p50 168-173 -> 130 ms and
23-24 -> 30-31 queries/s; 1 client and ``hybrid`` unchanged within noise; the loaded server 8 MB
smaller (20.4 KB a memory instead of 21.9, loaded minus empty).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# setter symbols of OpenBLAS builds, plain and as NumPy / SciPy rename them
_SETTERS = ("openblas_set_num_threads", "scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads")
_GETTERS = ("openblas_get_num_threads", "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads")
_ENV = "OPENBLAS_NUM_THREADS"


def loaded_libraries() -> list[Path]:
    """OpenBLAS libraries mapped into this process now (Linux; empty elsewhere)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    found: dict[str, None] = {}
    for line in lines:
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode[, path]
        path = fields[5] if len(fields) == 6 else ""
        if path.startswith("/") and "openblas" in Path(path).name.lower():
            found.setdefault(path)
    return [Path(p) for p in found]


def _functions(names: tuple[str, ...]) -> Iterator[tuple[Path, Any]]:
    """(library, function) for each loaded OpenBLAS that exports one of ``names`` (the first)."""
    for path in loaded_libraries():
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            continue
        fn = next((f for f in (getattr(lib, name, None) for name in names) if f is not None), None)
        if fn is not None:
            yield path, fn


def threads() -> dict[str, int]:
    """Library file name -> the threads it may use now (libraries that say)."""
    out: dict[str, int] = {}
    for path, fn in _functions(_GETTERS):
        fn.restype = ctypes.c_int
        out[path.name] = int(fn())
    return out


def limit_threads(n: int) -> list[str]:
    """At most ``n`` threads for each BLAS operation: in every OpenBLAS loaded now, and (through
    ``OPENBLAS_NUM_THREADS``, unless it is set already) in those loaded later. ``n`` 0 leaves the
    libraries' own defaults. Returns the names of the libraries changed."""
    if n <= 0:
        return []
    os.environ.setdefault(_ENV, str(n))
    changed: list[str] = []
    for path, fn in _functions(_SETTERS):
        fn.argtypes, fn.restype = [ctypes.c_int], None
        fn(int(n))
        changed.append(path.name)
    return changed


__all__ = ["limit_threads", "loaded_libraries", "threads"]
