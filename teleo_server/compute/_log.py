"""structlog when installed, else a stdlib shim with the same ``event, **keys`` call shape.

The GPU modules and their tests run on machines that carry only numpy, scipy, CuPy and pytest,
so nothing under ``compute/`` or ``gpu/`` may require structlog.
"""

from __future__ import annotations

import logging
from typing import Any

try:
    import structlog
except ImportError:  # pragma: no cover - exercised on the bare GPU test image
    structlog = None


class _StdlibLogger:
    def __init__(self, name: str) -> None:
        self._logger = logging.getLogger(name)

    def _log(self, level: int, event: str, **keys: Any) -> None:
        if self._logger.isEnabledFor(level):
            fields = " ".join(f"{k}={v!r}" for k, v in sorted(keys.items()))
            self._logger.log(level, "%s %s", event, fields)

    def debug(self, event: str, **keys: Any) -> None:
        self._log(logging.DEBUG, event, **keys)

    def info(self, event: str, **keys: Any) -> None:
        self._log(logging.INFO, event, **keys)

    def warning(self, event: str, **keys: Any) -> None:
        self._log(logging.WARNING, event, **keys)

    def error(self, event: str, **keys: Any) -> None:
        self._log(logging.ERROR, event, **keys)


def get_logger(name: str) -> Any:
    """A logger taking ``log.info("event_name", key=value)``."""
    if structlog is not None:
        return structlog.get_logger(name)
    return _StdlibLogger(name)


__all__ = ["get_logger"]
