"""Keep the process's resident memory close to its live tensors.

glibc's malloc raises its mmap threshold dynamically: once a few-MB block has
been freed, later blocks of that size come from the heap, and the heap rarely
returns freed pages to the OS. A training step allocates and frees many such
tensors (activations, KV caches, logits), so resident memory grows to about
twice the live data and keeps growing across steps (2 steps of budget-grpo:
6.98 GB; bench/peak_rss.py).

The fix at the root is another allocator. jemalloc returns freed pages to the
OS after a short decay and reuses them meanwhile, so the same run peaked at
2.81 GB, the live activations of its largest micro-batch plus the weights.
`masrl train` and `eval` therefore re-execute themselves once (after their config loads) with
jemalloc preloaded when the system has it (Debian: libjemalloc2, which
scripts/setup.sh installs) and say so on stderr; `MASRL_ALLOCATOR=system`
keeps the C library's malloc. Preloading is the only way: the allocator must
be in place before the interpreter's first allocation.

The older remedy stays for systems without jemalloc: `trainer.low_memory:
true` fixes glibc's threshold at 64 KiB, so large tensors are mmap-backed and
freeing them gives the memory back at once; every large allocation then
faults in fresh zeroed pages, and the LoRA update of bench/update_vs_trl.py
took 34.6 s instead of 18.6 s. A user's own MALLOC_MMAP_THRESHOLD_ wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

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


ALLOCATOR_VAR = "MASRL_ALLOCATOR"  # "system": the C library's malloc; anything else or unset: jemalloc when present
JEMALLOC = "libjemalloc.so.2"
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")


def find_jemalloc(dirs: Sequence[str] = LIBRARY_DIRS) -> str | None:
    """The path of the system's jemalloc shared library, or None."""
    if not sys.platform.startswith("linux"):
        return None
    return next((str(Path(d) / JEMALLOC) for d in dirs if (Path(d) / JEMALLOC).is_file()), None)


def jemalloc_env(environ: Mapping[str, str], library: str | None) -> dict[str, str] | None:
    """The environment to run again under jemalloc, or None to go on as we are.

    None when there is no library, the user chose the system allocator, or a
    jemalloc is preloaded already (which also stops a second re-execution)."""
    if library is None or environ.get(ALLOCATOR_VAR, "").lower() == "system":
        return None
    preload = environ.get("LD_PRELOAD", "")
    if "jemalloc" in preload:
        return None
    return {**environ, "LD_PRELOAD": f"{library}:{preload}" if preload else library}


def reexec_with_jemalloc(args: Sequence[str]) -> None:
    """Replace this process by `python -m masrl.cli ARGS` with jemalloc preloaded, when `jemalloc_env` says so.

    The process id stays (exec), so a supervisor or a test that signals it still can."""
    env = jemalloc_env(os.environ, find_jemalloc())
    if env is None:
        return
    print(f"masrl: memory allocator jemalloc ({env['LD_PRELOAD'].split(':')[0]}); "
          f"{ALLOCATOR_VAR}=system keeps the C library's malloc", file=sys.stderr, flush=True)  # fmt: skip
    # SIGINT and SIGTERM wait (blocked: the mask survives the exec) until the new process's `masrl.cli.main`
    # has its handlers; the interpreter's start-up would otherwise die by them or print a traceback
    stop = (signal.SIGINT, signal.SIGTERM)
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        os.execve(sys.executable, [sys.executable, "-m", "masrl.cli", *args], env)
    except OSError as exc:  # cannot exec (a frozen interpreter, ...): go on with malloc
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)
        print(f"masrl: could not restart under jemalloc ({exc}); going on with malloc", file=sys.stderr)
