"""GPU check: generation and update throughput and peak memory of ~0.5B and ~1.5B models, and a 2-step run.

One command on a machine with a GPU (no model hub needed):

    python bench/gpu.py                    # auto device, 0.5b and 1.5b
    python bench/gpu.py --device cpu --size tiny   # what the tests run: the same code in seconds

Method
- Each size is a Llama built in memory with random weights (`hf_config`: the
  shapes of Qwen2.5-0.5B and Qwen2.5-1.5B, grouped-query attention, a 151,936
  token vocabulary, tied embeddings); `tiny` is masrl's 2-layer test model.
  Throughput depends on the shapes, not on what the weights learned.
- It is wrapped as masrl trains it: `PolicyModel` with one LoRA adapter
  (r=16, all seven projections), on `--device` in `--precision` (auto: bf16
  base weights and autocast on CUDA, float32 on CPU; masrl/device.py), SDPA
  attention.
- Generation, per engine in `--engines` (default all three), the same
  `--batch` random prompts of `--prompt-tokens`, `--new-tokens` new tokens:
  - `hf`: HF `generate` through peft, KV cache on, exactly `--new-tokens`
    (`min_new_tokens`), masrl's reference engine;
  - `lean`: masrl's lean engine (`LeanEngine`: merged adapter weights,
    `LlamaDecoder`, a cache allocated at its final length), one kernel
    launch per op, finished rows leave the batch;
  - `graphs`: the lean engine with each call's decode step captured once as
    a CUDA graph and replayed per token (`GraphForward`; on CPU the same
    fixed-shape step runs eagerly).
  The lean engines stop a row at the end-of-sequence token (random weights
  over a 151,936-token vocabulary rarely draw it), so their tokens/s counts
  the tokens they returned. tokens/s: tokens / seconds, the median of
  `--reps` after a warm-up; ms/step: seconds / new tokens. For each lean
  engine, `logprob_gap`: the largest and the mean |difference| between the
  log-prob it sampled each token with and the one the trainer computes for
  it (`PolicyModel.response_logprobs`, the update's own forward): what the
  update's importance ratio would see at its first epoch; for `hf`, from
  the logits `generate` returns (`output_logits`, in an extra untimed call).
- Update: masrl's `update_policy` (clipped surrogate, token mean, AdamW step)
  on `--batch` samples of prompt + response random tokens, advantages +-1,
  micro-batch `--micro-batch`; tokens/s = response tokens / seconds.
- Peak memory: `torch.cuda.max_memory_allocated` over each phase on CUDA
  (null on CPU, where the process's peak RSS is given instead).
- Then `masrl train single-arithmetic` with the tiny model for 2 steps on the
  same device (`trainer.device`), and its logged reward and step times.

The last line printed is one JSON object (`{"bench": "gpu", ...}`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from masrl.baseline import step_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import GB, emit_json, max_rss_bytes, median  # noqa: E402

# Shapes of Qwen2.5-0.5B / 1.5B (their config.json), as a Llama: ~0.49B and ~1.54B parameters.
SIZES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936),
}  # fmt: skip


def hf_config(size: str):
    from transformers import LlamaConfig

    return LlamaConfig(**SIZES[size], max_position_embeddings=4096, tie_word_embeddings=True, attn_implementation="sdpa",
                       bos_token_id=0, eos_token_id=1, pad_token_id=1)  # fmt: skip


def build(size: str, place):
    """A `LoadedModel` of `size` with random weights, in the placement's weight dtype."""
    from masrl.models import LoadedModel, build_tiny_model, build_tiny_tokenizer

    if size == "tiny":
        model, tok = build_tiny_model(seed=0)
        return LoadedModel(model.to(place.weights), tok, "tiny")
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device(place.device):  # initialise on the device: a 1.5B float32 CPU copy is never made
        model = LlamaForCausalLM(hf_config(size)).to(place.weights)
    # The tokenizer is only for PolicyModel's padding ids; the benchmark feeds token ids directly.
    return LoadedModel(model, build_tiny_tokenizer(), size)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / GB if device.type == "cuda" else None


def timed(fn, device: torch.device, reps: int) -> float:
    """Median seconds of `reps` calls after one warm-up."""
    fn()
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return median(times)


def measure(size: str, place, args) -> dict:
    from masrl.agents.policy import LoraSpec, PolicyModel
    from masrl.types import Sample
    from masrl.update import UpdateSettings, update_policy

    device = place.device
    pm = PolicyModel(build(size, place), ["bench"], LoraSpec(rank=16, alpha=32), keep_reference=False, placement=place)
    params = sum(p.numel() for p in pm.model.parameters())
    vocab = pm.model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, vocab, (args.batch, args.prompt_tokens), generator=g)

    def generate(logits: bool = False):
        with torch.no_grad(), pm.use("bench") as model, place.autocast():
            ids = prompts.to(device)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, pad_token_id=1,
                                 output_logits=logits, return_dict_in_generate=logits)  # fmt: skip
        if not logits:
            assert out.shape[1] == args.prompt_tokens + args.new_tokens
            return None
        tokens = out.sequences[:, args.prompt_tokens :]  # [B, N]
        # generate's own logits for each drawn token (temperature 1, no top-k/p: the sampling distribution)
        logps = torch.stack(out.logits, 1).float().log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        return logprob_gap(pm, prompts.tolist(), tokens.tolist(), logps.tolist(), args.micro_batch)

    engines = {}
    for engine in args.engines:
        reset_peak(device)
        if engine == "hf":
            seconds, tokens = timed(generate, device, args.reps), args.batch * args.new_tokens
            gap = generate(logits=True)  # after the timing: keeping every step's logits costs memory and time
        else:
            seconds, tokens, gap = lean_generation(pm, prompts, args, graphs=engine == "graphs")
        engines[engine] = {
            "tokens_per_s": tokens / seconds,
            "ms_per_step": 1000 * seconds / args.new_tokens,
            "peak_gpu_gb": peak_gb(device),
            "logprob_gap": gap,
        }

    responses = torch.randint(2, vocab, (args.batch, args.new_tokens), generator=g)
    samples = [Sample("bench", tuple(p.tolist()), tuple(r.tolist()), 1.0 if i % 2 else -1.0)
               for i, (p, r) in enumerate(zip(prompts, responses))]  # fmt: skip
    opt = torch.optim.AdamW(pm.parameters("bench"), lr=1e-5)
    settings = UpdateSettings(micro_batch=args.micro_batch)
    reset_peak(device)
    upd_s = timed(lambda: update_policy(pm, "bench", samples, opt, settings), device, args.reps)
    upd_peak = peak_gb(device)
    first = engines[args.engines[0]]
    return {
        "size": size,
        "params": params,
        "gen_tokens_per_s": first["tokens_per_s"],  # the first of --engines (hf by default)
        "update_tokens_per_s": args.batch * args.new_tokens / upd_s,
        "gen_peak_gpu_gb": first["peak_gpu_gb"],
        "update_peak_gpu_gb": upd_peak,
        "engines": engines,
    }


