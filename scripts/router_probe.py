"""What a router controller would decide, read from its next-token probabilities (no sampling).

Two probes, one forward pass each:

- **Routing** (turn 1): P(each agent's label) right after the prefilled `<model>`, per
  difficulty level of the task's items: the mean renormalised over the labels and how often
  each label is the most likely one (what greedy evaluation picks).
- **Verification** (turn 2): the weakest agent's draft of the same items in three versions, right,
  wrong with a visible slip, wrong without one (the simulated pool's `visible_draft` with the
  draft forced), and P(True) against P(False) right after the prefilled `<verdict>`: the mean
  P(True) renormalised over the two and how often True is the more likely (the greedy verdict).

    python scripts/router_probe.py router                       # the untrained controller
    python scripts/router_probe.py runs/router --split eval      # a trained run's adapter

`--supervise MINUTES` first trains the controller's adapter on the verdict alone, supervised:
cross-entropy of the word True or False at the verdict position on the weakest agent's drafts of
training items the probe never reads, each item's right and wrong draft in the same batch
(`--wrong visible`, the default, keeps only items whose wrong draft shows its slip: the easiest form
of the skill). RL gets a noisier signal for the same verdicts, so what supervision reaches in the
minutes bounds what a verdict trained by RL in them can (docs/router.md, "What verification could earn here"):

    python scripts/router_probe.py router system.pool.drafts=visible system.labels=numbers \\
        --supervise 30 --lr 1e-3 --split eval --items 200
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import replace

import torch

from masrl.pools.drafts import VISIBLE, DraftStyle, visible_draft
from masrl.pools.slips import check_draft
from masrl.systems.router.system import CONTROLLER, RouterState

FORCED = {"right": (True, None), "wrong, visible": (False, 1.0), "wrong, hidden": (False, 0.0)}


def first_token(tokenizer, text: str) -> int:
    return tokenizer.encode(text, add_special_tokens=False)[0]


def next_token_probs(model, messages, token_ids: list[int]) -> torch.Tensor:
    """P(next token = each of `token_ids`) after the prompt `messages`."""
    prompt = torch.tensor([model.encode_chat(messages)])
    with torch.no_grad(), model.use(CONTROLLER) as net:
        logits = net(input_ids=prompt).logits[0, -1].float()
    return torch.softmax(logits, -1)[token_ids]


def level_of(item) -> str:
    return item.id.split("/", 1)[0] if "/" in item.id else "all"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", help="a config name or file, or a trained run's directory")
    parser.add_argument("overrides", nargs="*", help="config overrides (not with a run directory)")
    parser.add_argument("--items", type=int, default=60, help="items (default 60)")
    parser.add_argument("--split", choices=["train", "eval"], default="train")
    parser.add_argument("--supervise", type=float, default=0.0, metavar="MINUTES",
                        help="first train the verdict supervised for this many minutes (default 0: no training)")
    parser.add_argument("--lr", type=float, default=2e-3, help="--supervise: AdamW learning rate (default 2e-3)")
    parser.add_argument("--wrong", choices=["visible", "all"], default="visible",
                        help="--supervise: the wrong drafts trained on (default visible: only those showing a slip)")
    args = parser.parse_args(argv)
    if args.supervise < 0 or args.lr <= 0:
        raise SystemExit("router_probe: --supervise must be >= 0 and --lr > 0")

    from masrl.config import ConfigError
    from masrl.run.trained import TrainingError, load_parts

    try:
        engine = load_parts(args.target, args.overrides)
    except (ConfigError, TrainingError) as exc:
        raise SystemExit(f"router_probe: {exc}")
    system = engine.system
    if engine.config.system.kind != "router":
        raise SystemExit("router_probe: needs the router system")
    torch.set_num_threads(engine.config.trainer.threads or torch.get_num_threads())
    model = engine.models[CONTROLLER]
    tok = model.tokenizer
    offset = 1000 if args.split == "train" else 0  # past the items a short run trains on first
    items = engine.task.items(args.split, offset, args.items)

    if args.supervise:
        supervise_verdict(engine, args.supervise * 60, args.lr, visible_only=args.wrong == "visible")

    labels = [system.label(a) for a in system.agents]
    label_ids = [first_token(tok, label) for label in labels]
    print(f"{len(items)} {args.split} items; labels {dict(zip(labels, system.agents))}")
    by_level: dict[str, list[torch.Tensor]] = {}
    for item in items:
        probs = next_token_probs(model, system.controller_messages(system.start(item)), label_ids)
        by_level.setdefault(level_of(item), []).append(probs)
    print("routing at turn 1 (P renormalised over the labels; most likely counts)")
    for level, rows in by_level.items():
        p = torch.stack(rows)
        mass = p.sum(-1)
        mean = (p / mass[:, None]).mean(0)
        top = torch.bincount(p.argmax(-1), minlength=len(labels))
        print(f"  {level:>8s} ({len(rows):3d})  P {' '.join(f'{x:.3f}' for x in mean.tolist())}  "
              f"most likely {' '.join(str(int(c)) for c in top)}  mass on labels {mass.mean():.3f}")

    weak = system.agents[0]
    verdict_ids = [first_token(tok, "True"), first_token(tok, "False")]
    print(f"verification at turn 2 of {weak}'s draft (P(True) renormalised over True/False; share greedy True)")
    p_true_of: dict[str, torch.Tensor] = {}
    for name, (correct, rate) in FORCED.items():
        rows = []
        for item in items:
            # the calibrated pool's slips (false steps and answer mismatches in VISIBLE's proportions)
            style = DraftStyle(rate if rate is not None else 0.0, VISIBLE.false_step_share)
            state = verdict_state(system, item, correct, style)
            if state is None:
                continue
            rows.append(next_token_probs(model, system.controller_messages(state), verdict_ids))
        if not rows:
            continue
        p = torch.stack(rows)
        p_true = p_true_of[name] = p[:, 0] / p.sum(-1)
        print(f"  {name:>15s} ({len(rows):3d})  P(True) {p_true.mean():.3f}  greedy True {(p_true > 0.5).float().mean():.3f}"
              f"  mass on True/False {p.sum(-1).mean():.3f}")
    if "right" in p_true_of:
        print("how well P(True) alone separates right drafts from wrong ones (a verdict bias is one number for "
              "training to move; the ranking is what the untrained controller reads)")
        for name in ("wrong, visible", "wrong, hidden"):
            if name in p_true_of:
                auc, tpr, tnr = separation(p_true_of["right"].tolist(), p_true_of[name].tolist())
                print(f"  right vs {name:>15s}  AUC {auc:.3f}  best threshold: TPR {tpr:.3f} TNR {tnr:.3f}")
    return 0


def verdict_state(system, item, correct: bool, style: DraftStyle, attempt: int = 0) -> RouterState | None:
    """Turn 2 with the weakest agent's draft of `item` forced right or wrong (None: no draft to write)."""
    weak = system.agents[0]
    draft = visible_draft(item, correct, (0, weak, item.id, item.question, attempt), style, None)
    if draft is None:
        return None
    return replace(RouterState(item), turn=2, draft=draft, draft_correct=correct, author=weak)


