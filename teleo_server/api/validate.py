"""Field checks shared by the converters; each raises InvalidArgument naming the field."""

from __future__ import annotations

import enum
import math
from typing import TypeVar

from teleo_server.auth import NAMESPACE_RE
from teleo_server.config import Limits
from teleo_server.errors import InvalidArgument

E = TypeVar("E", bound=enum.IntEnum)


def namespace(name: str, field: str) -> str:
    """A namespace name, or InvalidArgument worded the same wherever one is given."""
    if not NAMESPACE_RE.match(name):
        raise InvalidArgument(f"{name[:64]!r} is not a valid namespace: use 1..128 of A-Z a-z 0-9 _ . : -", field=field)
    return name


def max_bytes(s: str, limit: int, field: str) -> None:
    n = len(s.encode("utf-8"))
    if n > limit:
        raise InvalidArgument(f"is {n} bytes; the limit is {limit}", field=field)


def max_chars(s: str, limit: int, field: str) -> None:
    if len(s) > limit:
        raise InvalidArgument(f"is {len(s)} characters; the limit is {limit}", field=field)


def in_range(x: float, lo: float, hi: float, field: str) -> float:
    if not math.isfinite(x) or not lo <= x <= hi:
        raise InvalidArgument(f"must be a number in [{lo:g}, {hi:g}], got {x!r}", field=field)
    return float(x)


def unit(x: float, field: str) -> float:
    return in_range(x, 0.0, 1.0, field)


def int_range(x: int, lo: int, hi: int, field: str) -> int:
    if not lo <= x <= hi:
        raise InvalidArgument(f"must be in {lo}..{hi}, got {x}", field=field)
    return int(x)


def enum_value(cls: type[E], value: int, default: E | None, field: str) -> E:
    """Proto enum value -> domain enum; 0 (UNSPECIFIED) takes the default or is rejected."""
    if value == 0:
        if default is None:
            raise InvalidArgument("must be set (UNSPECIFIED is not allowed)", field=field)
        return default
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgument(f"unknown value {value}", field=field) from None


def metadata(m: dict[str, str], limits: Limits, field: str) -> dict[str, str]:
    if len(m) > limits.max_metadata_entries:
        raise InvalidArgument(f"at most {limits.max_metadata_entries} entries", field=field)
    for k, val in m.items():
        if not k or len(k) > limits.max_metadata_key_chars:
            raise InvalidArgument(f"keys must be 1..{limits.max_metadata_key_chars} characters", field=field)
        max_bytes(val, limits.max_metadata_value_bytes, f"{field}[{k}]")
    return dict(m)


__all__ = ["enum_value", "in_range", "int_range", "max_bytes", "max_chars", "metadata", "namespace", "unit"]
