"""Profiles: an ordered list of stages plus the settings they change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from teleo_server.errors import InvalidArgument
from teleo_server.spaces.registry import resolve_name

STAGES = ("sparse_recall", "dense", "entry", "single_space", "fusion", "alignment", "late_interaction", "finalize")


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    stages: tuple[str, ...]
    updates: dict[str, Any] = field(default_factory=dict)
    space: str = ""  # single_space profiles


_FIXED = {
    "teleological": Profile("teleological", ("sparse_recall", "dense", "fusion", "alignment", "late_interaction", "finalize")),
    "hybrid": Profile("hybrid", ("sparse_recall", "dense", "fusion", "finalize"),
                      {"fusion": "rrf", "space_weights": {"E1_semantic": 1.0, "E6_lexical": 1.0, "E13_splade": 1.0},
                       "hdc_candidates": 0}),
    "entry_point": Profile("entry_point", ("entry", "fusion", "alignment", "late_interaction", "finalize")),
}


def profile(name: str) -> Profile:
    """The profile called ``name``: a fixed one, or ``single_space:<space>``."""
    if name in _FIXED:
        return _FIXED[name]
    if name.startswith("single_space:"):
        wanted = name.split(":", 1)[1]
        try:
            space = resolve_name(wanted)
        except KeyError:
            raise InvalidArgument(f"unknown space {wanted!r}", field="profile") from None
        return Profile(f"single_space:{space}", ("single_space", "finalize"), {}, space)
    raise InvalidArgument(f"unknown profile {name!r}; expected one of {sorted(_FIXED)} or single_space:<name>",
                          field="profile")


def profile_names() -> list[str]:
    return sorted(_FIXED)


__all__ = ["STAGES", "Profile", "profile", "profile_names"]
