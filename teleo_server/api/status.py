"""The one place where Teleo's errors become gRPC status codes."""

from __future__ import annotations

import grpc

from teleo_server import errors

_CODES: dict[type[errors.TeleoError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.Internal: grpc.StatusCode.INTERNAL,
}


def status_of(exc: BaseException) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in _CODES:
            return _CODES[cls]  # type: ignore[index]
    return grpc.StatusCode.INTERNAL


__all__ = ["status_of"]
