"""Update throughput: masrl's `update_policy` vs TRL's `GRPOTrainer`, same batch.

Method
- Two copies of the same model (float32), each with a LoRA adapter of the
  same shape: masrl's `LoraSpec` defaults (r=16, alpha=32, dropout 0, all
  seven projections). TRL gets the same spec as a `peft.LoraConfig`.
- One fixed batch: `prompts x group` sequences, every prompt `prompt_len`
  random tokens and every completion `completion_len` random tokens (no
  padding, so both sides do the same useful work), group-normalised random
  advantages. No generation: only the optimiser update is timed.
- masrl: `update_policy(model, policy, samples, AdamW, UpdateSettings(micro_batch))`
  (forward + backward per micro-batch, clip, step).
- TRL: a real `GRPOTrainer` (beta=0 so no reference model, loss "dapo" =
  token mean like masrl's default, `per_device_train_batch_size=micro_batch`,
  `gradient_accumulation_steps=batch/micro_batch`) whose inner step is
  reproduced by hand on the dict `_generate_and_score_completions` would
  return: for each micro-batch `compute_loss` + backward, then clip and
  `optimizer.step()` with the optimizer the trainer itself creates. This is
  exactly the work of `Trainer.training_step` without generation.
- Before timing, the two sides' per-token log-probs of the first micro-batch
  are compared (fresh LoRA B is zero, so both equal the base model's).
- One warm-up each, then `reps` interleaved rounds (A B, B A, ...); the
  median seconds give response tokens/s; the ratio masrl/TRL is the result.
- Peak RSS of each side: after the timing, each side runs one step alone in
  a fresh child process (this script with `--child`), which reports
  its peak RSS (VmHWM: model, optimizer and step included). In one shared process
  the allocator keeps freed memory, so a rise there would mislead.

    python bench/update_vs_trl.py                 # SmolLM2, 8 prompts x 4, 64+64 tokens
    python bench/update_vs_trl.py --model tiny    # seconds-long check of the script
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings

import torch
from _util import GB, emit_json, interleaved, max_rss_bytes, median, table, warn_if_busy

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.models import load_model
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

POLICY = "policy"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 | tiny | a local HF directory")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4, help="completions per prompt (TRL num_generations)")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--completion-len", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward, both sides")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child processes")
    p.add_argument("--no-one-pass", action="store_true", help="skip masrl with one pass per row (share_prompts off)")
    p.add_argument("--child", choices=["masrl", "masrl-1pass", "trl"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if (args.prompts * args.group) % args.micro_batch:
        p.error("prompts*group must be a multiple of --micro-batch")
    return args


# ------------------------------------------------------------------ the batch
def make_batch(tokenizer, args) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """prompt ids [B, P], completion ids [B, R], advantages [B]; B = prompts * group."""
    g = torch.Generator().manual_seed(0)
    allowed = torch.tensor([i for i in range(len(tokenizer)) if i not in set(tokenizer.all_special_ids)])
    pick = lambda *shape: allowed[torch.randint(len(allowed), shape, generator=g)]
    prompts = pick(args.prompts, args.prompt_len).repeat_interleave(args.group, dim=0)  # [B, P]
    completions = pick(args.prompts * args.group, args.completion_len)  # [B, R]
    rewards = torch.randn(args.prompts, args.group, generator=g)
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    return prompts, completions, adv.flatten()


# ------------------------------------------------------------------- masrl
def build_masrl(args, loaded, prompts, completions, adv, share_prompts: bool = True):
    model = PolicyModel(loaded, [POLICY], LoraSpec())
    opt = torch.optim.AdamW(model.parameters(POLICY), lr=args.lr, weight_decay=0.0)
    samples = [
        Sample(POLICY, tuple(p.tolist()), tuple(c.tolist()), float(a)) for p, c, a in zip(prompts, completions, adv)
    ]
    settings = UpdateSettings(micro_batch=args.micro_batch, share_prompts=share_prompts)

    def step() -> None:
        update_policy(model, POLICY, samples, opt, settings)

    def logprobs(n: int) -> torch.Tensor:
        with torch.no_grad():
            return model.response_logprobs([s.prompt_ids for s in samples[:n]], [s.response_ids for s in samples[:n]], POLICY)[0]

    return step, logprobs


# --------------------------------------------------------------------- TRL
def zero_reward(completions, **kwargs):
    return [0.0] * len(completions)


def build_trl(args, loaded, prompts, completions, adv, out_dir: str):
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer
    from trl.trainer.utils import split_tensor_dict

    spec = LoraSpec()
    batch = len(prompts)
    accum = batch // args.micro_batch
    config = GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=accum,
        num_generations=args.group,
        max_completion_length=args.completion_len,
        beta=0.0,
        loss_type="dapo",
        learning_rate=args.lr,
        weight_decay=0.0,
        max_grad_norm=1.0,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        seed=0,
    )
    lora = LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=loaded.model,
            reward_funcs=zero_reward,
            args=config,
            train_dataset=Dataset.from_dict({"prompt": ["x"] * batch}),
            processing_class=loaded.tokenizer,
            peft_config=lora,
        )
    trainer.current_gradient_accumulation_steps = accum  # Trainer sets this inside train()
    opt = trainer.create_optimizer()
    model = trainer.model
    params = [p for p in model.parameters() if p.requires_grad]
    # What `_generate_and_score_completions` returns for this batch (one process,
    # on-policy: no old_per_token_logps, so the ratio is 1 as in masrl).
    inputs = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": completions,
        "completion_mask": torch.ones_like(completions),
        "advantages": adv,
        "num_items_in_batch": torch.tensor(float(completions.numel())),
    }
    chunks = split_tensor_dict(inputs, accum)
    for c in chunks:  # a scalar is not split: every chunk carries the whole batch's count
        c["num_items_in_batch"] = inputs["num_items_in_batch"]

    def step() -> None:
        model.train()
        opt.zero_grad(set_to_none=True)
        for chunk in chunks:
            with trainer.compute_loss_context_manager():
                loss = trainer.compute_loss(model, chunk)
            trainer.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def logprobs(n: int) -> torch.Tensor:
        ids = torch.cat([prompts[:n], completions[:n]], 1)
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(model, ids, torch.ones_like(ids), completions.size(1))[0]

    return step, logprobs, type(opt).__name__


# ------------------------------------------------------------------- main
def build(which: str, args, out_dir: str):
    """One side's (step, logprobs, optimizer name), on its own copy of the model."""
    loaded = load_model(args.model)
    prompts, completions, adv = make_batch(loaded.tokenizer, args)
    if which in ("masrl", "masrl-1pass"):
        return (*build_masrl(args, loaded, prompts, completions, adv, share_prompts=which == "masrl"), "AdamW")
    return build_trl(args, loaded, prompts, completions, adv, out_dir)


