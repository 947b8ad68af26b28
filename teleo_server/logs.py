"""structlog configuration: JSON lines on stderr with a timestamp, level and bound request context."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(fmt: str = "json", debug: bool = False, quiet: bool = False) -> None:
    """quiet: warnings and errors only (CLI client commands, whose stdout is their output)."""
    level = logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


__all__ = ["configure"]
