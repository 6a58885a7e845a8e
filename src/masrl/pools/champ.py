"""A RECORDED agent pool from the CHAMP dataset: four real models' answers, graded and priced.

CHAMP (Mao, Kim and Zhou, "CHAMP: A Competition-level Dataset for
Fine-Grained Analyses of LLMs' Mathematical Reasoning Capabilities", ACL
Findings 2024; PyPI ``champ-dataset`` 1.0.0, MIT) holds 270 competition
problems with reference answers and 72 recorded conversations per problem:
4 models x 18 prompt kinds. This pool uses the plain prompt
(``"<model>|0-Shot"``): the model's solution, then its one-sentence summary
of the answer when asked for one.

`build_champ_pool(out_path)` writes one JSONL line per problem::

    {"id": "P_Combinatorics_1", "question": ..., "answer": <reference answer, plain text>,
     "reference": <the same with CHAMP's @@math@@ marks>, "category": ...,
     "responses": {"GPT-3.5": {"text", "solution", "summary", "correct", "rule",
                               "graded_by", "truncated", "tokens_in", "tokens_out", "cost"}, ...}}

Each response is graded on the model's own summary (a solution cut off at the
length limit has none and is wrong): by the rule grader
(`masrl.tasks.champ_grading.grade_summary`), unless a hand verdict
(`hand_grades()`, the package data file ``pools/data/champ_hand_grades.json``)
overrules it or the rule has none; ``graded_by`` says which. Tokens are
`approx_tokens` estimates counted over both recorded calls (call 1 reads system
+ user and writes the solution; call 2 reads all of that plus the summary
request and writes the summary), priced at `MODELS`' per-token prices.

`load_champ_pool(path)` turns the file into `TaskItem`s and one
`RecordedChampAgent` per model, which answers a conversation about problem P
with the model's recorded text for P (the problem is found by its question
text anywhere in the conversation, as `ItemIndex` does). The replayed text is
the recorded solution, `ANSWER_JOINT` ("Final answer: ") and the recorded
summary; every other word is the model's. Replies carry the recorded token
counts and cost. The same problems as a task: `masrl.tasks.champ.ChampTask`.

How the grades were made and what the pool measures: docs/champ-pool.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from masrl.agents.base import approx_tokens
from masrl.pools.simulated import ItemIndex
from masrl.tasks.champ import ANSWER_JOINT, Recorded, read_champ_pool
from masrl.tasks.champ_grading import grade_summary
from masrl.types import AgentError, Message, Price, Reply, TaskItem

PROMPT = "0-Shot"


@dataclass(frozen=True)
class ModelSpec:
    name: str  # CHAMP's name for the model
    version: str  # our assumption of the API model behind it
    price: Price  # dollars per 1k of our (4-character) tokens


# List prices of late 2023, when the conversations were recorded, per 1k of our 4-character tokens;
# the API versions are assumptions (CHAMP does not record them): docs/champ-pool.md.
MODELS = (
    ModelSpec("GPT-3.5", "gpt-3.5-turbo-0613", Price(0.0015, 0.002)),
    ModelSpec("GPT-4", "gpt-4-0613", Price(0.03, 0.06)),
    ModelSpec("GPT-4 Turbo", "gpt-4-1106-preview", Price(0.01, 0.03)),
    ModelSpec("PaLM 2 Medium", "chat-bison (PaLM 2), $0.0005/1k chars", Price(0.002, 0.002)),
)


# ---- the pool file ------------------------------------------------------------


@dataclass(frozen=True)
class PoolSummary:
    path: Path
    problems: int
    accuracy: Mapping[str, float]  # model -> share of problems graded correct
    mean_cost: Mapping[str, float]  # model -> mean dollars per problem
    hand_graded: Mapping[str, int]  # model -> responses whose grade is a hand verdict
    rule_agreement: float  # share of responses where the rule alone gives the final grade

    def table(self) -> str:
        lines = [f"CHAMP recorded pool: {self.problems} problems -> {self.path}"]
        lines.append(f"{'model':<15}{'accuracy':>10}{'mean $':>12}{'hand':>6}")
        for name in self.accuracy:
            lines.append(
                f"{name:<15}{self.accuracy[name]:>10.3f}{self.mean_cost[name]:>12.5f}{self.hand_graded[name]:>6}"
            )
        lines.append(f"rule alone agrees with the final grade on {self.rule_agreement:.1%} of responses")
        return "\n".join(lines)


def build_champ_pool(out_path: str | Path, dataset: Any = None) -> PoolSummary:
    """Extract, grade and price CHAMP's 0-shot conversations into one JSONL pool file."""
    if dataset is None:
        import champ_dataset  # lazy: the optional champ extra; loading its 72 MB file takes a second

        dataset = champ_dataset.load("v0")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    right = {m.name: 0 for m in MODELS}
    cost = {m.name: 0.0 for m in MODELS}
    hand = {m.name: 0 for m in MODELS}
    agree = total = 0
    problems = sorted(dataset.problems.values(), key=lambda p: _natural_key(p.identifier))
    with open(out_path, "w", encoding="utf-8") as f:
        for problem in problems:
            responses = {}
            for spec in MODELS:
                rec = _record(problem, spec)
                responses[spec.name] = rec
                right[spec.name] += rec["correct"]
                cost[spec.name] += rec["cost"]
                hand[spec.name] += rec["graded_by"] == "hand"
                agree += rec["rule"] == rec["correct"]
                total += 1
            line = {
                "id": problem.identifier,
                "question": problem.text,
                "answer": problem.answer,
                "reference": problem.raw_answer,  # the answer with CHAMP's @@math@@ marks, for grading
                "category": problem.category,
                "responses": responses,
            }
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    n = len(problems)
    return PoolSummary(
        path=out_path,
        problems=n,
        accuracy={k: v / n for k, v in right.items()},
        mean_cost={k: v / n for k, v in cost.items()},
        hand_graded=hand,
        rule_agreement=agree / max(1, total),
    )


