"""Config groups: small TOML files in ``bench/configs/`` named after the group."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
WORKLOADS = ("correctness", "quality", "scale", "latency", "ingest")


def groups() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.toml"))


def load(group: str) -> dict[str, Any]:
    """The parsed group; raises ValueError naming the known groups when ``group`` is unknown."""
    path = CONFIG_DIR / f"{group}.toml"
    if not path.is_file():
        raise ValueError(f"no config group {group!r}; known: {', '.join(groups())}")
    cfg = tomllib.loads(path.read_text(encoding="utf-8"))
    unknown = [w for w in cfg.get("workloads", []) if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"{path.name}: unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    cfg.setdefault("seed", 0)
    cfg.setdefault("backend", "numpy")
    cfg.setdefault("peers", [])
    cfg["group"] = group
    return cfg
