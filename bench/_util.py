"""Helpers shared by the benchmark scripts: interleaved timing, RSS, output.

Every benchmark reports *ratios measured within one run*: the machine is
shared and noisy, so absolute seconds drift; running the contenders
alternately (A B A B ...) and comparing medians cancels most of that drift.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

GB = 1024**3


def max_rss_bytes() -> int:
    """Peak RSS of this process so far: VmHWM of its own address space.

    Not `ru_maxrss`: Linux carries that across fork + exec, so a child
    started by a big parent would report the parent's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def interleaved(contenders: dict[str, Callable[[], object]], reps: int, warmup: int = 1) -> dict[str, list[float]]:
    """Run each contender `warmup` times, then `reps` rounds of A B A B ...; seconds per call.

    The order inside a round alternates (A B, then B A) so neither side
    always runs right after the other's memory traffic.
    """
    names = list(contenders)
    for _ in range(warmup):
        for name in names:
            contenders[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names if r % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
            print(f"  rep {r + 1}/{reps} {name:>10s}: {times[name][-1]:7.2f} s", file=sys.stderr, flush=True)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def busy_processes(min_cpu: float = 20.0) -> list[str]:
    """Other python processes using CPU right now (they disturb timings)."""
    import psutil

    me = os.getpid()
    procs = [p for p in psutil.process_iter(["pid", "name", "cmdline"]) if p.info["pid"] != me]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(0.5)
    out = []
    for p in procs:
        try:
            cpu = p.cpu_percent(None)
            if cpu >= min_cpu and "python" in (p.info["name"] or ""):
                out.append(f"pid {p.info['pid']} {cpu:.0f}% {' '.join(p.info['cmdline'] or [])[:80]}")
        except psutil.Error:
            pass
    return out


def warn_if_busy() -> list[str]:
    busy = busy_processes()
    for line in busy:
        print(f"warning: another process is using the CPU, timings are disturbed: {line}", file=sys.stderr)
    return busy


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def emit_json(name: str, result: dict) -> None:
    """The last line of every benchmark: one JSON object, easy to grep and parse."""
    print(json.dumps({"bench": name, **result}, sort_keys=True))


def bench_dir() -> Path:
    return Path(__file__).resolve().parent
