"""Config groups: small TOML files in ``bench/configs/`` named after the group."""

from __future__ import annotations

import json
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


def override(cfg: dict[str, Any], item: str) -> None:
    """Apply ``section.key=<JSON value>`` (or ``key=<JSON>`` at top level) to ``cfg`` in place."""
    path, sep, raw = item.partition("=")
    if not sep:
        raise ValueError(f"--set wants SECTION.KEY=JSON, got {item!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw  # a bare word is a string
    *sections, key = path.split(".")
    node = cfg
    for s in sections:
        node = node.setdefault(s, {})
    node[key] = value