def supervise_verdict(engine, seconds: float, lr: float, visible_only: bool, batch: int = 16) -> None:
    """Train the controller's adapter on the verdict token for `seconds` (module docstring)."""
    system, model = engine.system, engine.models[CONTROLLER]
    tok = model.tokenizer
    verdict_ids = [first_token(tok, "True"), first_token(tok, "False")]
    items = engine.task.items("train", 2000, 5000)  # past the probe's 1000.. of the train split
    params = model.parameters(CONTROLLER)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    def examples():
        # each item's right and wrong drafts one after the other: balanced classes, paired by item
        for i in itertools.count():
            item, attempt = items[i % len(items)], i // len(items)  # a new attempt on each pass over the items
            right = verdict_state(system, item, True, VISIBLE, attempt)
            wrong = verdict_state(system, item, False, VISIBLE, attempt)
            if right is None or wrong is None:
                continue
            if visible_only and not check_draft(wrong.draft, engine.task.extract_answer(wrong.draft)).visible:
                continue
            yield model.encode_chat(system.controller_messages(right)), True
            yield model.encode_chat(system.controller_messages(wrong)), False

    stream, started, step, seen = examples(), time.perf_counter(), 0, 0
    print(f"supervising the verdict for {seconds / 60:.0f} min at lr {lr} "
          f"({'visible' if visible_only else 'all'} wrong drafts), batches of {batch}", flush=True)
    while time.perf_counter() - started < seconds:
        optimizer.zero_grad()
        loss_sum, hits = 0.0, 0
        for ids, correct in itertools.islice(stream, batch):
            with model.use(CONTROLLER) as net:
                logits = net(input_ids=torch.tensor([ids])).logits[0, -1]
            target = verdict_ids[0 if correct else 1]
            # over the whole vocabulary, as supervised fine-tuning does: the mass stays on the two words
            loss = torch.nn.functional.cross_entropy(logits[None], torch.tensor([target])) / batch
            loss.backward()
            hits += int((logits[verdict_ids[0]] > logits[verdict_ids[1]]).item() == correct)
            loss_sum += loss.item()
        optimizer.step()
        step, seen = step + 1, seen + batch
        if step % 10 == 0:
            print(f"  step {step}: {seen} drafts, loss {loss_sum:.3f}, batch accuracy {hits / batch:.2f}, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    print(f"supervised {step} steps, {seen} drafts, {time.perf_counter() - started:.0f} s", flush=True)


def separation(right: list[float], wrong: list[float]) -> tuple[float, float, float]:
    """AUC of P(True) for right over wrong drafts (ties count half), and the TPR and TNR at the
    threshold "True iff P(True) >= t" that maximises min(TPR, TNR)."""
    pairs = sum((r > w) + 0.5 * (r == w) for r in right for w in wrong)
    auc = pairs / (len(right) * len(wrong))
    best = (1.0, 0.0)  # the threshold below every score: always True
    for t in sorted(set(right) | set(wrong)):
        tpr = sum(r >= t for r in right) / len(right)
        tnr = sum(w < t for w in wrong) / len(wrong)
        if min(tpr, tnr) > min(best):
            best = (tpr, tnr)
    return auc, *best


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
