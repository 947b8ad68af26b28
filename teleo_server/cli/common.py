"""Helpers shared by the command groups of ``teleo``."""

from __future__ import annotations

import argparse
from pathlib import Path


def local_settings(args: argparse.Namespace, **extra: object):
    """The server's settings from ``--config`` and ``--data-dir``, with the non-None ``extra`` overrides."""
    from teleo_server.config import load_settings

    overrides = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    return load_settings(getattr(args, "config", None), **overrides)


__all__ = ["local_settings"]
