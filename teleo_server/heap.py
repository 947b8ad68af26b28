"""Handing freed heap memory back to the operating system.

glibc keeps pages freed by ``free`` inside its arenas (one per thread that allocated) unless asked
to release them; after a burst of large temporary arrays (embedding a long text, loading every
memory at start-up) that slack can outweigh what is kept. ``release_memory`` asks once.

NumPy also asks the kernel for transparent huge pages on its large arrays. Where the kernel's
``khugepaged`` fills a 2 MB page around every used 4 KB one (its default), a buffer that is only
partly written grows in the background after start: a loaded SciFact server gained 13-18 MB in the
first two minutes with no request at all, and its RSS at any one moment depended on how far that
had got. ``huge_pages(False)`` turns the request off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# Work over more chunks than this (one long memory, a batch) ends by handing freed pages back:
# its temporaries are tens of MB, kept by the allocator otherwise.
TRIM_AFTER_CHUNKS = 16


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim`` (None elsewhere: other allocators return memory by themselves)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_memory() -> bool:
    """Return the allocator's free pages to the system; False where that is not available."""
    trim = _malloc_trim()
    return bool(trim is not None and trim(0) >= 0)


def huge_pages(enabled: bool) -> bool:
    """Whether NumPy asks for transparent huge pages on the large arrays it allocates from now on;
    returns False where this NumPy has no such switch."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage  # NumPy 1.x
        except ImportError:
            return False
    _set_madvise_hugepage(bool(enabled))
    return True


__all__ = ["TRIM_AFTER_CHUNKS", "huge_pages", "release_memory"]
