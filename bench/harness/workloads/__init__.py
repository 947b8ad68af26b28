"""One module per workload; each exposes ``run(ctx)`` and writes its records through ``ctx.rec``."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.results import Recorder


@dataclass
class Context:
    cfg: dict[str, Any]
    rec: Recorder
    data: Path
    workdir: Path
    cache: Path
    backend: str = "numpy"
    peer_errors: dict[str, str] = field(default_factory=dict)

    def section(self, name: str) -> dict[str, Any]:
        return dict(self.cfg.get(name, {}))

    @property
    def seed(self) -> int:
        return int(self.cfg.get("seed", 0))

    def peers(self, wanted: list[str] | None = None) -> list[str]:
        names = list(self.cfg.get("peers", []))
        return [p for p in names if wanted is None or p in wanted]


def run(name: str, ctx: Context) -> None:
    importlib.import_module(f"bench.harness.workloads.{name}").run(ctx)


__all__ = ["Context", "run"]
