"""Modules that extend Teleo from outside the package: a plugin registers embedding heads, spaces,
stages or index backends when it is imported.

The server imports the modules named by the ``plugins`` setting (``TELEO_PLUGINS``, a JSON list of
module names) before it builds anything; Triton's ``teleo_embed`` model reads the same variable,
so a plugin's heads are computed on both serving paths.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable

from teleo_server.errors import InvalidArgument

ENV = "TELEO_PLUGINS"
_loaded: list[str] = []


def load_plugins(names: Iterable[str]) -> list[str]:
    """Import each module once, in order; returns the modules loaded by this call."""
    fresh = []
    for name in names:
        if name in _loaded:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise InvalidArgument(f"plugin module {name!r} cannot be imported: {exc}",
                                  field="plugins") from exc
        _loaded.append(name)
        fresh.append(name)
    return fresh


def plugins_from_env(environ: dict[str, str] | None = None) -> list[str]:
    """Module names from ``TELEO_PLUGINS`` (a JSON list, or names separated by commas)."""
    raw = (environ if environ is not None else os.environ).get(ENV, "").strip()
    if not raw:
        return []
    if raw.startswith("["):
        names = json.loads(raw)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidArgument(f"{ENV} must be a JSON list of module names", field="plugins")
        return names
    return [n.strip() for n in raw.split(",") if n.strip()]


def loaded() -> list[str]:
    return list(_loaded)


__all__ = ["ENV", "load_plugins", "loaded", "plugins_from_env"]
