"""How close a decoding step's float32 matmuls run to this CPU's limit: the bound on lean-vs-HF.

Method
- SmolLM2-135M's decoding matmuls at `--rows` rows (a GRPO batch: 32): per layer
  [q; k; v], o, [gate; up] and down (the lean engine's fused shapes, 30 layers),
  and the tied head over the 49,152-token vocabulary once a step.
- Each shape through the lean engine's kernel (oneDNN's packed float32 linear,
  `masrl.generation.llama.Matmul`) and through `F.linear` (the BLAS under HF
  `generate`). With one thread in CPU seconds (`time.process_time`), so that a
  shared machine counts the work and not the waiting; with more, in wall seconds
  (CPU seconds would add up the threads): run those with the machine to yourself.
- The limit: a 2048 x 2048 x 2048 float32 GEMM, the best this CPU's BLAS and
  oneDNN reach (the faster of the two).
- The step's matmul seconds are the sums over a step's calls; their FLOP rate
  against the limit says how much a faster float32 kernel could still gain.
- Timed shape by shape, a weight stays in the CPU's cache from one repetition
  to the next. A decoding step reads each of its 121 weights (540 MB) once,
  from memory: "in sequence" runs a whole step's matmuls in decoding's order
  over 30 layers of their own weights, lean and F.linear, and "memory" is the
  time to read every weight once (a sum over them), the floor at one row.

    python bench/decode_matmuls.py                 # this CPU's kernels, 1 thread
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python bench/decode_matmuls.py   # AVX2 kernels
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from _util import emit_json, kernels, kernels_line, table, warn_if_busy

from masrl.generation.llama import Matmul

LAYERS = 30
# (name, in, out, calls a step): SmolLM2-135M, hidden 576, 9 query and 3 key-value heads of 64, MLP 1536
SHAPES = [("qkv", 576, 960, LAYERS), ("o", 576, 576, LAYERS), ("gate_up", 576, 3072, LAYERS),
          ("down", 1536, 576, LAYERS), ("head", 576, 49152, 1)]  # fmt: skip


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=32, help="rows of the decoding step")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seconds", type=float, default=1.0, help="CPU seconds to spend on each measurement")
    return p.parse_args()


def seconds(fn: Callable[[], object], budget: float) -> float:
    """Seconds of one call (CPU seconds on one thread, else wall): the median over repeated calls
    filling about `budget` seconds."""
    clock = time.process_time if torch.get_num_threads() == 1 else time.perf_counter
    for _ in range(2):  # warm-up: packing caches, oneDNN's kernel generation
        fn()
    times: list[float] = []
    while sum(times) < budget or len(times) < 3:
        t = clock()
        fn()
        times.append(clock() - t)
    return sorted(times)[len(times) // 2]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    busy = warn_if_busy()
    torch.manual_seed(0)
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    flops = 2 * n**3
    square = Matmul(b)
    limit = max(flops / seconds(lambda: a @ b, args.seconds), flops / seconds(lambda: square(a), args.seconds))
    rows, step = [], {"lean": 0.0, "hf": 0.0}
    for name, k, m, calls in SHAPES:
        w, x = torch.randn(m, k), torch.randn(args.rows, k)
        lean_fn = Matmul(w)  # the lean engine's own product: the weight packed for oneDNN as it packs it
        if lean_fn.packed is None:
            raise SystemExit("this torch has no oneDNN packed linear: the lean engine runs F.linear here")
        secs = {"lean": seconds(lambda: lean_fn(x), args.seconds), "hf": seconds(lambda: F.linear(x, w), args.seconds)}
        f = 2 * args.rows * k * m
        for side in step:
            step[side] += calls * secs[side]
        rows.append([name, f"{k}x{m}", str(calls), *(f"{secs[s] * 1e3:.3f} ({f / secs[s] / 1e9:.0f})" for s in step)])
    step_flops = sum(2 * args.rows * k * m * calls for _, k, m, calls in SHAPES)
    rate = {s: step_flops / step[s] / 1e9 for s in step}
    seq, memory = in_sequence(args.rows, args.seconds)
    seq_rate = {s: step_flops / seq[s] / 1e9 for s in seq}
    unit = "CPU seconds" if args.threads == 1 else "wall seconds"
    print(f"\nSmolLM2-135M decoding matmuls at {args.rows} rows, float32, {args.threads} thread(s), {unit}")
    print(table(rows, ["matmul", "in x out", "calls", "lean ms (GFLOP/s)", "F.linear ms (GFLOP/s)"]))
    print(f"a step's matmuls, shape by shape: lean {step['lean'] * 1e3:.1f} ms ({rate['lean']:.0f} GFLOP/s), F.linear "
          f"{step['hf'] * 1e3:.1f} ms ({rate['hf']:.0f} GFLOP/s); the limit ({n}^3 GEMM) {limit / 1e9:.0f} GFLOP/s: "
          f"lean at {rate['lean'] / (limit / 1e9):.0%} of it")  # fmt: skip
    print(f"in sequence, each weight read once as decoding reads it: lean {seq['lean'] * 1e3:.1f} ms "
          f"({seq_rate['lean']:.0f} GFLOP/s, {seq_rate['lean'] / (limit / 1e9):.0%} of the limit), F.linear "
          f"{seq['hf'] * 1e3:.1f} ms; reading every weight once {memory * 1e3:.1f} ms "
          f"({WEIGHT_BYTES / memory / 1e9:.1f} GB/s)")  # fmt: skip
    ran = kernels()
    print(kernels_line(ran))
    emit_json("decode_matmuls", {
        "rows": args.rows, "threads": args.threads, "lean_step_ms": round(step["lean"] * 1e3, 2),
        "hf_step_ms": round(step["hf"] * 1e3, 2), "lean_gflops": round(rate["lean"], 1), "hf_gflops": round(rate["hf"], 1),
        "limit_gflops": round(limit / 1e9, 1), "lean_sequence_ms": round(seq["lean"] * 1e3, 2),
        "hf_sequence_ms": round(seq["hf"] * 1e3, 2), "memory_read_ms": round(memory * 1e3, 2), "kernels": ran,
        "disturbed_by": busy,
    })  # fmt: skip


WEIGHT_BYTES = 4 * sum(k * m * calls for _, k, m, calls in SHAPES)  # float32: 540 MB


def in_sequence(rows: int, budget: float) -> tuple[dict[str, float], float]:
    """Seconds of a whole step's matmuls in decoding's order, each of 30 layers with weights of its own
    (lean and F.linear), and of reading every weight once: the first two as a step meets its weights
    (from memory, not from the cache a repeated shape leaves them in), the third the floor of any kernel."""
    layers = [[torch.randn(m, k) for _, k, m, _ in SHAPES[:-1]] for _ in range(LAYERS)]
    head = torch.randn(SHAPES[-1][2], SHAPES[-1][1])
    packed = [[Matmul(w) for w in ws] for ws in layers], Matmul(head)
    x = {576: torch.randn(rows, 576), 1536: torch.randn(rows, 1536)}

    def run(products: list[list[Callable]], last: Callable) -> Callable[[], None]:
        def step() -> None:
            for layer in products:
                for product, (_, k, _, _) in zip(layer, SHAPES):
                    product(x[k])
            last(x[576])

        return step

    plain = [[lambda v, w=w: F.linear(v, w) for w in ws] for ws in layers], lambda v: F.linear(v, head)
    seq = {"lean": seconds(run(*packed), budget), "hf": seconds(run(*plain), budget)}
    weights = [w for ws in layers for w in ws] + [head]
    return seq, seconds(lambda: [w.sum() for w in weights], budget)


if __name__ == "__main__":
    main()
