"""Where Teleo keeps its files by default (XDG base directories). Imports nothing of Teleo's, so the
client library can use it without loading the server's settings."""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "teleo"


def default_token_file() -> Path:
    """Where clients look for a token when ``TELEO_TOKEN`` is unset."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "teleo" / "token"


__all__ = ["default_data_dir", "default_token_file"]
