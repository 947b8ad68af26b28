"""Handing freed heap memory back to the operating system.

glibc keeps pages freed by ``free`` inside its arenas (one per thread that allocated) unless asked
to release them; after a burst of large temporary arrays (embedding a long text, loading every
memory at start-up) that slack can outweigh what is kept. ``release_memory`` asks once.

NumPy also asks the kernel for transparent huge pages on its large arrays. Where the kernel's
``khugepaged`` fills a 2 MB page around every used 4 KB one (its default), a buffer that is only
partly written grows in the background after start: a loaded SciFact server gained 13-18 MB in the
first two minutes with no request at all, and its RSS at any one moment depended on how far that
had got. ``huge_pages(False)`` turns the request off.

glibc also serves a block of up to 32 MB from its heaps rather than from a mapping of its own once
a block that size has been freed (its mmap threshold rises to the largest one freed). That keeps
query-time temporaries cheap, but during a bulk load, where index buffers double and are freed
again between long-lived records, it leaves them scattered through the heaps: a loaded SciFact
server held between 369 and 396 MB from one start to the next. ``whole_mappings`` gives each block
of 128 KB or more a mapping of its own for the length of a load, so a freed buffer goes straight
back to the system (three starts: 371.4, 371.4 and 371.5 MB), and then fixes the threshold at 32
MB, where the heaps serve query temporaries as before. Fixed for the whole run at 128 KB (366 MB),
`teleological` at 10,000 memories took 12.0 ms instead of 9.7: every large temporary paid for
fresh pages.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from contextlib import contextmanager

# Work over more chunks than this (one long memory, a batch) ends by handing freed pages back:
# its temporaries are tens of MB, kept by the allocator otherwise.
TRIM_AFTER_CHUNKS = 16


# glibc's mallopt parameter and the thresholds used around a bulk load
_M_MMAP_THRESHOLD = -3
LOAD_MMAP_THRESHOLD = 128 * 1024        # glibc's starting value
SERVE_MMAP_THRESHOLD = 32 * 1024 * 1024  # the largest its dynamic threshold reaches (64-bit)


@functools.cache
def _libc_function(name: str, argtypes: tuple, restype: type):
    """The C library's function ``name`` with its signature (None where there is no such function:
    other allocators than glibc's return memory by themselves and have no thresholds)."""
    lib = ctypes.util.find_library("c")
    try:
        fn = getattr(ctypes.CDLL(lib), name) if lib else None
    except (OSError, AttributeError):
        return None
    if fn is not None:
        fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def mmap_threshold(size: int) -> bool:
    """Serve every block of ``size`` bytes or more from a mapping of its own, returned to the
    system when freed (fixed: it no longer rises by itself). False where that is not available."""
    fn = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int), ctypes.c_int)
    return bool(fn is not None and fn(_M_MMAP_THRESHOLD, int(size)) == 1)


@contextmanager
def whole_mappings() -> Iterator[bool]:
    """A bulk load's allocations of 128 KB or more each in a mapping of its own; afterwards large
    temporaries (up to 32 MB) come from the heaps again. Yields whether the switch is available."""
    available = mmap_threshold(LOAD_MMAP_THRESHOLD)
    try:
        yield available
    finally:
        if available:
            mmap_threshold(SERVE_MMAP_THRESHOLD)


def release_memory() -> bool:
    """Return the allocator's free pages to the system; False where that is not available."""
    trim = _libc_function("malloc_trim", (ctypes.c_size_t,), ctypes.c_int)
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


__all__ = ["LOAD_MMAP_THRESHOLD", "SERVE_MMAP_THRESHOLD", "TRIM_AFTER_CHUNKS", "huge_pages", "mmap_threshold",
           "release_memory", "whole_mappings"]
