"""bench/_util.py's kernel check: the kernels the benches report are the ones the settings select."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # the AVX2 settings (bench/README.md)
CPUINFO = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""  # "" off Linux


def kernels_under(settings: dict[str, str]) -> dict[str, str]:
    """`kernels()` in a fresh interpreter: ATen and oneDNN read these variables once, at start."""
    inherited = {k: v for k, v in os.environ.items() if k not in AVX2}  # only `settings` choose the kernels
    env = {**inherited, **settings, "PYTHONPATH": os.pathsep.join([str(BENCH), *sys.path])}
    code = "import json, _util; print(json.dumps(_util.kernels()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=BENCH)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_cpu_flags_come_from_proc_cpuinfo():
    sys.path.insert(0, str(BENCH))
    try:
        from _util import cpu_flags
    finally:
        sys.path.remove(str(BENCH))
    flags = next((set(line.split(":", 1)[1].split()) for line in CPUINFO.splitlines() if line.startswith("flags")), set())
    assert cpu_flags() == [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]


@pytest.mark.skipif(" avx2" not in CPUINFO, reason="needs an x86 CPU with AVX2")
def test_the_avx2_settings_run_the_avx2_kernels():
    k = kernels_under(AVX2)
    assert k["aten"] == "AVX2"
    assert "AVX2" in k["onednn_isa"] and "AVX-512" not in k["onednn_isa"]
    assert k["onednn_linear"].endswith("avx2")  # e.g. brg_matmul:avx2: the lean engine's packed float32 linear


@pytest.mark.skipif(" avx512f" not in CPUINFO, reason="needs an x86 CPU with AVX-512")
def test_without_the_settings_an_avx512_cpu_runs_avx512_kernels():
    k = kernels_under({})
    assert k["aten"] == "AVX512" and "AVX-512" in k["onednn_isa"] and "avx512" in k["onednn_linear"]
