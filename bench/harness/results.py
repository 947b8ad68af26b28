"""Result records: one JSON object per line, percentiles rather than means."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def percentiles(samples_ms: list[float] | np.ndarray) -> dict[str, float]:
    """p50/p95/p99/max of latency samples in ms (empty input gives NaNs)."""
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "max": float("nan"), "n": 0}
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99), "max": float(a.max()), "n": int(a.size)}


@dataclass
class Recorder:
    """Appends records to ``path``; every record carries the workload, system and machine label."""

    path: Path
    machine: str
    git_sha: str = ""
    append: bool = False
    replace: frozenset[str] = frozenset()  # with append: workloads whose old records are dropped
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        old = read(self.path) if self.append and self.path.is_file() else []
        self.records = [r for r in old if r.get("workload") not in self.replace]
        with self.path.open("w", encoding="utf-8") as f:
            for r in self.records:
                f.write(json.dumps(r, default=_jsonable) + "\n")

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        rec = {"ts": round(time.time(), 3), "machine": self.machine, "git": self.git_sha[:10], **record}
        self.records.append(rec)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=_jsonable, allow_nan=True) + "\n")
        return rec

    def add(self, workload: str, system: str, **fields: Any) -> dict[str, Any]:
        return self.write({"workload": workload, "system": system, **fields})

    def skip(self, workload: str, reason: str, system: str = "") -> dict[str, Any]:
        return self.write({"workload": workload, "system": system, "skipped": True, "reason": reason})


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
