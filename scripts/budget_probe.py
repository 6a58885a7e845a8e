"""How a budget controller's first decision depends on the mode: P(option) per mode, no sampling.

For each item and each budget mode, one forward pass over the controller's first prompt (protocol
`decide` with `labels: numbers`, so the reply starts right after the prefilled `<call>`) gives the
probability of each option's number as the next token. Printed per mode: the mean of those
probabilities renormalised over the options, how often each option is the most likely (what greedy
evaluation picks), and the probability mass on the option numbers at all (the rest are format
failures in waiting).

    python scripts/budget_probe.py budget-grpo                                # the untrained controller
    python scripts/budget_probe.py runs/budget-grpo --items 60 --split eval   # a trained run's adapter
"""

from __future__ import annotations

import argparse
import sys

import torch

from masrl.systems.budget.system import ALONE, CONTROLLER


def option_token_ids(system, tokenizer) -> list[int]:
    """The token of each option's label, in option order (alone, then the experts cheapest first)."""
    labels = [system.label(o) for o in (ALONE, *system.experts)]
    ids = [tokenizer.encode(label, add_special_tokens=False) for label in labels]
    if any(len(i) != 1 for i in ids):
        raise SystemExit(f"budget_probe: every option label must be one token; got {dict(zip(labels, ids))}")
    return [i[0] for i in ids]


def option_probabilities(model, system, task, option_ids: list[int]) -> torch.Tensor:
    """P(next token = each option's label) at the controller's first decision on `task`."""
    prompt = torch.tensor([model.encode_chat(system.controller_messages(system.start(task)))])
    with torch.no_grad(), model.use(CONTROLLER) as net:
        logits = net(input_ids=prompt).logits[0, -1].float()
    return torch.softmax(logits, -1)[option_ids]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a config name or file, or a trained run's directory")
    parser.add_argument("overrides", nargs="*", help="config overrides (not with a run directory)")
    parser.add_argument("--items", type=int, default=40, help="items per mode (default 40)")
    parser.add_argument("--split", choices=["train", "eval"], default="train")
    args = parser.parse_args(argv)

    from masrl.config import ConfigError
    from masrl.run.trained import TrainingError, load_parts

    try:
        engine = load_parts(args.target, args.overrides)
    except (ConfigError, TrainingError) as exc:
        raise SystemExit(f"budget_probe: {exc}")
    system = engine.system
    if not getattr(system, "numbered", False):
        raise SystemExit("budget_probe: needs the budget system with system.protocol=decide and system.labels=numbers")
    torch.set_num_threads(engine.config.trainer.threads or torch.get_num_threads())
    offset = 1000 if args.split == "train" else 0  # train items past the first thousand: not the ones trained on first
    tasks = engine.task.items(args.split, offset, args.items)
    model = engine.models[CONTROLLER]
    option_ids = option_token_ids(system, model.tokenizer)
    names = [system.label(o) + (f" {o}" if o != ALONE else " alone") for o in (ALONE, *system.experts)]
    print(f"{len(tasks)} {args.split} items; options: {', '.join(names)}")
    for mode in system.mode_names:
        fixed = system.with_mode(mode)
        probs = torch.stack([option_probabilities(model, fixed, t, option_ids) for t in tasks])
        mass = probs.sum(-1)
        mean = (probs / mass[:, None]).mean(0)
        greedy = torch.bincount(probs.argmax(-1), minlength=len(names))
        print(
            f"{mode:>8s}  P(option) {' '.join(f'{p:.3f}' for p in mean.tolist())}  "
            f"most likely {' '.join(str(int(c)) for c in greedy)}  on option labels {mass.mean():.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
