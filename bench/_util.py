"""Helpers shared by the benchmark scripts: interleaved timing, RSS, output.

Every benchmark reports *ratios measured within one run*: the machine is
shared and noisy, so absolute seconds drift; running the contenders
alternately (A B A B ...) and comparing medians cancels most of that drift.
"""

from __future__ import annotations

import json
import os
import resource
import re
import statistics
import subprocess
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


# One float32 linear through the lean engine's packed oneDNN kernel and one through F.linear (the BLAS),
# run in a child under ONEDNN_VERBOSE and MKL_VERBOSE (each library reads its variable once, at its first
# call, so this process cannot turn them on afterwards).
_KERNEL_PROBE = (
    "import torch; w = torch.ops.mkldnn._reorder_linear_weight(torch.randn(64, 64), 32); "
    "torch.ops.mkldnn._linear_pointwise(torch.randn(32, 64), w, None, 'none', [], ''); "
    "torch.nn.functional.linear(torch.randn(32, 64), torch.randn(64, 64))"
)


def cpu_flags() -> list[str]:
    """The vector extensions this CPU reports that decide the kernels: avx2, avx512f, avx512_bf16, amx_bf16."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return []
    have = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in have]


def kernels() -> dict[str, str]:
    """Which kernels this process's settings run (the issue's AVX2 check): ATen's vectorised ops
    (`ATEN_CPU_CAPABILITY`), the ISA oneDNN dispatches to and the implementation of the lean engine's
    linear (`ONEDNN_MAX_CPU_ISA`), and the BLAS under HF's `F.linear`."""
    import torch

    out = {"cpu_flags": " ".join(cpu_flags()) or "unknown", "aten": torch.backends.cpu.get_cpu_capability()}
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1", "OMP_NUM_THREADS": "1"}
    verbose = subprocess.run([sys.executable, "-c", _KERNEL_PROBE], env=env, capture_output=True, text=True).stdout
    isa = re.search(r"isa:([^\n,]+)", verbose)
    impl = re.search(r"primitive,exec,cpu,(?:inner_product|matmul),([^,]+),", verbose)
    out["onednn_isa"] = isa.group(1).strip() if isa else "unknown"
    out["onednn_linear"] = impl.group(1) if impl else "unknown"
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    out["blas"] = blas.group(1) if blas else "unknown"
    # MKL names the code path it chose ("Intel(R) AVX2 enabled processors", ...); on an AMD CPU it reports
    # generic "Intel(R) Architecture processors" and runs its AVX2 kernels
    path = re.search(r"for Intel\(R\) 64 architecture (.+?) processors", verbose)
    out["blas"] += f" ({path.group(1)} processors)" if path else ""
    out["mkl_instructions"] = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "unset")
    return out


def kernels_line(k: dict[str, str]) -> str:
    return (f"kernels: ATen {k['aten']}; oneDNN {k['onednn_isa']}, the lean engine's linear {k['onednn_linear']}; "
            f"HF's linear {k['blas']} (MKL_ENABLE_INSTRUCTIONS {k['mkl_instructions']}); CPU flags {k['cpu_flags']}")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def emit_json(name: str, result: dict) -> None:
    """The last line of every benchmark: one JSON object, easy to grep and parse."""
    print(json.dumps({"bench": name, **result}, sort_keys=True))


def bench_dir() -> Path:
    return Path(__file__).resolve().parent