def lean_generation(pm, prompts: torch.Tensor, args, graphs: bool) -> tuple[float, int, dict]:
    """Median seconds of the lean engine's call (after a warm-up that also merges the adapter), the tokens
    one call returns, and the gap between its sampling log-probs and the trainer's for them."""
    from masrl.generation.lean import LeanEngine
    from masrl.generation.sampling import SamplingParams

    device = pm.placement.device
    lean = LeanEngine(pm, graphs=graphs)
    rows = prompts.tolist()
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    out: list = []
    seconds = timed(lambda: out.append(lean.sample(rows, params, "bench")), device, args.reps)
    gens, logps = out[-1]
    tokens = sum(len(g.response_ids) for g in gens)
    return seconds, tokens, logprob_gap(pm, rows, [g.response_ids for g in gens], logps, args.micro_batch)


def logprob_gap(pm, rows: list, responses: list, sampled: list, micro_batch: int) -> dict:
    """The largest and the mean |sampling log-prob - the trainer's| over the sampled tokens; the trainer's
    forward (`PolicyModel.response_logprobs`, what the update computes) a micro-batch at a time."""
    worst, total, count = 0.0, 0.0, 0
    for i in range(0, len(rows), micro_batch):
        with torch.no_grad(), pm.placement.autocast():
            trainer, _ = pm.response_logprobs(rows[i : i + micro_batch], responses[i : i + micro_batch], "bench")
        for j, lp in enumerate(sampled[i : i + micro_batch]):
            diff = (torch.tensor(lp) - trainer[j, : len(lp)].float().cpu()).abs()
            worst, total, count = max(worst, diff.max().item()), total + diff.sum().item(), count + len(lp)
    return {"max": worst, "mean": total / count}


def train_smoke(device: str, precision: str) -> dict:
    """`masrl train single-arithmetic` on the tiny model for 2 steps on `device`."""
    import json

    from masrl.loading import load_config
    from masrl.train import train

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        config = load_config("single-arithmetic", [
            "model.name=tiny", "trainer.steps=2", "trainer.batch_size=2", "sampler.group_size=4",
            "rollout.max_new_tokens=8", "eval.size=2", "eval.max_new_tokens=8", "trainer.checkpoint_every=1",
            f"trainer.device={device}", f"trainer.precision={precision}", f"run.dir={run}",
        ])  # fmt: skip
        t0 = time.perf_counter()
        train(config)
        seconds = time.perf_counter() - t0
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if r["kind"] == "train"]
        return {
            "config": "single-arithmetic",
            "steps": len(steps),
            "checkpoint": (run / "checkpoints" / "latest").read_text().strip(),
            "reward": [r["reward"] for r in steps],
            "step_seconds": [step_seconds(r) for r in steps],
            "seconds": seconds,
        }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "float32", "bf16"])
    p.add_argument("--size", default="all", choices=["all", "tiny", *SIZES], help="all: 0.5b then 1.5b")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--engines", default="hf,lean,graphs", help="generation engines, comma-separated: hf, lean, graphs")
    p.add_argument("--no-train", action="store_true", help="skip the 2-step tiny run")
    args = p.parse_args(argv)
    args.engines = args.engines.split(",")
    if not args.engines or set(args.engines) - {"hf", "lean", "graphs"}:
        p.error(f"--engines takes hf, lean and graphs, got {','.join(args.engines)!r}")

    from masrl.device import placement

    place = placement(args.device, args.precision)
    device = place.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"gpu check on {name}, {place.precision}", file=sys.stderr)
    sizes = list(SIZES) if args.size == "all" else [args.size]
    models = []
    for size in sizes:
        row = measure(size, place, args)  # its model is freed on return
        if device.type == "cuda":
            torch.cuda.empty_cache()
        gen = ", ".join(f"{e} {r['tokens_per_s']:.0f} tok/s ({r['ms_per_step']:.1f} ms/step)" for e, r in row["engines"].items())
        print(f"  {size}: {row['params'] / 1e9:.2f}B params, generate: {gen}; update {row['update_tokens_per_s']:.0f} tok/s",
              file=sys.stderr)  # fmt: skip
        models.append(row)
    smoke = None if args.no_train else train_smoke(device.type, args.precision)
    result = {
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "precision": place.precision,
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "micro_batch": args.micro_batch,
        "models": models,
        "train": smoke,
        "peak_rss_gb": max_rss_bytes() / GB,
    }
    emit_json("gpu", result)
    return result


if __name__ == "__main__":
    main()
