"""Per-turn tree sampling vs parallel sampling for the turn-based agents (AT-GRPO, sec. 4), same K.

Builds the engine of a shipped turns config twice, once with `sampler.rule:
per_turn_greedy` and once with `parallel`, expands the same training tasks
(no update) and reports per task: policy calls, sampling wall seconds, and
the share of (environment, agent, turn) groups whose candidates all saw the
same prompt (what GRPO's comparison needs, sec. 3). Without early stops both
rules draw K x agents x turns calls per task; the tree's groups always share
a prompt, parallel's only at the first decision.

    python bench/turns_sampling.py --model tiny --tasks 16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import defaultdict


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="turns-planpath")
    p.add_argument("--model", default="smollm2", help="'tiny' or 'smollm2' (call counts do not depend on it)")
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--batch", type=int, default=4, help="tasks expanded together (one training step's batch)")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
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
        for rule in ("per_turn_greedy", "parallel"):
            overrides = [f"model.name={args.model}", f"rollout.max_new_tokens={args.max_new_tokens}",
                         f"run.dir={tmp}/{rule}", f"sampler.rule={rule}", f"sampler.group_size={args.k}"]  # fmt: skip
            engine = build_parts(load_config(args.config, overrides))
            calls, seconds, groups, same = 0, 0.0, 0, 0
            for start in range(0, args.tasks, args.batch):
                tasks = engine.task.items("train", start, min(args.batch, args.tasks - start))
                t0 = time.perf_counter()
                episodes = asyncio.run(rollout(engine.system, engine.agents, tasks, engine.rule))
                seconds += time.perf_counter() - t0
                calls += sum(len(ep.calls) for ep in episodes)
                for ep in episodes:
                    prompts = defaultdict(set)
                    for c in ep.calls:
                        prompts[(c.agent, c.turn)].add(c.messages)
                    groups += len(prompts)
                    same += sum(len(p) == 1 for p in prompts.values())
            steps = -(-args.tasks // args.batch)
            results[rule] = {
                "calls_per_task": calls / args.tasks,
                "seconds_per_step": seconds / steps,
                "groups_sharing_one_prompt": same / max(groups, 1),
            }
    print(f"| sampler | policy calls per task | sampling seconds per step | groups sharing one prompt |  "
          f"({args.config}, {args.model}, K={args.k}, {args.tasks} tasks, {args.batch} per step)")
    print("| --- | --- | --- | --- |")
    for rule, r in results.items():
        print(f"| {rule} | {r['calls_per_task']:.2f} | {r['seconds_per_step']:.2f} | {r['groups_sharing_one_prompt']:.3f} |")
    print(json.dumps({"bench": "turns_sampling", "config": args.config, "model": args.model, "k": args.k, **results}))


if __name__ == "__main__":
    main()
