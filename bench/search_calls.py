"""Agent calls per question of the search pipeline's samplers (FoF, RR, IS, MAPPO's single trajectory).

Builds the engine of each shipped search config, expands the training trees
of the same questions once (no update) and counts the agent calls and
generated tokens per question; prints a table and the ratio of each sampler
to Fork-on-first. The number of calls depends only on the sampler (every
call is drawn whatever the model writes), so `--model tiny` measures it in
seconds; generated tokens per question do depend on the model.

Expected at G = 4 with three agents: FoF 3G = 12; IS G + (1 + 2G) + (2 + G)
= 27; RR 0.7 * 12 + 0.1 * 9 + 0.2 * 6 = 10.5 (ratio 0.875); MAPPO 3.

    python bench/search_calls.py --model tiny --questions 400
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile

CONFIGS = ("search-fof", "search-rr", "search-is", "search-mappo")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="'tiny' or 'smollm2' (calls do not depend on it)")
    p.add_argument("--questions", type=int, default=200, help="training questions expanded per sampler")
    p.add_argument("--batch", type=int, default=16, help="questions expanded together")
    p.add_argument("--max-new-tokens", type=int, default=8)
    return p.parse_args()


def main() -> None:
    import torch

    from masrl.loading import load_config
    from masrl.parts import build_parts
    from masrl.rollout.tree import rollout

    args = parse_args()
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONFIGS:
            overrides = [f"model.name={args.model}", f"rollout.max_new_tokens={args.max_new_tokens}",
                         f"run.dir={tmp}/{name}", f"system.cache_dir={tmp}/cache"]  # fmt: skip
            engine = build_parts(load_config(name, overrides))
            calls = tokens = 0
            for start in range(0, args.questions, args.batch):
                tasks = engine.task.items("train", start, min(args.batch, args.questions - start))
                episodes = asyncio.run(rollout(engine.system, engine.agents, tasks, engine.rule))
                calls += sum(len(ep.calls) for ep in episodes)
                tokens += sum(c.reply.tokens_out for ep in episodes for c in ep.calls if c.reply)
            n = args.questions
            results[name] = {"calls_per_question": calls / n, "tokens_per_question": tokens / n}
    base = results["search-fof"]["calls_per_question"]
    print(f"| sampler | agent calls per question | ratio to FoF | generated tokens per question |  ({args.model}, "
          f"{args.questions} questions)")
    print("| --- | --- | --- | --- |")
    for name, r in results.items():
        r["ratio_to_fof"] = r["calls_per_question"] / base
        print(f"| {name} | {r['calls_per_question']:.2f} | {r['ratio_to_fof']:.3f} | {r['tokens_per_question']:.1f} |")
    print(json.dumps({"bench": "search_calls", "model": args.model, "questions": args.questions, **results}))


if __name__ == "__main__":
    main()
