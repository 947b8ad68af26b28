"""One-line, human-readable reasons for a result."""

from __future__ import annotations

from teleo_server.index.purpose import Goal


def explanation(found_by: tuple[str, ...], goal: Goal | None, goal_score: float, late: float | None,
                misaligned: bool, temporal: float) -> str:
    """e.g. "found by E1+E13; goal 'deploy pipeline' 0.82; MaxSim 0.71"."""
    parts = ["found by " + ("+".join(n.split("_")[0] for n in found_by) if found_by else "refinement")]
    if goal is not None:
        parts.append(f"goal '{goal.label}' {goal_score:.2f}")
    if late is not None:
        parts.append(f"MaxSim {late:.2f}")
    if temporal < 0.999:
        parts.append(f"decay x{temporal:.2f}")
    if misaligned:
        parts.append("misaligned")
    return "; ".join(parts)


__all__ = ["explanation"]