def child(args) -> None:
    """One step of one side in this fresh process; print its peak RSS."""
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as out_dir:
        step = build(args.child, args, out_dir)[0]
        before = max_rss_bytes()
        step()
    print(json.dumps({"before_step": before, "peak": max_rss_bytes()}))


def peak_rss(which: str) -> dict:
    cmd = [sys.executable, __file__, *sys.argv[1:], "--child", which]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise RuntimeError(f"peak-RSS child {which!r} failed with exit code {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    args = parse_args()
    if args.child:
        return child(args)
    torch.set_num_threads(args.threads)
    busy = warn_if_busy()
    batch, resp_tokens = args.prompts * args.group, args.prompts * args.group * args.completion_len

    with tempfile.TemporaryDirectory() as out_dir:
        masrl_step, masrl_lp, _ = build("masrl", args, out_dir)
        trl_step, trl_lp, trl_opt = build("trl", args, out_dir)
        contenders = {"masrl": masrl_step, "trl": trl_step}
        if not args.no_one_pass:
            contenders["masrl-1pass"] = build("masrl-1pass", args, out_dir)[0]
        torch.set_num_threads(args.threads)  # in case the trainer's setup changed it
        n = min(args.micro_batch, batch)
        logp_diff = (masrl_lp(n) - trl_lp(n)).abs().max().item()
        print(f"log-prob check on {n} sequences: max |masrl - TRL| = {logp_diff:.2e}")
        times = interleaved(contenders, reps=args.reps)
    assert torch.get_num_threads() == args.threads
    busy += [b for b in warn_if_busy() if b not in busy]
    rss = {k: None if args.no_rss else peak_rss(k) for k in times}

    med = {k: median(v) for k, v in times.items()}
    tps = {k: resp_tokens / v for k, v in med.items()}
    ratio = tps["masrl"] / tps["trl"]
    gb = lambda k, f: f"{rss[k][f] / GB:.2f}" if rss[k] else "-"
    print(
        f"\nupdate of {batch} sequences ({args.prompts} prompts x {args.group}), prompt {args.prompt_len} + "
        f"completion {args.completion_len} tokens, micro-batch {args.micro_batch}, LoRA r=16 a=32 x7 modules, "
        f"float32, {args.threads} threads, model {args.model}; TRL optimizer {trl_opt}"
    )
    rows = [
        [k, f"{med[k]:.2f}", " ".join(f"{t:.2f}" for t in times[k]), f"{tps[k]:.1f}", gb(k, "before_step"), gb(k, "peak")]
        for k in times
    ]
    print(table(rows, ["impl", "median s", "reps s", "resp tok/s", "RSS before step GB", "peak RSS GB"]))
    print(f"ratio masrl/TRL tokens/s = {ratio:.2f} (target >= 2.0)")
    if "masrl-1pass" in tps:
        print(f"shared prompts vs one pass per row: {tps['masrl'] / tps['masrl-1pass']:.2f}x; "
              f"one pass per row / TRL = {tps['masrl-1pass'] / tps['trl']:.2f}")
    emit_json(
        "update_vs_trl",
        {
            "model": args.model,
            "batch": batch,
            "prompt_len": args.prompt_len,
            "completion_len": args.completion_len,
            "micro_batch": args.micro_batch,
            "threads": args.threads,
            "masrl_tok_s": round(tps["masrl"], 2),
            "trl_tok_s": round(tps["trl"], 2),
            "ratio": round(ratio, 3),
            "masrl_one_pass_tok_s": round(tps["masrl-1pass"], 2) if "masrl-1pass" in tps else None,
            "masrl_peak_rss_gb": round(rss["masrl"]["peak"] / GB, 3) if rss["masrl"] else None,
            "trl_peak_rss_gb": round(rss["trl"]["peak"] / GB, 3) if rss["trl"] else None,
            "logprob_max_diff": logp_diff,
            "disturbed_by": busy,
        },
    )


if __name__ == "__main__":
    main()