def _record(problem: Any, spec: ModelSpec) -> dict[str, Any]:
    messages = problem.conversations[f"{spec.name}|{PROMPT}"].messages
    system, user, solution_msg, summary_request, summary_msg = messages
    solution = solution_msg.text or ""
    summary = summary_msg.text  # None when the solution hit the length limit
    rule = grade_summary(problem.raw_answer, problem.text, summary) if summary is not None else False
    verdict = hand_grades().get((problem.identifier, spec.name))
    correct = bool(rule) if verdict is None else verdict
    call1_in = approx_tokens(system.text) + approx_tokens(user.text)
    call2_in = call1_in + approx_tokens(solution) + approx_tokens(summary_request.text)
    tokens_in = call1_in + (call2_in if summary is not None else 0)
    tokens_out = approx_tokens(solution) + approx_tokens(summary or "")
    return {
        "text": solution + (ANSWER_JOINT + summary if summary is not None else ""),
        "solution": solution,
        "summary": summary,
        "correct": correct,
        "rule": rule,  # the rule's verdict: True, False or None (no rule)
        "graded_by": "rule" if verdict is None else "hand",
        "truncated": solution_msg.error == "LENGTH_CURRENT",
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "cost": spec.price.cost(tokens_in, tokens_out),
    }


def _natural_key(identifier: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", identifier))


@functools.cache
def hand_grades() -> dict[tuple[str, str], bool]:
    """(problem id, model) -> correct: the hand verdicts, read once from the package data file."""
    text = resources.files("masrl.pools").joinpath("data/champ_hand_grades.json").read_text(encoding="utf-8")
    return {(g["problem"], g["model"]): bool(g["correct"]) for g in json.loads(text)["grades"]}


# ---- replay -------------------------------------------------------------------------


class RecordedChampAgent:
    """One CHAMP model replayed: the recorded response to whichever problem the conversation asks."""

    def __init__(self, name: str, price: Price, recordings: Mapping[str, Recorded], items: ItemIndex):
        self.name = name
        self.price = price
        self.recordings = dict(recordings)
        self.items = items

    def correct(self, item_id: str) -> bool:
        return self.recordings[item_id].correct

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        item = None
        for m in reversed(tuple(messages)):
            if m.role == "user" and (item := self.items.find(m.content)) is not None:
                break
        if item is None or item.id not in self.recordings:
            raise AgentError(f"{self.name}: no CHAMP problem of this pool is in the conversation")
        rec = self.recordings[item.id]
        return Reply(text=rec.text, tokens_in=rec.tokens_in, tokens_out=rec.tokens_out, cost=rec.cost)


def load_champ_pool(path: str | Path) -> tuple[list[TaskItem], dict[str, RecordedChampAgent]]:
    """The pool file's problems as `TaskItem`s, and its models as agents ordered weak to strong
    (by graded accuracy, ties by name).

    Each item's metadata holds its ``category``, the marked-up ``reference`` answer and
    ``correct``: {model: recorded grade}, the labels a router learns from."""
    tasks, per_model = read_champ_pool(path)
    index = ItemIndex(tasks)
    prices = {m.name: m.price for m in MODELS}
    agents = {n: RecordedChampAgent(n, prices.get(n, Price()), rec, index) for n, rec in per_model.items()}
    return tasks, agents


# ---- command line ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m masrl.pools.champ", description="Build the recorded CHAMP agent pool (JSONL)."
    )
    parser.add_argument("out", help="path of the pool file to write, e.g. data/champ_pool.jsonl")
    args = parser.parse_args(argv)
    summary = build_champ_pool(args.out)
    print(summary.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
