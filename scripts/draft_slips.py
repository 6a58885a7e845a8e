"""How often real models' wrong answers show a checkable slip: the calibration of the simulated
pool's visible drafts (`masrl.pools.drafts`, `DraftStyle`, `VISIBLE`).

Every answer is read by `masrl.pools.slips.check_draft`, the same checker the simulated pool's
tests hold its drafts to, and counted as one of:

- **false step**: an equation between plain numbers that does not hold ("7 + 6 = 12");
- **mismatch**: the final answer differs from the value of the last equation (and no false step);
- **consistent**: equations, all true, and the answer matches the last of them;
- **no equation**: nothing a reader can recompute.

A wrong answer is *visible* when it is a false step or a mismatch.

Two sources:

    python scripts/draft_slips.py model smollm2 --per-level 80 --out runs/smollm2-drafts.jsonl
        # SmolLM2-135M-Instruct answers basic_arithmetic (80 train items per level, easy/medium/hard)
        # with the router's agent prompt, sampled at temperature 0.7, 160 new tokens, seed 0
    python scripts/draft_slips.py champ runs/champ-pool.jsonl
        # the recorded CHAMP pool's solutions (4 real models x 270 competition problems, graded)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from fractions import Fraction

from masrl.pools.slips import check_draft, equations, slip_kind

KINDS = ("false step", "mismatch", "consistent", "no equation")


def first_slip(text: str) -> str | None:
    """How the first false step wrote its number wrong (slips.slip_kind), or None."""
    bad = next((e for e in equations(text) if not e.holds), None)
    return None if bad is None else slip_kind(bad.value, Fraction(bad.stated))


def kind_of(text: str, answer: str | None) -> str:
    report = check_draft(text, answer)
    if report.false_steps:
        return "false step"
    if report.answer_mismatch:
        return "mismatch"
    return "consistent" if report.equations else "no equation"


def slip_table(slips: list[str]) -> str:
    kinds = Counter(slips)
    return "first false step of a wrong answer, by kind: " + ", ".join(
        f"{k} {n} ({n / len(slips):.2f})" for k, n in kinds.most_common())


def table(rows: list[tuple[bool, str]]) -> str:
    """Counts per kind for wrong and right answers, with the visible share."""
    lines = ["| answers | n | " + " | ".join(KINDS) + " | visible |", "|---|---|" + "---|" * (len(KINDS) + 1)]
    for label, correct in (("wrong", False), ("right", True)):
        kinds = Counter(k for c, k in rows if c == correct)
        n = sum(kinds.values())
        if not n:
            continue
        visible = kinds["false step"] + kinds["mismatch"]
        cells = [f"{kinds[k]} ({kinds[k] / n:.2f})" for k in KINDS]
        lines.append(f"| {label} | {n} | " + " | ".join(cells) + f" | {visible / n:.3f} |")
    wrong_visible = Counter(k for c, k in rows if not c and k in ("false step", "mismatch"))
    if wrong_visible:
        share = wrong_visible["false step"] / sum(wrong_visible.values())
        lines.append(f"\nof the visible wrong answers, false steps: {share:.3f}")
    return "\n".join(lines)


def champ_rows(path: Path) -> tuple[list[tuple[bool, str]], list[str]]:
    from masrl.tasks.math import extract_math_answer

    rows, slips = [], []
    for line in path.read_text().splitlines():
        problem = json.loads(line)
        for response in problem["responses"].values():
            text = response["solution"]
            rows.append((bool(response["correct"]), kind_of(text, extract_math_answer(response["summary"] or ""))))
            if not response["correct"] and first_slip(text):
                slips.append(first_slip(text))
    return rows, slips


def model_rows(name: str, per_level: int, threads: int, out: Path | None) -> tuple[list[tuple[bool, str]], list[str]]:
    import torch

    from masrl.agents.policy import encode_chat
    from masrl.generation.hf import generate_batch
    from masrl.generation.sampling import SamplingParams
    from masrl.models import load_model
    from masrl.systems.router.system import AGENT_PROMPT
    from masrl.tasks.math import LEVELS, MathTask, extract_math_answer, math_equal
    from masrl.types import Message

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    lm = load_model(name)
    items = [(level, it) for level in LEVELS
             for it in MathTask("basic_arithmetic", seed=0, difficulty=level).items("train", 0, per_level)]  # fmt: skip
    params = SamplingParams(max_new_tokens=160, temperature=0.7, top_p=1.0)
    rows, records, slips = [], [], []
    for start in range(0, len(items), 24):
        chunk = items[start : start + 24]
        prompts = [encode_chat(lm.tokenizer, (Message("system", AGENT_PROMPT), Message("user", it.question)))
                   for _, it in chunk]  # fmt: skip
        for (level, item), gen in zip(chunk, generate_batch(lm.model, lm.tokenizer, prompts, params)):
            answer = extract_math_answer(gen.text)
            correct = answer is not None and math_equal(item.answer, answer)
            rows.append((correct, kind_of(gen.text, answer)))
            if not correct and first_slip(gen.text):
                slips.append(first_slip(gen.text))
            records.append({"level": level, "question": item.question, "gold": item.answer, "text": gen.text,
                            "answer": answer, "correct": correct, "kind": rows[-1][1]})
        print(f"{len(rows)}/{len(items)} answers", file=sys.stderr, flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in records))
    return rows, slips


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="source", required=True)
    champ = sub.add_parser("champ", help="the recorded CHAMP pool file (python -m masrl.pools.champ FILE)")
    champ.add_argument("pool", type=Path)
    model = sub.add_parser("model", help="a model answering basic_arithmetic")
    model.add_argument("name", help="smollm2, tiny, a directory or hub id")
    model.add_argument("--per-level", type=int, default=80)
    model.add_argument("--threads", type=int, default=2)
    model.add_argument("--out", type=Path, help="write every answer with its kind here (JSONL)")
    args = parser.parse_args(argv)
    if args.source == "champ":
        rows, slips = champ_rows(args.pool)
    else:
        rows, slips = model_rows(args.name, args.per_level, args.threads, args.out)
    print(table(rows))
    print(slip_table(slips))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
