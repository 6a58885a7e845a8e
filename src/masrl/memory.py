"""Keep the process's resident memory close to its live tensors.

glibc's malloc raises its mmap threshold dynamically: once a few-MB block has
been freed, later blocks of that size come from the heap, and the heap rarely
returns freed pages to the OS. A training step allocates and frees many such
tensors (activations, KV caches), so resident memory grows to about twice the
live data (bench/grpo_step_rss.py: 7.2 GB peak by default, 3.1 GB with a fixed
64 KiB threshold). Fixing the threshold makes large tensors mmap-backed, so
freeing them gives the memory back at once. The price is speed: every large
allocation is a fresh mmap with zeroed pages, and the LoRA update of
bench/update_vs_trl.py took 34.6 s instead of 18.6 s. So it is opt-in
(`trainer.low_memory: true`). A user's own MALLOC_MMAP_THRESHOLD_ wins; other C
libraries are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
THRESHOLD_BYTES = 64 * 1024

_done = False


def keep_heap_small() -> bool:
    """Fix glibc's mmap threshold once per process; True when it was set."""
    global _done
    if _done or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    _done = True
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, THRESHOLD_BYTES))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
