"""Generated evaluation sets committed as JSON lines: write them, or check the committed files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write_or_check(files: dict[Path, str], check: bool, command: str) -> int:
    """Write each file's text, or with ``check`` compare it with the committed file: 1 (and a line
    naming the stale files and ``command``, which regenerates them) when any differs, else 0."""
    if check:
        stale = [p.name for p, text in files.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"out of date: {', '.join(stale)} (run {command})", file=sys.stderr)  # noqa: T201
            return 1
        return 0
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    return 0


__all__ = ["jsonl", "write_or_check"]
