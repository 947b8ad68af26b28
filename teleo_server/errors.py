"""Transport-agnostic errors. ``api/status.py`` maps them to gRPC status codes in one place.

    TeleoError                    retryable=False
    ├── InvalidArgument           a request field is wrong; names the field
    ├── NotFound                  an id that does not exist or the caller may not see
    ├── Unauthenticated           no token, or a bad/revoked one
    ├── PermissionDenied          authenticated, but outside the token's scope
    ├── ResourceExhausted         a size or rate limit; retry later with less
    ├── Unavailable               a dependency (Triton, GPU) is down; retryable=True
    └── Internal                  a bug or broken invariant

Third-party exceptions are wrapped where they are caught: ``raise Unavailable(...) from exc``.
"""

from __future__ import annotations


class TeleoError(Exception):
    retryable = False

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message)


class InvalidArgument(TeleoError):
    pass


class NotFound(TeleoError):
    pass


class Unauthenticated(TeleoError):
    pass


class PermissionDenied(TeleoError):
    pass


# Trailing metadata of a refusal that did nothing and may be retried after this many milliseconds
# (the server was saturated); clients retry RESOURCE_EXHAUSTED only when it is present.
RETRY_AFTER_KEY = "teleo-retry-after-ms"


class ResourceExhausted(TeleoError):
    """A limit was reached. ``retry_after`` (seconds) is set when the refusal did nothing and the same
    call may succeed after that long (saturation); None when it must change first (too large)."""

    retryable = True

    def __init__(self, message: str, *, field: str | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after = retry_after


class Unavailable(TeleoError):
    retryable = True


class Internal(TeleoError):
    pass


__all__ = [
    "RETRY_AFTER_KEY",
    "TeleoError",
    "InvalidArgument",
    "NotFound",
    "Unauthenticated",
    "PermissionDenied",
    "ResourceExhausted",
    "Unavailable",
    "Internal",
]
