"""The one place spaces are registered. A new space is one module in this package that defines a
``Space`` subclass decorated with ``@register``; it is discovered on first use."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from pydantic import ValidationError

from teleo_server.config import invalid_configuration
from teleo_server.errors import InvalidArgument
from teleo_server.index.base import serving, unavailable_for
from teleo_server.index.catalog import Catalog
from teleo_server.pipeline_settings import PipelineSettings
from teleo_server.spaces.base import NamedBackend, Space

_REGISTRY: dict[str, type[Space]] = {}
_NOT_SPACES = {"base", "dense_head", "fielded", "registry", "text"}
_discovered = False
# space_classes()'s answer until a space is registered or removed: every request's settings
# resolve their space names through it, several times a query
_ordered: dict[str, type[Space]] | None = None


def register(cls: type[Space]) -> type[Space]:
    global _ordered
    if not cls.name or cls.name in _REGISTRY:
        raise ValueError(f"space name {cls.name!r} is empty or registered twice")
    _REGISTRY[cls.name] = cls
    _ordered = None
    return cls


def unregister(name: str) -> None:
    """Remove a space (for plugins and tests); retrievers built earlier keep theirs."""
    global _ordered
    _REGISTRY.pop(name, None)
    _ordered = None


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    package = importlib.import_module("teleo_server.spaces")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name not in _NOT_SPACES:
            importlib.import_module(f"teleo_server.spaces.{info.name}")
    _discovered = True


def space_classes() -> dict[str, type[Space]]:
    """Every registered space class by name, in E-number order (a new dict: the caller may keep
    or change it)."""
    global _ordered
    _discover()
    if _ordered is None:
        _ordered = dict(sorted(_REGISTRY.items(), key=lambda kv: int(kv[0].split("_")[0][1:])))
    return dict(_ordered)


def build_spaces(settings: PipelineSettings, catalog: Catalog, ops: Any = None,
                 runtime: str | None = None) -> dict[str, Space]:
    """One instance of every registered space; ``ops`` are the host scorers their indexes use and
    ``runtime`` where the retriever keeps device rows (None: on the host). A space that can be
    served by an index backend is given the one that serves it (``NamedBackend.named``): the one its
    ``index`` setting names, else on a device the device default of its kind."""
    classes = space_classes()
    for name in settings.spaces:
        if name not in classes:
            raise InvalidArgument(f"invalid configuration:\n  pipeline.spaces.{name}: no such space; known: "
                                  f"{sorted(classes)}")
    spaces: dict[str, Space] = {}
    for name, cls in classes.items():
        try:
            spaces[name] = space = cls(settings, catalog)
        except ValidationError as exc:
            raise invalid_configuration(exc, ("pipeline", "spaces", name)) from exc
        space.ops, space.runtime = ops, runtime
        if not isinstance(space, NamedBackend):
            continue
        setting = space.config.index
        space.named = serving(setting, space.index_kind, runtime)
        why = unavailable_for(space.named, runtime) if space.named else None
        if why is not None:  # at start, not at the first write or query
            where = f"pipeline.spaces.{name}.index {setting!r}" if setting else f"pipeline.spaces.{name} on a device"
            raise InvalidArgument(f"invalid configuration:\n  {where}: {why}")
    for space in spaces.values():
        space.attach(spaces)
    return spaces


def resolve_name(name: str) -> str:
    """Accept a full name ("E1_semantic"), its code ("E1") or its suffix ("semantic")."""
    names = space_classes()
    if name in names:
        return name
    for full in names:
        code, _, suffix = full.partition("_")
        if name.lower() in (code.lower(), suffix.lower()):
            return full
    raise KeyError(name)


__all__ = ["build_spaces", "register", "resolve_name", "space_classes", "unregister"]
