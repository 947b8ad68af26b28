"""Run ``kernels/*.cu`` on the CPU: each kernel's unmodified source compiled as host C++.

A module is compiled once (per source, header and compiler) into a shared library with the
header ``cuda_host.h`` (the CUDA device language on fibers: see its comment for the execution
model and its limits) plus one generated entry point per ``extern "C" __global__`` kernel. The
library is cached under ``$TELEO_EMU_CACHE`` (default ``~/.cache/teleo/emu``) and loaded with
ctypes. A kernel is then called as a ``cupy.RawKernel`` is: ``kernel(grid, block, args,
shared_mem=...)`` with NumPy arrays where the kernel takes device pointers and NumPy scalars
where it takes values; the argument list is checked against the kernel's parameter sizes.

Launches are serialised: a launch is a whole "device" (blocks in sequence on the calling thread).
This is a test instrument, not a CPU backend: the NumPy references are the CPU backend.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from teleo_server.compute.errors import DeviceLimit, InternalTypeError, InternalValueError
from teleo_server.gpu.loader import DEFAULT_SHARED_LIMIT, kernel_dir

HEADER = Path(__file__).with_name("cuda_host.h")
CACHE_ENV = "TELEO_EMU_CACHE"
CXX_ENV = "TELEO_EMU_CXX"
# What an H100 lets one block opt in to (sharedMemPerBlockOptin); launches above it fail, as there.
SHARED_OPTIN_LIMIT = 227 * 1024
# Multiprocessors the emulated device reports: small, so grid-stride loops take several turns.
SM_COUNT = 2
CXX_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-w")
# `extern __shared__` arrays become extern thread_local ones, defined constant-initialised by the
# harness: no dynamic TLS initialiser exists, and GCC must not call one.
GCC_FLAGS = ("-fno-extern-tls-init",)

_KERNEL = re.compile(r"__teleo_global__\s+void\s+([A-Za-z_]\w*)\s*\(")
_DYNAMIC_SHARED = re.compile(
    r"extern\s+thread_local\s+(?:alignas\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w\s]*?)\s+([A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_launch_lock = threading.Lock()


class EmulationUnavailable(RuntimeError):
    """No host C++ compiler, or the kernel source does not compile as host C++."""


def compiler() -> str | None:
    """The host C++ compiler: ``$TELEO_EMU_CXX``, else ``c++`` / ``g++`` / ``clang++`` on PATH."""
    env = os.environ.get(CXX_ENV)
    if env:
        return env
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def status() -> tuple[bool, str]:
    """Whether kernels can be emulated here, and why not when they cannot."""
    cxx = compiler()
    if cxx is None:
        return False, f"no host C++ compiler on PATH (set {CXX_ENV})"
    return True, f"kernels emulated on the CPU with {Path(cxx).name}"


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "teleo" / "emu"


def _run(cmd: list[str], what: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EmulationUnavailable(f"{what} failed ({' '.join(cmd[:2])} ...):\n{proc.stderr[-4000:]}")
    return proc.stdout


def _harness(source: Path, preprocessed: str) -> tuple[str, list[str]]:
    """The generated translation unit around ``source`` and the kernel names it exports."""
    kernels = sorted(set(_KERNEL.findall(preprocessed)))
    if not kernels:
        raise EmulationUnavailable(f"{source.name} declares no extern \"C\" __global__ kernel")
    lines = [f'#include "{HEADER}"']
    # The dynamic shared arrays are defined before the source declares them `extern`, so that the
    # compiler sees a constant-initialised thread_local and accesses it directly (no TLS wrapper).
    shared = sorted({(t.strip(), n) for t, n in _DYNAMIC_SHARED.findall(preprocessed)}, key=lambda x: x[1])
    for ctype, name in shared:
        lines.append(f"alignas(16) thread_local {ctype} {name}[{SHARED_OPTIN_LIMIT} / sizeof({ctype})];")
    lines += [f'#include "{source}"', ""]
    lines.append('extern "C" {')
    poison = " ".join(f"std::memset((void*){name}, 0xFF, n);" for _, name in shared)
    lines.append(f"void teleo_emu_poison_shared(std::size_t n) {{ {poison} }}")
    for k in kernels:
        lines.append(f"int teleo_emu_launch_{k}(const unsigned int* dims, void** args, char* err, std::size_t n) "
                     f"{{ return teleo_emu::launch(&{k}, dims, args, err, n); }}")
        lines.append(f"int teleo_emu_signature_{k}(int* sizes, int* kinds, int cap) "
                     f"{{ return teleo_emu::signature(&{k}, sizes, kinds, cap); }}")
    lines.append("}")
    return "\n".join(lines) + "\n", kernels


@functools.cache
def _compiler_id(cxx: str) -> str:
    return _run([cxx, "--version"], "querying the compiler").splitlines()[0]


def _flags(cxx: str) -> tuple[str, ...]:
    return CXX_FLAGS + (() if "clang" in _compiler_id(cxx).lower() else GCC_FLAGS)


def build(name: str) -> tuple[Path, list[str]]:
    """Compile ``kernels/<name>.cu`` for the host (cached); the library and its kernel names."""
    cxx = compiler()
    if cxx is None:
        raise EmulationUnavailable(status()[1])
    source = kernel_dir() / f"{name}.cu"
    pre = _run([cxx, "-std=c++17", "-E", "-P", "-DTELEO_EMU_SCAN", "-include", str(HEADER), "-x", "c++", str(source)],
               f"preprocessing {source.name}")
    harness, kernels = _harness(source, pre)
    digest = hashlib.sha256()
    for part in (HEADER.read_bytes(), source.read_bytes(), harness.encode(), _compiler_id(cxx).encode(),
                 " ".join(_flags(cxx)).encode()):
        digest.update(part)
    out_dir = cache_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / f"{name}-{digest.hexdigest()[:20]}.so"
    if not lib.is_file():
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            unit = Path(tmp) / f"{name}_host.cpp"
            unit.write_text(harness)
            built = Path(tmp) / lib.name
            _run([cxx, *_flags(cxx), "-o", str(built), str(unit)], f"compiling {source.name} for the host")
            os.replace(built, lib)  # atomic: a concurrent build of the same key writes the same bytes
    return lib, kernels


class EmulatedModule:
    """One compiled kernel module; ``get_function`` as ``cupy.RawModule`` has it."""

    def __init__(self, name: str) -> None:
        self.name = name
        path, self.kernels = build(name)
        self._lib = ctypes.CDLL(str(path))
        self._lib.teleo_emu_poison_shared.argtypes = [ctypes.c_size_t]
        self._lib.teleo_emu_poison_shared.restype = None

    def get_function(self, kernel: str) -> "EmulatedKernel":
        if kernel not in self.kernels:
            raise InternalValueError(f"kernel {kernel!r} is not in {self.name}.cu (it has {self.kernels})")
        return EmulatedKernel(self, kernel)


def _dims(v: Any) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
    if not 1 <= len(t) <= 3:
        raise InternalValueError(f"launch dimensions must have 1 to 3 entries, got {v!r}")
    return t + (1,) * (3 - len(t))  # type: ignore[return-value]


class EmulatedKernel:
    """One ``extern "C" __global__`` entry, called like ``cupy.RawKernel``."""

    def __init__(self, module: EmulatedModule, name: str) -> None:
        self.module, self.name = module, name
        lib = module._lib
        self._launch = getattr(lib, f"teleo_emu_launch_{name}")
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p,
                                 ctypes.c_size_t]
        self._launch.restype = ctypes.c_int
        signature = getattr(lib, f"teleo_emu_signature_{name}")
        sizes, kinds = (ctypes.c_int * 64)(), (ctypes.c_int * 64)()
        n = signature(sizes, kinds, 64)
        self.params = [(sizes[i], ("pointer", "float", "int")[kinds[i] - 1]) for i in range(n)]
        self.max_dynamic_shared_size_bytes = DEFAULT_SHARED_LIMIT

    def _holders(self, args: tuple) -> tuple[list[Any], Any]:
        if len(args) != len(self.params):
            raise InternalTypeError(f"{self.name} takes {len(self.params)} arguments, got {len(args)}")
        holders: list[Any] = []
        for i, (arg, (size, kind)) in enumerate(zip(args, self.params)):
            if kind == "pointer":
                if not isinstance(arg, np.ndarray):
                    raise InternalTypeError(f"{self.name} argument {i} is a pointer: pass a numpy array, "
                                            f"got {type(arg).__name__}")
                holders.append(ctypes.c_void_p(arg.ctypes.data))
                continue
            if not isinstance(arg, np.generic):
                raise InternalTypeError(f"{self.name} argument {i} is a value: pass a numpy scalar, got {type(arg).__name__}")
            is_float = np.issubdtype(arg.dtype, np.floating)
            if arg.dtype.itemsize != size or is_float != (kind == "float"):
                raise InternalTypeError(f"{self.name} argument {i} is a {size}-byte {kind}, got {arg.dtype}")
            holders.append(ctypes.create_string_buffer(arg.tobytes(), size))
        pointers = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(h) for h in holders])
        return holders, pointers

    def __call__(self, grid: Any, block: Any, args: tuple, *, shared_mem: int = 0, stream: Any = None) -> None:
        g, b = _dims(grid), _dims(block)
        if shared_mem > max(DEFAULT_SHARED_LIMIT, self.max_dynamic_shared_size_bytes):
            raise DeviceLimit(f"{self.name}: {shared_mem} bytes of dynamic shared memory exceed the "
                              f"{self.max_dynamic_shared_size_bytes} the kernel was given")
        if self.max_dynamic_shared_size_bytes > SHARED_OPTIN_LIMIT:
            raise DeviceLimit(f"{self.name}: asks for {self.max_dynamic_shared_size_bytes} bytes of shared memory; "
                              f"the device allows {SHARED_OPTIN_LIMIT}")
        holders, pointers = self._holders(tuple(args))
        dims = (ctypes.c_uint * 6)(*g, *b)
        err = ctypes.create_string_buffer(512)
        with _launch_lock:
            if shared_mem:
                self.module._lib.teleo_emu_poison_shared(int(shared_mem))  # uninitialised shared reads show as NaN
            rc = self._launch(dims, pointers, err, len(err))
        del holders
        if rc != 0:
            raise InternalValueError(f"emulated launch of {self.name} failed: {err.value.decode(errors='replace')}")


@functools.cache
def module(name: str) -> EmulatedModule:
    return EmulatedModule(name)


@functools.cache
def function(module_name: str, kernel: str) -> EmulatedKernel:
    return module(module_name).get_function(kernel)


__all__ = ["CACHE_ENV", "CXX_ENV", "EmulatedKernel", "EmulatedModule", "EmulationUnavailable", "SHARED_OPTIN_LIMIT",
           "SM_COUNT", "build", "cache_dir", "compiler", "function", "module", "status"]
