"""The environment a result was measured in: git sha, CPU, GPU, library versions."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = ("teleo", "numpy", "scipy", "hnswlib", "onnxruntime", "grpcio", "protobuf", "cupy-cuda12x",
             "cuvs-cu12", "pymilvus", "milvus-lite", "lancedb", "pyarrow", "bm25s", "matplotlib", "qdrant-edge-py",
             "tantivy", "sqlite-vec", "pysqlite3-binary", "chromadb")


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (this one by default), from /proc; 0 when unavailable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10, cwd=REPO).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str:
    """The first GPU's name from nvidia-smi, or "" (never imports CUDA libraries)."""
    if not shutil.which("nvidia-smi"):
        return ""
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else ""


def versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def machine_label(cores: int, gpu: str) -> str:
    """A short label for plots and tables, e.g. ``"2-core Xeon 8375C CPU"``."""
    model = cpu_model().replace("(R)", "").replace("(TM)", "").replace(" CPU", "").split("@")[0].strip()
    label = f"{cores}-core {model}"
    return f"{label} + {gpu}" if gpu else label


def environment() -> dict:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    gpu = gpu_name()
    sha = _run(["git", "rev-parse", "HEAD"])
    dirty = bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "cpu_model": cpu_model(),
        "cores": cores,
        "gpu": gpu,
        "machine": machine_label(cores, gpu),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": round(load[0], 2),
        "versions": versions(),
        "threads_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
                        if k in os.environ},
    }
