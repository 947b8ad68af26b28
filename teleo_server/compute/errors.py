"""Errors of the scorers: classes of the project's tree that are also the builtin they replace.

Both backends raise the same class for the same bad input:

* :class:`InvalidValue` — a value a request can carry is wrong (a query vector of the wrong
  width, sparse ids and weights of different lengths, ``k < 0``, a prefix ``dim`` out of range);
  ``InvalidArgument``, so the caller sees INVALID_ARGUMENT and a message saying what to change.
* :class:`InternalValueError`, :class:`InternalTypeError` — arrays the server built disagree
  (an inconsistent index, a mask of the wrong length, a device array of the wrong dtype);
  ``Internal``.
* :class:`DeviceLimit` — the request is valid but too large for the device; ``ResourceExhausted``.

Each is still a ``ValueError`` (or ``TypeError``), so NumPy-style callers keep catching them.
"""

from __future__ import annotations

from teleo_server.errors import Internal, InvalidArgument, ResourceExhausted


class InvalidValue(InvalidArgument, ValueError):
    pass


class InternalValueError(Internal, ValueError):
    pass


class InternalTypeError(Internal, TypeError):
    pass


class DeviceLimit(ResourceExhausted, ValueError):
    pass


__all__ = ["DeviceLimit", "InternalTypeError", "InternalValueError", "InvalidValue"]
