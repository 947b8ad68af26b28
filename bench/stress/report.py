"""What each part reports: figures, targets met or not (or not measured), examples; JSON and markdown.

A target's ``met`` is True, False, or None when it could not be measured; a part passes only when
every one of its targets is met, so nothing unmeasured ever reads as passed.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not measured"
MAX_EXAMPLES = 20


@dataclass
class Target:
    name: str
    target: str          # the requirement, in words: "0 acknowledged writes lost"
    measured: Any        # the figure it was judged on (None when not measured)
    met: bool | None     # None: could not be measured
    note: str = ""


@dataclass
class Part:
    key: str
    title: str
    targets: list[Target] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)  # offending cases, at most MAX_EXAMPLES
    examples_total: int = 0
    seconds: float = 0.0
    error: str = ""      # the part could not run to its end (its targets then read as not measured)
    skipped: list[str] = field(default_factory=list)

    def target(self, name: str, target: str, measured: Any, met: bool | None, note: str = "") -> Target:
        t = Target(name, target, measured, met, note)
        self.targets.append(t)
        return t

    def example(self, **item: Any) -> None:
        self.examples_total += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({k: _short(v) for k, v in item.items()})

    @property
    def status(self) -> str:
        if not self.targets or any(t.met is None for t in self.targets):
            return FAIL if any(t.met is False for t in self.targets) else NOT_MEASURED
        return PASS if all(t.met for t in self.targets) else FAIL

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        return d


def _short(v: Any, width: int = 400) -> Any:
    if isinstance(v, str) and len(v) > width:
        return v[:width] + f"... ({len(v)} chars)"
    return v


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 2)


def _fmt(v: Any) -> str:
    if v is None:
        return "not measured"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def markdown(parts: list[Part], env: dict[str, Any], mode: str) -> str:
    if env.get("server_root"):  # the server ran from another checkout (--server-root)
        sha = f"server {(env.get('server_git_sha') or 'unknown')[:7]}"
    else:
        sha = (env.get("git_sha") or "")[:7] + ("+dirty" if env.get("git_dirty") else "")
    lines = [
        f"**Stress suite** ({mode} run, {env.get('date', '')[:10]}, {env.get('cores')}-core {env.get('cpu_model')}, "
        f"git `{sha}`, Python {env.get('python')}, grpcio {env.get('grpcio')})",
        "",
        "| part | target | measured | met |",
        "| --- | --- | --- | --- |",
    ]
    for p in parts:
        if p.error and not p.targets:
            lines.append(f"| {p.title} | - | could not run: {p.error[:120]} | not measured |")
        for t in p.targets:
            met = "not measured" if t.met is None else "yes" if t.met else "**no**"
            lines.append(f"| {p.title} | {t.target} | {_fmt(t.measured)} | {met} |")
    skipped = [f"{p.title}: {s}" for p in parts for s in p.skipped]
    if skipped:
        lines += ["", "Skipped: " + "; ".join(skipped)]
    return "\n".join(lines)


def write(path: Path, parts: list[Part], env: dict[str, Any], mode: str, seed: int, started: float,
          scratch: Path | None = None) -> dict[str, Any]:
    """Write the JSON; the scratch directory's path (in messages that name a data dir) reads ``<scratch>``."""
    doc = {
        "suite": "teleo stress",
        "mode": mode,
        "seed": seed,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "environment": env,
        "status": {p.key: p.status for p in parts},
        "parts": {p.key: p.to_json() for p in parts},
        "summary_markdown": markdown(parts, env, mode),
    }
    text = json.dumps(doc, indent=1, default=str)
    if scratch is not None:
        text = text.replace(str(scratch), "<scratch>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return json.loads(text)


__all__ = ["FAIL", "NOT_MEASURED", "PASS", "Part", "Target", "markdown", "ms", "percentile", "write"]
