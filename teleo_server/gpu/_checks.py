"""Argument checks for kernel wrappers: a launch passes raw pointers and checks nothing itself.

The wrappers' device arrays are built by the server, so a failed check here is a broken
invariant: :class:`~teleo_server.compute.errors.InternalTypeError` or ``InternalValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teleo_server.compute.errors import InternalTypeError, InternalValueError
from teleo_server.gpu import runtime


def device_array(name: str, arr: Any, dtype: Any, ndim: int, shape: tuple | None = None) -> None:
    """Raise InternalTypeError / InternalValueError unless ``arr`` is a C-contiguous device array as described."""
    rt = runtime.current()
    if not rt.is_array(arr):
        raise InternalTypeError(f"{name} must be a {rt.xp.__name__}.ndarray (the {rt.name} runtime's device array), "
                                f"got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise InternalTypeError(f"{name} must be {np.dtype(dtype)}, got {arr.dtype}")
    if arr.ndim != ndim:
        raise InternalValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if shape is not None and any(want is not None and got != want for got, want in zip(arr.shape, shape)):
        raise InternalValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not arr.flags.c_contiguous:
        raise InternalValueError(f"{name} must be C-contiguous")


def mask_words(mask: Any, n: int) -> None:
    """A row bitset over ``n`` rows: uint32 (ceil(n / 32),)."""
    device_array("mask", mask, np.uint32, 1, ((n + 31) // 32,))


def pack_mask(mask: np.ndarray) -> np.ndarray:
    """Host bool (N,) -> uint32 (ceil(N / 32),) bitset, bit ``i & 31`` of word ``i >> 5`` = row i."""
    packed = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    packed = np.concatenate([packed, np.zeros(-packed.shape[0] % 4, np.uint8)])
    return packed.view("<u4").astype(np.uint32, copy=False)


__all__ = ["device_array", "mask_words", "pack_mask"]
