"""Profiles: ordered stage names plus the settings they change, read from ``PipelineSettings``.

Profiles are data (``pipeline.profiles`` in the server's settings or TOML); ``single_space:<space>``
is a family of profiles made on demand, one per registered space.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from teleo_server.errors import InvalidArgument
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.pipeline.stages import get_stage
from teleo_server.spaces.registry import resolve_name, space_classes

SINGLE_SPACE = "single_space:"
# settings a profile may not change: they name profiles and roles themselves
# settings a profile cannot change: the registries themselves, and each space's index settings
# (an index is built once, not per query)
_NOT_PROFILE_SETTINGS = {"profiles", "default_profile", "roles", "spaces", "analyzer", "breaker_threshold",
                         "breaker_reset_s"}


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    stages: tuple[str, ...]
    updates: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)  # stage parameters (single_space: "space")
    without_embedding: str = ""  # the profile that runs instead for a query without an embedding


def profile(name: str, settings: PipelineSettings, field_name: str = "profile") -> Profile:
    """The profile called ``name`` ("" = the default profile)."""
    name = name or settings.default_profile
    spec = settings.profiles.get(name)
    if spec is not None:
        return Profile(name, spec.stages, dict(spec.settings), without_embedding=spec.without_embedding)
    if name.startswith(SINGLE_SPACE):
        wanted = name[len(SINGLE_SPACE):]
        try:
            space = resolve_name(wanted)
        except KeyError:
            raise InvalidArgument(f"unknown space {wanted[:64]!r}; expected one of {list(space_classes())}",
                                  field=field_name) from None
        return Profile(f"{SINGLE_SPACE}{space}", ("single_space", "finalize"), {}, {"space": space})
    raise InvalidArgument(f"unknown profile {name[:64]!r}; expected one of {sorted(settings.profiles)} or "
                          f"{SINGLE_SPACE}<space>", field=field_name)


def check(settings: PipelineSettings) -> None:
    """Every configured profile names registered stages and real settings; every role a space.

    Raises InvalidArgument naming the setting, so a bad configuration stops start-up with a message.
    """
    fields = set(PipelineSettings.model_fields) - _NOT_PROFILE_SETTINGS
    for name, spec in settings.profiles.items():
        where = f"pipeline.profiles.{name}"
        for stage_name in spec.stages:
            get_stage(stage_name, field=f"{where}.stages")
        if spec.without_embedding and spec.without_embedding not in settings.profiles:
            raise InvalidArgument(f"names unknown profile {spec.without_embedding!r}; expected one of "
                                  f"{sorted(settings.profiles)}", field=f"{where}.without_embedding")
        unknown = sorted(set(spec.settings) - fields)
        if unknown:
            raise InvalidArgument(f"unknown settings {unknown}", field=f"{where}.settings")
        try:
            PipelineSettings.model_validate({**settings.model_dump(exclude=_NOT_PROFILE_SETTINGS), **spec.settings})
        except ValueError as exc:
            raise InvalidArgument(str(exc).replace("\n", " "), field=f"{where}.settings") from None
    profile(settings.default_profile, settings, field_name="pipeline.default_profile")
    known = space_classes()
    for role, space in settings.roles.items():
        if space not in known:
            raise InvalidArgument(f"role {role!r} names unknown space {space!r}", field=f"pipeline.roles.{role}")


def profile_names(settings: PipelineSettings) -> list[str]:
    return sorted(settings.profiles)


__all__ = ["SINGLE_SPACE", "Profile", "check", "profile", "profile_names"]
