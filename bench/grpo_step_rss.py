"""Peak memory (RSS) of one GRPO step with LoRA, and of the naive full-vocabulary update.

Method
- Each measurement runs in a fresh child process (this script re-invoked with
  `--child ...`), which reports its peak RSS (VmHWM from /proc/self/status)
  after each phase as one JSON line; the parent prints the table.
  (`ru_maxrss` would be wrong here: Linux carries it across fork + exec, so a
  child reports at least its parent's RSS.)
- `step`: load the model, add a LoRA adapter (masrl defaults), then one GRPO
  step as training does it: `prompts x group` sequences of `prompt_len`
  random-token prompts sampled (temperature 1) through a `GenerationService`
  from concurrent coroutines, `min_new_tokens` forcing exactly `new_tokens`
  tokens per row; group-normalised random advantages; `update_policy` with
  `UpdateSettings` of micro-batch `--micro-batch` (8), shared prompts and a
  cap of `--micro-batch-tokens` (1536) forward tokens per micro-batch, as
  `masrl train` defaults to; `--one-pass --micro-batch-tokens 0` is the
  update as it was before both (one pass per row, rows only).
- `fullvocab` (contrast; needs >= 20 GB available, else skipped): the same
  model and batch, but the update computes full-vocabulary logits and
  `log_softmax` for every position of the whole batch at once, gathers the
  response tokens' log-probs and back-propagates the policy-gradient loss.
  This is what the micro-batched response-only path avoids.
- `step` runs under the allocator `masrl train` runs under: jemalloc when the
  system has it (masrl.memory), else glibc's malloc. The same step then runs
  under glibc's malloc as it comes, and with glibc's mmap threshold fixed
  (`MALLOC_MMAP_THRESHOLD_=65536`, what `trainer.low_memory` does): the gap is
  allocator retention rather than live tensors, and the update seconds of the
  three show what each allocator costs.
- The result is the step's peak in GB against the 4 GB target, and the ratio
  fullvocab/step.

    python bench/grpo_step_rss.py                 # SmolLM2, 8 x 4 sequences, 128 + 64 tokens
    python bench/grpo_step_rss.py --model tiny    # seconds-long check of the script
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time

import torch
from _util import GB, emit_json, max_rss_bytes, table, warn_if_busy

from masrl.update import UpdateSettings

POLICY = "solver"
TARGET_GB = 4.0
# The full-vocabulary update of the default batch peaked at 17 GB here: ask
# for headroom so the contrast never pushes the machine into the OOM killer.
NEEDED_FREE_GB = 20.0
# glibc's malloc raises its mmap threshold after big frees, so later tensors
# of a few MB come from the heap, whose freed pages are rarely returned; a
# fixed threshold keeps RSS close to live tensor memory.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}


def allocator_envs() -> dict[str, dict[str, str]]:
    """Child environments by name: masrl train's allocator first, then glibc's malloc as is and tuned."""
    from masrl.memory import find_jemalloc, jemalloc_env

    glibc = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    jemalloc = jemalloc_env(glibc, find_jemalloc())
    envs = {"jemalloc (masrl train's)": jemalloc} if jemalloc else {"glibc malloc (masrl train's: no jemalloc)": glibc}
    if jemalloc:
        envs["glibc malloc"] = glibc
    envs["glibc, " + " ".join(f"{k}={v}" for k, v in MALLOC_ENV.items())] = {**glibc, **MALLOC_ENV}
    return envs


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | a local HF directory")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--micro-batch-tokens", type=int, default=UpdateSettings.micro_batch_tokens,
                   help="update token cap per micro-batch (masrl's default); 0: none")
    p.add_argument("--one-pass", action="store_true", help="the update without shared prompts (share_prompts=False)")
    p.add_argument("--skip-fullvocab", action="store_true")
    p.add_argument("--skip-malloc-variant", action="store_true", help="run the step under masrl train's allocator only")
    p.add_argument("--child", choices=["step", "fullvocab"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ------------------------------------------------------------ child processes
def setup(args):
    """Model + LoRA + optimiser, and the group-structured random prompts and advantages."""
    from masrl.agents.policy import LoraSpec, PolicyModel
    from masrl.models import load_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = PolicyModel(load_model(args.model), [POLICY], LoraSpec())
    model.model.get_base_model().generation_config.min_new_tokens = args.new_tokens
    opt = torch.optim.AdamW(model.parameters(POLICY), lr=1e-6)
    tok = model.tokenizer
    allowed = torch.tensor([i for i in range(len(tok)) if i not in set(tok.all_special_ids)])
    g = torch.Generator().manual_seed(0)
    ids = allowed[torch.randint(len(allowed), (args.prompts, args.prompt_len), generator=g)]
    prompts = [row.tolist() for row in ids.repeat_interleave(args.group, dim=0)]  # [B][P]
    rewards = torch.randn(args.prompts, args.group, generator=g)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten().tolist()
    return model, opt, prompts, adv


def child_step(args) -> dict:
    from masrl.generation.hf import HFEngine
    from masrl.generation.sampling import SamplingParams
    from masrl.generation.service import GenerationService
    from masrl.types import Sample
    from masrl.update import UpdateSettings, update_policy

    model, opt, prompts, adv = setup(args)
    out = {"loaded": max_rss_bytes()}
    service = GenerationService(HFEngine(model).generate, max_batch=len(prompts))
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)

    async def sample():
        return await asyncio.gather(*(service.generate(p, params, POLICY) for p in prompts))

    t0 = time.perf_counter()
    gens = asyncio.run(sample())
    out["generate_s"] = time.perf_counter() - t0
    out["generated"] = max_rss_bytes()
    samples = [Sample(POLICY, tuple(p), g.response_ids, a) for p, g, a in zip(prompts, gens, adv)]
    t0 = time.perf_counter()
    settings = UpdateSettings(
        micro_batch=args.micro_batch, share_prompts=not args.one_pass, micro_batch_tokens=args.micro_batch_tokens or None
    )
    update_policy(model, POLICY, samples, opt, settings)
    out["update_s"] = time.perf_counter() - t0
    out["updated"] = max_rss_bytes()
    out["generate_calls"] = service.stats.batches
    out["response_tokens"] = sum(len(g.response_ids) for g in gens)
    return out


def child_fullvocab(args) -> dict:
    """The naive update: full [B, P+R, V] logits and log_softmax for the whole batch, then backward."""
    model, opt, prompts, adv = setup(args)
    out = {"loaded": max_rss_bytes()}
    g = torch.Generator().manual_seed(1)
    responses = torch.randint(len(model.tokenizer), (len(prompts), args.new_tokens), generator=g)  # [B, R]
    ids = torch.cat([torch.tensor(prompts), responses], 1)  # [B, P+R], no padding
    t0 = time.perf_counter()
    model.model.train()
    with model.use(POLICY) as m:
        logits = m(input_ids=ids, use_cache=False).logits  # [B, P+R, V]
    logp_all = torch.log_softmax(logits, -1)[:, :-1]  # [B, P+R-1, V]
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)[:, -args.new_tokens :]  # [B, R]
    loss = -(logp * torch.tensor(adv).unsqueeze(-1)).mean()
    loss.backward()
    opt.step()
    out["update_s"] = time.perf_counter() - t0
    out["updated"] = max_rss_bytes()
    return out


def run_child(kind: str, env: dict[str, str] | None = None) -> dict:
    cmd = [sys.executable, __file__, *sys.argv[1:], "--child", kind]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env or dict(os.environ))
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"child {kind!r} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- parent
def available_gb() -> float:
    import psutil

    return psutil.virtual_memory().available / GB


def main() -> None:
    args = parse_args()
    if args.child:
        result = {"step": child_step, "fullvocab": child_fullvocab}[args.child](args)
        print(json.dumps(result))
        return
    busy = warn_if_busy()
    batch = args.prompts * args.group
    envs = allocator_envs()
    if args.skip_malloc_variant:
        envs = dict(list(envs.items())[:1])
    steps = {name: run_child("step", env) for name, env in envs.items()}
    step = next(iter(steps.values()))
    busy += [b for b in warn_if_busy() if b not in busy]  # timings only; RSS does not depend on it
    free = available_gb()
    full, skipped = None, None
    if args.skip_fullvocab:
        skipped = "--skip-fullvocab"
    elif free < NEEDED_FREE_GB:
        skipped = f"only {free:.1f} GB available (< {NEEDED_FREE_GB:.0f} GB)"
    else:
        full = run_child("fullvocab")

    print(
        f"\none GRPO step: {batch} sequences ({args.prompts} prompts x {args.group}), prompt {args.prompt_len} + "
        f"{args.new_tokens} new tokens, LoRA r=16 a=32 x7, float32, {args.threads} threads, model {args.model}; "
        f"update micro-batch {args.micro_batch}, token cap {args.micro_batch_tokens or 'none'}, "
        f"{'one pass per row' if args.one_pass else 'shared prompts'}"
    )
    print(
        f"step: {step['generate_calls']} generate call(s), {step['response_tokens']} response tokens, "
        f"generate {step['generate_s']:.1f} s, update {step['update_s']:.1f} s"
    )
    rows = [
        [f"step, {name}", *(f"{r[k] / GB:.2f}" for k in ("loaded", "generated", "updated")), f"{r['update_s']:.1f}"]
        for name, r in steps.items()
    ]
    if full:
        rows.append(["full-vocab logits, whole batch", f"{full['loaded'] / GB:.2f}", "-", f"{full['updated'] / GB:.2f}",
                     f"{full['update_s']:.1f}"])  # fmt: skip
    print(table(rows, ["peak RSS (GB) after", "load", "generate", "update", "update s"]))
    peak = step["updated"] / GB
    print(f"GRPO step peak RSS = {peak:.2f} GB (target <= {TARGET_GB:.0f} GB): {'ok' if peak <= TARGET_GB else 'OVER'}")
    ratio = None
    if full:
        ratio = full["updated"] / step["updated"]
        print(f"full-vocab update peak = {full['updated'] / GB:.2f} GB ({full['update_s']:.1f} s), {ratio:.1f}x the step's peak")
    else:
        print(f"full-vocab contrast skipped: {skipped}")
    emit_json(
        "grpo_step_rss",
        {
            "model": args.model,
            "batch": batch,
            "prompt_len": args.prompt_len,
            "new_tokens": args.new_tokens,
            "step_peak_gb": round(peak, 3),
            "load_peak_gb": round(step["loaded"] / GB, 3),
            "allocator": next(iter(steps)),
            "variants": {n: {"peak_gb": round(r["updated"] / GB, 3), "update_s": round(r["update_s"], 1)} for n, r in steps.items()},
            "target_gb": TARGET_GB,
            "fullvocab_peak_gb": round(full["updated"] / GB, 3) if full else None,
            "fullvocab_over_step": round(ratio, 2) if ratio else None,
            "fullvocab_skipped": skipped,
            "disturbed_by": busy,
        },
    )


if __name__ == "__main__":
    main()
