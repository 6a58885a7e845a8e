"""Engine overhead: a batch generated through masrl's engine vs one direct `generate`.

Method
- One `PolicyModel` (the model + a fresh LoRA adapter) serves both paths, so
  the weights and the compute are the same.
- Engine path, as rollouts run it: `batch` coroutines, each awaiting
  `PolicyAgent(messages)` (chat encoding -> `GenerationService.generate` ->
  one batched `HFEngine.generate` in a worker thread -> decoding into a
  `Reply`), gathered under a fresh `asyncio.run`.
- Direct path: the same prompts, encoded and left-padded once outside the
  timer, passed to the adapter model's `generate` with the same settings.
- Greedy decoding, and the model's `generation_config.min_new_tokens` set to
  `max_new_tokens` for both paths, so EOS cannot end a row early: every row
  has exactly `max_new_tokens` tokens. The two outputs are compared token
  for token.
- One warm-up each, then `reps` interleaved rounds (A B, B A, ...); the ratio
  of medians engine/direct is the result (target <= 1.10). The service's own
  counters give the number of `generate` calls per engine batch (must be 1)
  and a timer around each call gives, per round, the engine's time outside
  `HFEngine.generate` (asyncio, chat encoding, thread hand-off): a
  precise measure of the overhead that does not depend on the noisy
  difference of two medians.

    python bench/engine_overhead.py               # SmolLM2, 32 prompts x 64 new tokens
    python bench/engine_overhead.py --model tiny  # seconds-long check of the script
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import torch
from _util import emit_json, interleaved, median, table, warn_if_busy

from masrl.agents.policy import LoraSpec, PolicyAgent, PolicyModel
from masrl.generation.hf import HFEngine
from masrl.generation.sampling import SamplingParams
from masrl.generation.service import GenerationService
from masrl.models import load_model
from masrl.types import Message

POLICY = "solver"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | a local HF directory")
    p.add_argument("--batch", type=int, default=32, help="concurrent prompts")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    return p.parse_args()


def conversations(n: int) -> list[tuple[Message, ...]]:
    """n short math questions of varied length (so left padding matters)."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 999), rng.randint(2, 999)
        extra = " Show your steps and put the result in <answer></answer>." * (i % 3)
        out.append((Message("system", "You are a careful assistant."), Message("user", f"What is {a} + {b}?{extra}")))
    return out


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    return ids, mask


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    busy = warn_if_busy()
    model = PolicyModel(load_model(args.model), [POLICY], LoraSpec())
    hf = HFEngine(model)
    tok = model.tokenizer
    # Rows cannot stop at EOS before max_new_tokens: both paths read this default.
    model.model.get_base_model().generation_config.min_new_tokens = args.new_tokens

    worker_threads: list[int] = []
    inside: list[float] = []  # seconds of each batched generate call the service made

    def generate(prompts, params, policy):  # what the service calls, in its worker thread
        worker_threads.append(torch.get_num_threads())
        t0 = time.perf_counter()
        out = hf.generate(prompts, params, policy)
        inside.append(time.perf_counter() - t0)
        return out

    service = GenerationService(generate, max_batch=args.batch)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    agent = PolicyAgent(POLICY, POLICY, service, model, params)
    convs = conversations(args.batch)

    engine_out: list = []

    def run_engine() -> None:
        async def batch():
            return await asyncio.gather(*(agent(c) for c in convs))

        engine_out[:] = asyncio.run(batch())

    prompt_ids = [model.encode_chat(c) for c in convs]
    ids, mask = left_pad(prompt_ids, tok.pad_token_id)
    direct_out: list[torch.Tensor] = []

    def run_direct() -> None:
        with torch.no_grad(), model.use(POLICY) as m:
            out = m.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=args.new_tokens, use_cache=True,
                do_sample=False, temperature=None, top_p=None, top_k=None,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            )  # fmt: skip
        direct_out[:] = [out[:, ids.shape[1] :]]

    times = interleaved({"engine": run_engine, "direct": run_direct}, reps=args.reps)
    busy += [b for b in warn_if_busy() if b not in busy]
    calls = 1 + args.reps  # warm-up + timed rounds of the engine
    stats = service.stats
    # Per timed round: engine wall time minus the time inside its one generate call.
    around = [t - g for t, g in zip(times["engine"], inside[1:])] if len(inside) == calls else []

    direct_rows = direct_out[0].tolist()
    identical = all(list(r.response_ids) == d for r, d in zip(engine_out, direct_rows))
    lengths = sorted({len(r.response_ids) for r in engine_out} | {len(d) for d in direct_rows})
    med = {k: median(v) for k, v in times.items()}
    ratio = med["engine"] / med["direct"]
    tokens = args.batch * args.new_tokens

    print(
        f"\n{args.batch} prompts x {args.new_tokens} new tokens (greedy, min_new_tokens={args.new_tokens}), "
        f"prompt lengths {min(map(len, prompt_ids))}-{max(map(len, prompt_ids))}, model {args.model}, "
        f"{args.threads} threads (worker thread saw {sorted(set(worker_threads))})"
    )
    rows = [[k, f"{med[k]:.2f}", " ".join(f"{t:.2f}" for t in times[k]), f"{tokens / med[k]:.1f}"] for k in med]
    print(table(rows, ["path", "median s", "reps s", "gen tok/s"]))
    print(f"service: {stats.batches} generate calls for {calls} engine batches, batch sizes {sorted(set(stats.batch_sizes))}")
    if around:
        print(
            f"engine time outside the generate call (asyncio, chat encoding, hand-off): median {median(around) * 1000:.1f} ms "
            f"= {median(around) / med['engine']:.2%} of the batch"
        )
    print(f"outputs identical token for token: {identical} (response lengths {lengths})")
    print(f"ratio engine/direct = {ratio:.3f} (target <= 1.10)")
    emit_json(
        "engine_overhead",
        {
            "model": args.model,
            "batch": args.batch,
            "new_tokens": args.new_tokens,
            "threads": args.threads,
            "engine_s": round(med["engine"], 3),
            "direct_s": round(med["direct"], 3),
            "ratio": round(ratio, 4),
            "generate_calls_per_batch": stats.batches / calls,
            "outside_generate_ms": round(median(around) * 1000, 2) if around else None,
            "identical": identical,
            "disturbed_by": busy,
        },
    )


if __name__ == "__main__":
    main()
