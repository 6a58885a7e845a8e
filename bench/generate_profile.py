"""Where the lean engine's time goes: one `generate_vs_hf.py` batch taken apart phase by phase.

Method
- The same policy and batch as `generate_vs_hf.py` (SmolLM2 float32, LoRA
  with random B, 8 prompts x 4 rows of 128 random tokens, 64 new tokens at
  temperature 1).
- Per round: one whole `LeanEngine.generate` call (the adapter moved first,
  as the bench moves it), then its phases run one by one on the same merged
  weights: the re-merge (`MergedWeights.sync`), the prefill, and the 63
  decoding steps with the sampler (`pick_tokens`) and the decoder step
  (`LlamaDecoder.step`) timed apart. "rest" is the whole call minus the
  phases: the Python loop, row bookkeeping, decoding the text.
- `--ops`: then torch.profiler over the 63 steps, the ops by self time
  (matmuls are `mkldnn::_linear_pointwise`, attention
  `_scaled_dot_product_flash_attention_for_cpu`).
- `--precision bf16`: the matmuls of `rollout.precision: bf16` (`Bf16Matmul`).
- `--cpu`: seconds of CPU time (`time.process_time`) instead of wall time.
  With `--threads 1` on a shared machine this counts the work and not the
  waiting; with 2 threads it also counts the threads' spinning.

    python bench/generate_profile.py [--threads 2] [--rounds 2] [--ops] [--cpu] [--precision bf16]
"""

from __future__ import annotations

import argparse
import time

import torch
from _util import emit_json, warn_if_busy
from generate_vs_hf import POLICY, acting_batch

from masrl.generation.lean import LeanEngine, pick_tokens
from masrl.generation.llama import KVCache
from masrl.generation.sampling import SamplingParams, left_pad


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | a local HF directory")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4, help="samples per prompt")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--ops", action="store_true", help="also torch.profiler's op table over the decoding steps")
    p.add_argument("--cpu", action="store_true", help="CPU seconds instead of wall seconds")
    p.add_argument("--precision", default="float32", choices=["float32", "bf16"], help="rollout.precision: the matmuls'")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu else time.perf_counter
    busy = warn_if_busy()
    pm, adapter, g, rows = acting_batch(args)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, top_p=1.0)
    steps = args.new_tokens - 1  # the last sampled token is never fed back
    lean = LeanEngine(pm, precision=args.precision)
    lean.generate(rows, params, POLICY)  # warm-up: builds the merged copy
    decoder = lean.merged.decoder
    if decoder is None:
        raise SystemExit(f"{args.model} is not a Llama-family model: the lean engine runs HF's forward for it")

    def move_adapter() -> None:  # an optimiser step's worth of change: the next call re-merges
        with torch.no_grad():
            for p in adapter:
                p.add_(torch.randn(p.shape, generator=g) * 1e-4)

    def timed(f):
        t0 = clock()
        out = f()
        return clock() - t0, out

    ids, mask = left_pad(rows[:: args.group], pm.tokenizer.pad_token_id, "cpu")  # each distinct prompt once
    owner = torch.arange(args.prompts).repeat_interleave(args.group)
    pos0 = mask.sum(-1)[owner]
    for r in range(args.rounds):
        move_adapter()
        call, gens = timed(lambda: lean.generate(rows, params, POLICY))
        n = sum(len(x.response_ids) for x in gens)
        move_adapter()
        merge, _ = timed(lambda: lean.merged.sync(POLICY, args.precision))
        with torch.no_grad():
            cache = KVCache(decoder, len(rows), args.prompt_len + steps, decoder.embed)
            prefill, logits = timed(lambda: decoder.prefill(ids, mask, cache, owner))
            sample = step = 0.0
            for s in range(steps):
                u = torch.rand(len(rows))
                dt, (token, _) = timed(lambda: pick_tokens(logits, params, u))
                sample += dt
                dt, logits = timed(lambda: decoder.step(token, pos0 + s, cache))
                step += dt
        rest = call - merge - prefill - sample - step
        phases = {"call_s": call, "remerge_s": merge, "prefill_s": prefill, "steps_s": step, "sampling_s": sample,
                  "rest_s": rest, "tokens": n}  # fmt: skip
        print(
            f"round {r + 1}: call {call:.2f} s ({n} tokens, {n / call:.0f} tokens/s) = re-merge {merge:.3f} + "
            f"prefill {prefill:.3f} + {steps} steps {step:.2f} ({step / steps * 1e3:.1f} ms each) + sampling "
            f"{sample:.3f} ({sample / steps * 1e3:.2f} ms each) + rest {rest:.2f}",
            flush=True,
        )
    if args.ops:
        from torch.profiler import ProfilerActivity, profile  # lazy: only with --ops

        with torch.no_grad():
            cache = KVCache(decoder, len(rows), args.prompt_len + steps, decoder.embed)
            logits = decoder.prefill(ids, mask, cache, owner)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for s in range(steps):
                    token, _ = pick_tokens(logits, params, torch.rand(len(rows)))
                    logits = decoder.step(token, pos0 + s, cache)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
    busy += [b for b in warn_if_busy() if b not in busy]
    emit_json(
        "generate_profile",
        {"model": args.model, "rows": len(rows), "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
         "threads": args.threads, "precision": args.precision, "clock": "cpu" if args.cpu else "wall", "last_round": {k: round(v, 4) for k, v in phases.items()},
         "disturbed_by": busy},
    )  # fmt: skip


if __name__ == "__main__":
    main()
