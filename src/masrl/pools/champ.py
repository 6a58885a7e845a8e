"""A RECORDED agent pool from the CHAMP dataset: four real models' answers, graded and priced.

CHAMP (Mao, Kim and Zhou, "CHAMP: A Competition-level Dataset for
Fine-Grained Analyses of LLMs' Mathematical Reasoning Capabilities", ACL
Findings 2024; PyPI ``champ-dataset`` 1.0.0, MIT) holds 270 competition
problems (number theory, polynomials, sequences, inequalities,
combinatorics) with reference answers, and 72 recorded conversations per
problem: 4 models x 18 prompt kinds. This pool uses the plain prompt
(``"<model>|0-Shot"``): system "You are an expert on mathematics.", user
"Solve the following problem. Make sure to show your work before giving the
final answer.\\n\\n<problem>", the model's solution, then a second user turn
asking for a one-sentence summary of the answer and the model's summary.

`build_champ_pool(out_path)` writes one JSONL line per problem::

    {"id": "P_Combinatorics_1", "question": ..., "answer": <reference answer, plain text>,
     "reference": <the same with CHAMP's @@math@@ marks>, "category": ...,
     "responses": {"GPT-3.5": {"text", "solution", "summary", "correct", "rule",
                               "graded_by", "truncated", "tokens_in", "tokens_out", "cost"}, ...}}

`load_champ_pool(path)` turns it into `TaskItem`s and one `RecordedChampAgent`
per model, which answers a conversation about problem P with the model's
recorded text for P (the problem is found by its question text anywhere in
the conversation, as `ItemIndex` does). The replayed ``text`` is the recorded
solution, a blank line, "Final answer: " and the recorded summary; the
"Final answer: " joint is ours, every other word is the model's. Replies
carry the recorded token counts and cost, not those of the replaying prompt.
`ChampTask(path)` serves the same problems as a task whose reward is the
recorded grade of a replayed response.

Grading. CHAMP's reference answers are free-form ("C(10, 5), or equivalently
252", "0 is the only possible value", "No integer solutions", "(x+1)(x-1)...",
"The limit exists and is equal to 3") and so are the models' answers, so
`math_equal` alone cannot grade them. Each response is graded on the
model's own one-sentence summary (a solution cut off at the length limit has
none and is wrong), in two passes:

1. A rule (`grade_summary`), by the kind of the reference answer:
   - number or set of numbers (the values of its ``@@``-marked constant
     expressions such as C(10, 5), "±" expanded, "(i.e., ...)" asides
     dropped): the answer part of the summary is the text after its last
     "is"/"are"/"equals" before any trailing "which ... / when ..." clause
     (else after a final "=" that a value follows). One reference value: the
     first value stated there must equal it (exactly, as fractions; decimals
     and percentages to the precision written) and no other value the
     question lacks may appear; a set: the values stated must be the set,
     up to numbers restated from the question. With no number in the answer
     part, the whole sentence's numbers that the question lacks are used, and
     if every reference value is also in the question the rule abstains. A
     reference 0 also accepts "no"/"none" phrasing;
   - yes / no: a leading "Yes"/"No", else negative if the sentence has a
     negation ("not", "no", "cannot", "never", ...), else positive;
   - "no solutions" / "does not exist" answers: negative phrasing and no
     number the question lacks;
   - expressions in n, m, k, r, a, b, x (and irrational constants): the
     expression in the answer part, LaTeX turned to plain text, parsed with
     sympy and compared with the reference at three integer points;
   - anything else (a relation, an interval of text, "Monotonically
     increasing", "Infinitely many solutions"): no rule.
2. Every one of the 1,080 summaries was then read by hand (by the author of
   this module, against the problem and the reference), and `HAND_GRADES`
   holds the verdict wherever it differs from the rule or the rule has none;
   the pool file marks each grade ``graded_by`` "rule" or "hand".

The hand grade is a final-answer grade, as CHAMP's own accuracy is: a right
answer reached by wrong reasoning counts (CHAMP found many), a right value
stated only for a special case, alongside wrong ones, hedged into "cannot
be determined", or with half of a solution set missing does not; an
equivalent closed form counts. Limits: one reader, no second opinion; the
pairing of multi-variable solutions ((x, y) = (6, 5) vs (5, 6)) and yes/no
answers phrased without a "yes"/"no" are where the rule is weakest, and the
reference answer of P_Sequence_30, (a+3b)/2, looks wrong (the limit of
a_(n+2) = (a_(n+1)+a_n)/2 from a, b is (a+2b)/3); it is kept as CHAMP has it
(no model gave either form).

Measured on the 0-shot conversations (`build_champ_pool`; the rule alone
gives the final grade on 85.2% of responses, abstains on 11.6%, and is
overruled on 3.2%)::

    model           accuracy  mean $/problem  tokens in / out (mean)  hand-graded
    PaLM 2 Medium    0.144      0.00151            438 / 317              33
    GPT-3.5          0.281      0.00166            523 / 439              45
    GPT-4            0.407      0.02998            400 / 300              42
    GPT-4 Turbo      0.559      0.02541            697 / 615              40

CHAMP's abstract reports 58.1% for its best model "in standard settings"
(GPT-4 Turbo here: 55.9%); the paper's per-model table was not available
offline to compare against.

Prices (dollars per 1,000 tokens, in / out), list prices of late 2023 when
the CHAMP conversations were recorded, from the providers' pricing pages as
remembered, not re-checked here (no network); the versions are assumptions,
CHAMP's package does not record them:

    GPT-3.5         gpt-3.5-turbo (4k, 0613)          0.0015 / 0.002
    GPT-4           gpt-4 (8k, 0613)                   0.03   / 0.06
    GPT-4 Turbo     gpt-4-1106-preview                 0.01   / 0.03
    PaLM 2 Medium   PaLM 2 text/chat-bison, Vertex AI  $0.0005 per 1,000 characters
                    in and out = 0.002 / 0.002 per 1,000 of our 4-character tokens

Tokens are `approx_tokens` estimates (4 characters a token; no tokenizer
ships offline), counted over both recorded calls: call 1 reads system + user
and writes the solution; call 2 reads all of that plus the summary request
and writes the summary.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from masrl.agents.base import approx_tokens
from masrl.pools.simulated import ItemIndex
from masrl.tasks.base import TaskFamily
from masrl.types import AgentError, Message, Price, Reply, TaskItem

PROMPT = "0-Shot"
ANSWER_JOINT = "\n\nFinal answer: "


@dataclass(frozen=True)
class ModelSpec:
    name: str  # CHAMP's name for the model
    version: str  # our assumption of the API model behind it
    price: Price  # dollars per 1k of our (4-character) tokens


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
        import champ_dataset  # imported here: loading the 72 MB file takes about a second

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
    verdict = HAND_GRADES.get((problem.identifier, spec.name))
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


# ---- replay -------------------------------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    text: str
    correct: bool
    tokens_in: int
    tokens_out: int
    cost: float


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
    tasks: list[TaskItem] = []
    per_model: dict[str, dict[str, Recorded]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            grades = {name: bool(r["correct"]) for name, r in row["responses"].items()}
            meta = {"source": "champ", "category": row["category"], "reference": row["reference"], "correct": grades}
            tasks.append(TaskItem(row["id"], row["question"], row["answer"], meta))
            for name, r in row["responses"].items():
                per_model.setdefault(name, {})[row["id"]] = Recorded(
                    r["text"], bool(r["correct"]), int(r["tokens_in"]), int(r["tokens_out"]), float(r["cost"])
                )
    index = ItemIndex(tasks)
    prices = {m.name: m.price for m in MODELS}
    order = sorted(per_model, key=lambda n: (sum(r.correct for r in per_model[n].values()), n))
    agents = {n: RecordedChampAgent(n, prices.get(n, Price()), per_model[n], index) for n in order}
    return tasks, agents


class ChampTask:
    """CHAMP's problems as a task that owns its reward (`masrl.tasks.base.Task`).

    A response that ends in one of the recorded summaries (what this pool's
    agents reply) scores that summary's recorded grade; any other response is
    graded by the rule on its final line (0 where the rule has no verdict).
    A question goes to eval when `held_out` says so; train cycles forever.
    """

    name = "champ"

    def __init__(self, path: str | Path, eval_fraction: float = 0.3):
        from masrl.tasks.base import held_out

        self.path = Path(path)
        tasks, agents = load_champ_pool(path)
        self._split = {
            "train": [t for t in tasks if not held_out(t.question, eval_fraction)],
            "eval": [t for t in tasks if held_out(t.question, eval_fraction)],
        }
        self._recorded = {
            t.id: {_final_line(a.recordings[t.id].text): a.recordings[t.id].correct for a in agents.values()}
            for t in tasks
        }

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        from masrl.tasks.base import check_split

        check_split(split)
        pool = self._split[split]
        if split == "eval":
            return pool[start : start + count]
        return [pool[i % len(pool)] for i in range(start, start + count)]

    def extract_answer(self, text: str) -> str | None:
        return _final_line(text) or None

    def score(self, item: TaskItem, answer: str) -> float:
        recorded = self._recorded.get(item.id, {})
        if answer in recorded:
            return 1.0 if recorded[answer] else 0.0
        verdict = grade_summary(item.metadata.get("reference", item.answer), item.question, answer)
        return 1.0 if verdict else 0.0


def _final_line(text: str) -> str:
    """The summary after ANSWER_JOINT in a recorded response, else the last non-empty line."""
    if ANSWER_JOINT in text:
        return text.rsplit(ANSWER_JOINT, 1)[1].strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ---- grading -----------------------------------------------------------------------

_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifty": 50, "hundred": 100,
}  # fmt: skip
_NEGATION = re.compile(
    r"\b(no|not|none|cannot|can't|never|impossible|neither|nor|doesn't|don't|isn't|aren't|won't|"
    r"does not|do not|is not|are not|cannot be|no such|nonexistent)\b",
    re.IGNORECASE,
)
_QUALIFIER = re.compile(
    r",?\s+(which|achieved|attained|occurs|occurring|obtained|when|whenever|where|if|since|because|"
    r"as|for example|e\.g\.|with equality|regardless|and it|and this|and that|at x|at \w\s*=)\b",
    re.IGNORECASE,
)
_NEGATED_VALUE = re.compile(
    r"\b(?:not|never|isn't|aren't|cannot be|can't be|is not|are not)\s+(?:equal\s+to\s+|exactly\s+)?[-±]?\$?\d",
    re.IGNORECASE,
)
_HEDGE = re.compile(r"\d\s*,?\s+(?:or|and/or)\s+(?:maybe\s+|possibly\s+|perhaps\s+)?[-±]?\$?\d", re.IGNORECASE)
_CUE = re.compile(r"\b(?:is|are|was|were|equals|becomes)\b", re.IGNORECASE)
_VARIABLES = "nmkrabxyz"


def grade_summary(reference: str, question: str, summary: str) -> bool | None:
    """The rule's verdict on a one-sentence summary: True, False, or None where no rule applies.

    `reference` is CHAMP's raw answer, with its math marked ``@@...@@``."""
    kind, values = reference_kind(reference)
    text = normalize(summary)
    if kind == "yesno":
        return _polarity(text) == values
    if kind == "none":
        return _polarity(text) is False and not (_numbers(text) - _numbers(normalize(question)))
    if kind == "numbers":
        if _NEGATED_VALUE.search(text) and not any(_same(v, 0) for v in values):
            return False  # "it is not 7" names the answer only to deny it
        if len(values) == 1 and _HEDGE.search(text):
            return False  # "3 or 7" for one answer: a hedge, even when 3 is a number of the question
        verdict = _grade_numbers(values, text, normalize(question))
        value = next(iter(values))
        if verdict is False and len(values) == 1 and isinstance(value, Fraction):  # stated as "2^997"
            import sympy

            return _grade_expression([sympy.Rational(value.numerator, value.denominator)], text) or False
        return verdict
    if kind == "expr":
        return _grade_expression(values, text)
    return None


@functools.lru_cache(maxsize=1024)
def reference_kind(reference: str) -> tuple[str, Any]:
    """("yesno", True|False), ("none", None), ("numbers", set of Fraction|float),
    ("expr", list of sympy expressions), or ("text", None)."""
    raw = reference.strip().replace("\u2212", "-")
    raw = REFERENCE_REWRITES.get(raw.replace("@@", ""), raw)
    plain = raw.replace("@@", "")
    if not plain:
        return "text", None
    if re.fullmatch(r"(Yes|No)\.?", plain):
        return "yesno", plain.startswith("Yes")
    lowered = plain.lower()
    if re.search(r"^no (integer|possible|positive integer|such)|does not exist|not possible|no prime", lowered):
        return "none", None
    core = re.sub(r"\(i\.e\.,[^)]*\)|\([^)]*(?:no |none)[^)]*\)|, or approximately .*$", "", raw)
    alternatives = [a.strip() for a in re.split(r", or equivalently|, or an equivalent form such as", core)]
    exprs = []
    for alt in alternatives:
        body = alt.replace("@@", "")
        parsed = _parse_plain(body) if "@@" in alt or re.fullmatch(r"[-\d\s./]+", body) else None
        if parsed is not None:
            exprs.append(parsed)
    if exprs and all(not e.free_symbols for e in exprs):
        rational = _as_fraction(exprs[-1])
        return ("numbers", {rational}) if rational is not None else ("expr", exprs)
    if exprs:
        return "expr", exprs
    values = _numbers(normalize(core.replace("@@", "")))
    if values and not re.search(r"[a-wyz]\s*[-+*/^(]|[-+*/^]\s*[a-wyz]", core.replace("@@", "")):
        return "numbers", values
    return "text", None


# Reference answers (without @@) the generic parse misreads -> what to grade against ("": no rule).
REFERENCE_REWRITES: dict[str, str] = {
    "n times": "@@n@@",
    "The limit exists and is equal to (a+3b)/2": "@@(a+3b)/2@@",
    "The limit exists and is equal to (1+sqrt(4a+1))/2": "@@(1+sqrt(4a+1))/2@@",
    "The only possible value for the limit is sqrt(a)": "@@sqrt(a)@@",
    "At most 0 integer-valued zeros (i.e., no integer zeros)": "0",
    "At most 0 integer-valued roots (i.e., no integer roots)": "0",
    "Always greater than 20": "",
    "Infinitely many solutions": "",
    "Monotonically increasing": "",
}


def normalize(text: str) -> str:
    """LaTeX and unicode math written as plain text: \\frac{a}{b} -> (a)/(b), √ -> sqrt, ..."""
    t = text.replace("\u2212", "-").replace("\\left", "").replace("\\right", "")
    t = re.sub(r"\\[pb]?mod\b", " mod ", t)
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cdot", "*"), ("\\times", "*"), ("×", "*"),
                 ("·", "*"), ("\\leq", "<="), ("\\geq", ">="), ("≤", "<="), ("≥", ">="), ("\\le ", "<= "),
                 ("\\ge ", ">= "), ("\\infty", "oo"), ("∞", "oo"), ("\\pm", "±"), ("\\ldots", "..."),
                 ("\\cdots", "..."), ("\\dots", "..."), ("\\{", "{"), ("\\}", "}"), ("\\,", " "), ("\\!", ""),
                 ("\\;", " "), ("²", "^2"),
                 ("³", "^3"), ("\\%", "%"), ("\\$", "")):  # fmt: skip
        t = t.replace(a, b)
    t = re.sub(r"\\(?:text|mathrm|boxed|mathbf)\{([^{}]*)\}", r"\1", t)
    t = t.replace("\\equiv", "=").replace("≡", "=")
    for _ in range(4):  # nested fractions, innermost first
        t = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", t)
        t = re.sub(r"\\binom\{([^{}]*)\}\{([^{}]*)\}", r"C(\1, \2)", t)
        t = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", t)
        t = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", t)
    t = re.sub(r"√\(", "sqrt(", t)
    t = re.sub(r"√\s*([\w.]+)", r"sqrt(\1)", t)
    t = re.sub(r"∛\s*([\w.]+)", r"(\1)^(1/3)", t)
    t = re.sub(r"\\\(|\\\)|\\\[|\\\]|\$", " ", t)
    t = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", t)  # 2,001,000 -> 2001000
    t = re.sub(r"\((-?\d+)\)/\((\d+)\)", r"\1/\2", t)  # (3)/(2) -> 3/2
    return re.sub(r"[ \t]+", " ", t).strip()


_NUMBER = re.compile(r"(?:±\s*)?-?\d+(?:\.\d+)?(?:\s*/\s*\d+(?![\d.]))?%?")


def _ordered_numbers(text: str, zero_words: bool = False) -> list:
    """Stand-alone numeric values in `text` in reading order (not subscripts, exponents,
    coefficients of a letter, denominators or subtrahends); number words count."""
    found: list[tuple[int, Any]] = []
    for m in _NUMBER.finditer(text):
        token, start, end = m.group(0), m.start(), m.end()
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if token.startswith("-") and before not in " (=,[{:":
            token, start = token[1:], start + 1
            before = "-"
        if before.isalnum() or before in "_^.'" or after.isalpha() or after in "^_(!":
            continue
        if before == "/" or (before == "-" and start >= 2 and text[start - 2].isalnum()):
            continue
        if re.match(r"\)?\s*(?:[*/^(]|[-+]\s*[A-Za-z(])", text[end:]):
            continue  # a coefficient or term of an expression ("3*(abc)^(1/3)", "3-x^2"), not a value
        found += [(start, v) for v in sorted(_values(token), key=str)]
    for word, value in _WORDS.items():
        found += [(m.start(), Fraction(value)) for m in re.finditer(rf"\b{word}\b", text, re.IGNORECASE)]
    if zero_words:
        found += [(m.start(), Fraction(0)) for m in re.finditer(r"\b(no|none|zero)\b", text, re.IGNORECASE)]
    return [v for _, v in sorted(found, key=lambda pv: pv[0])]


def _numbers(text: str, zero_words: bool = False) -> set:
    return set(_ordered_numbers(text, zero_words))


def _values(token: str) -> set:
    token = token.replace(" ", "")
    signs = (1, -1) if token.startswith("±") else (1,)
    token = token.lstrip("±")
    percent = token.endswith("%")
    token = token.rstrip("%")
    try:
        value = Fraction(token)
    except (ValueError, ZeroDivisionError):
        return set()
    if percent:
        value /= 100
    if "." in token:  # a decimal stands for the interval it rounds from
        places = len(token.split(".")[1].split("/")[0]) + (2 if percent else 0)
        return {_Approx(float(s * value), 0.5 * 10.0**-places) for s in signs}
    return {s * value for s in signs}


@dataclass(frozen=True)
class _Approx:
    value: float
    tolerance: float

    def matches(self, other: Any) -> bool:
        try:
            return abs(float(other) - self.value) <= self.tolerance + 1e-12
        except (TypeError, ValueError):
            return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, _Approx):
        return a.matches(b.value if isinstance(b, _Approx) else b)
    if isinstance(b, _Approx):
        return b.matches(a)
    try:
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError):
        return False


def answer_parts(text: str) -> list[tuple[str, str]]:
    """Where a summary states its answer, most specific first, as (text before, answer part):
    after its last "is" / "are" before any trailing "which ... / when ..." clause, then after
    its very last "is"; with no such verb, after a final "=" that a value follows."""
    parts = []
    cues = list(_CUE.finditer(text))
    if cues:
        clause = _QUALIFIER.search(text, cues[0].end())
        head = text[: clause.start()] if clause else text
        last = list(_CUE.finditer(head))[-1]
        parts.append((text[: last.start()], head[last.end() :]))
        parts.append((text[: cues[-1].start()], _QUALIFIER.split(text[cues[-1].end() :], maxsplit=1)[0]))
    elif equals := list(re.finditer(r"(?<![<>!=])=(?!=)\s*(?=[-\d(\\√])", text)):
        parts.append((text[: equals[-1].start()], _QUALIFIER.split(text[equals[-1].end() :], maxsplit=1)[0]))
    return [(before, part.strip(" .;")) for before, part in parts if part.strip(" .;")]


def _grade_numbers(reference: set, text: str, question: str) -> bool | None:
    zero = any(_same(v, 0) for v in reference)
    asked = _numbers(question)  # values the question states
    # every number written anywhere in the question, in any role: a summary that repeats one
    # is restating the problem, not answering it
    restated = asked | {Fraction(m) for m in re.findall(r"\d+", question)}
    restated |= {-v for v in restated if isinstance(v, Fraction)}

    def is_restated(v: Any) -> bool:
        return any(_same(v, q) for q in restated)

    for before, part in answer_parts(text):
        stated = _ordered_numbers(part, zero_words=zero and _polarity(part) is False)
        if not stated:
            continue
        told = [v for v in _ordered_numbers(before) if not any(_same(v, q) for q in asked)]
        if told and any(_same(stated[0], q) for q in asked):
            stated = told  # "At least 25 questions are needed for the 50 numbers": the answer came first
        if len(reference) == 1:  # the first value stated, and no other value the question lacks
            value = next(iter(reference))
            others = [v for v in stated[1:] if not _same(v, value) and not is_restated(v)]
            return _same(stated[0], value) and not others
        return all(any(_same(r, s) for s in stated) for r in reference) and all(
            any(_same(s, r) for r in reference) or is_restated(s) for s in stated
        )
    # No number where the answer should be ("At most two of the three ... can be true"):
    # the numbers of the whole sentence that the question does not already hold.
    if all(any(_same(r, q) for q in asked) for r in reference):
        return None  # a restated number and a stated answer look alike
    stated = _numbers(text, zero_words=zero and _polarity(text) is False)
    new = {v for v in stated if not is_restated(v)}
    has_all = all(any(_same(r, s) for s in stated) for r in reference)
    return has_all and all(any(_same(v, r) for r in reference) for v in new)


def _polarity(text: str) -> bool | None:
    head = text.strip().lower()
    if re.match(r"yes\b", head):
        return True
    if re.match(r"no\b", head):
        return False
    return not _NEGATION.search(text)


# ---- expressions ----------------------------------------------------------------------


def _parse_plain(text: str) -> Any:
    """A sympy expression from plain math text ("2^(n-1)", "C(n, 4)", "(2n)!/(2^n*n!)"), else None."""
    import sympy
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        standard_transformations,
    )

    t = text.strip().rstrip(".").replace("±", "")
    t = re.sub(r"sum_\(.*", "", t) if "sum_(" in t else t
    if not t or re.search(r"[=<>]|\.\.\.|sum|lim", t):
        return None
    names = {v: sympy.Symbol(v, positive=True, integer=v in "nmkr") for v in _VARIABLES}
    names.update(C=sympy.binomial, binom=sympy.binomial, floor=sympy.floor, sqrt=sympy.sqrt, choose=sympy.binomial)
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sympy deprecation chatter on odd input
        return _parse_checked(t, names, transformations)


def _parse_checked(t: str, names: dict, transformations: tuple) -> Any:
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    try:
        raw = parse_expr(t, local_dict=names, transformations=transformations, evaluate=False)
        # (1/2^1958 - ...)^1959 would take sympy minutes to expand exactly: not an answer we grade.
        if any(
            isinstance(node, sympy.Pow) and node.exp.is_Number and abs(node.exp) > 200 and not node.base.is_Atom
            for node in sympy.preorder_traversal(raw)
        ):
            return None
        expr = parse_expr(t, local_dict=names, transformations=transformations, evaluate=True)
    except Exception:  # noqa: BLE001 - any parse failure means "no expression here"
        return None
    if not isinstance(expr, sympy.Basic) or expr.free_symbols - set(names.values()):
        return None
    return expr


def _as_fraction(expr: Any) -> Fraction | None:
    try:
        if expr.is_rational:
            return Fraction(int(expr.p), int(expr.q))
    except AttributeError:
        pass
    return None


_POINTS = (
    {"n": 7, "m": 2, "k": 3, "r": 3, "a": 2, "b": 5, "x": 3, "y": 2, "z": 4},
    {"n": 8, "m": 3, "k": 2, "r": 2, "a": 3, "b": 7, "x": 5, "y": 3, "z": 2},
    {"n": 10, "m": 4, "k": 5, "r": 4, "a": 5, "b": 2, "x": 2, "y": 7, "z": 3},
)


def _equal_expressions(a: Any, b: Any) -> bool:
    """Equal at every test point: exactly where both sides are rational, else to 1e-9."""
    import sympy

    for point in _POINTS:
        subs = {s: point[s.name] for s in a.free_symbols | b.free_symbols if s.name in point}
        try:
            va, vb = sympy.nsimplify(a.subs(subs)), sympy.nsimplify(b.subs(subs))
            if va.is_Rational and vb.is_Rational:
                if va != vb:
                    return False
                continue
            ca, cb = complex(va.evalf(30)), complex(vb.evalf(30))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            return False
        if not (math.isfinite(abs(ca)) and math.isfinite(abs(cb))):
            return False
        if abs(ca - cb) > 1e-9 * max(1.0, abs(ca), abs(cb)):
            return False
    return True


def _expression_in(part: str) -> Any:
    """The expression an answer part states, past leading prose ("given by the formula I =")."""
    if "=" in part:
        part = part[part.rfind("=") + 1 :]
    words = part.split()
    while words and re.fullmatch(r"[A-Za-z]{2,}[,:]?", words[0]) and words[0].lower() not in {"sqrt", "floor"}:
        words = words[1:]
    span = re.sub(r"(\d|\))\s*!", r"\1!", " ".join(words))
    return _parse_plain(span)


def _grade_expression(reference: list[Any], text: str) -> bool | None:
    for _, part in answer_parts(text):
        expr = _expression_in(part)
        if expr is not None:
            return any(_equal_expressions(expr, r) for r in reference)
    return None


# ---- hand verdicts -----------------------------------------------------------------------

# (problem id, model) -> correct, for responses where a reading of the summary (and, where
# the summary is ambiguous, the solution) disagrees with the rule or the rule has no verdict.
_G35, _G4, _G4T, _PALM = "GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"
HAND_GRADES: dict[tuple[str, str], bool] = {
    # Combinatorics
    ("P_Combinatorics_3", _G4): False,  # (n/2)! for even n: misses the 2^(n/2) factor
    ("P_Combinatorics_3", _G4T): False,
    ("P_Combinatorics_6", _PALM): False,  # an unsummed series ending in a stray "+ 1"
    ("P_Combinatorics_9", _G35): False,
    ("P_Combinatorics_9", _G4T): False,  # 2^(n-1) H_n
    ("P_Combinatorics_10", _G4): False,  # "the partition function p(n)"
    ("P_Combinatorics_10", _PALM): False,  # "the Bell number"
    ("P_Combinatorics_12", _G35): False,
    ("P_Combinatorics_12", _G4): False,  # Catalan number
    ("P_Combinatorics_13", _G4): False,
    ("P_Combinatorics_16", _G35): False,
    ("P_Combinatorics_16", _G4): False,  # only a recurrence
    ("P_Combinatorics_19", _G35): False,
    ("P_Combinatorics_19", _G4): False,
    ("P_Combinatorics_22", _G35): False,  # restates the definition of the mean, no closed form
    ("P_Combinatorics_25", _G4): True,  # "n factorial (n!)"
    ("P_Combinatorics_33", _G4): True,  # "((n(n+1)/2)^2": one stray parenthesis
    ("P_Combinatorics_34", _G4T): False,  # a sum of partition functions
    # Inequality
    ("P_Inequality_6", _G4T): True,  # "A ... is less than 0.1": answers No
    ("P_Inequality_8", _G35): False,  # "0 when n = 1" only
    ("P_Inequality_9", _G35): False,
    ("P_Inequality_9", _G4): True,
    ("P_Inequality_9", _G4T): False,
    ("P_Inequality_9", _PALM): False,
    ("P_Inequality_12", _G35): False,
    ("P_Inequality_12", _G4): False,
    ("P_Inequality_12", _G4T): False,  # sum (n+1-k)/k^2, the reversed (largest) pairing
    ("P_Inequality_12", _PALM): False,
    ("P_Inequality_17", _PALM): False,
    ("P_Inequality_18", _G35): False,
    ("P_Inequality_21", _G35): False,
    ("P_Inequality_21", _PALM): False,
    ("P_Inequality_25", _G4T): False,  # "one must implement a computational approach"
    ("P_Inequality_31", _G4): False,
    ("P_Inequality_32", _G35): False,
    ("P_Inequality_32", _G4): True,
    ("P_Inequality_32", _G4T): True,
    ("P_Inequality_32", _PALM): False,  # compares x(n) with y(n), and wrongly
    ("P_Inequality_34", _G35): False,
    ("P_Inequality_34", _G4): False,
    ("P_Inequality_34", _PALM): False,
    ("P_Inequality_44", _G35): False,  # "at least one", not exactly one
    ("P_Inequality_44", _G4T): False,  # "at most two"
    ("P_Inequality_48", _G35): True,  # "all values of n in {1, ..., 100}"
    ("P_Inequality_48", _G4T): True,
    ("P_Inequality_48", _PALM): True,
    ("P_Inequality_50", _G35): False,  # "requires numerical methods"
    ("P_Inequality_23", _G35): False,
    ("P_Inequality_38", _PALM): False,
    # Number theory
    ("P_Number-Theory_1", _G4T): False,  # "no trivial solutions ... would require more advanced techniques"
    ("P_Number-Theory_4", _G4): False,  # adds (5, 6), which is no solution
    ("P_Number-Theory_8", _G4T): False,  # "no simple general solution": no answer
    ("P_Number-Theory_14", _G35): False,  # "likely ... a prime number, but we cannot definitively determine"
    ("P_Number-Theory_14", _G4T): False,  # "cannot definitively determine"
    ("P_Number-Theory_20", _PALM): False,  # "there are no such integers": not "0"
    ("P_Number-Theory_21", _G4T): False,  # "may require advanced techniques": no answer
    ("P_Number-Theory_28", _G35): False,
    ("P_Number-Theory_28", _G4): False,  # "approximately n times, slightly less if ..."
    ("P_Number-Theory_28", _G4T): False,
    ("P_Number-Theory_28", _PALM): False,
    ("P_Number-Theory_42", _G4): False,
    ("P_Number-Theory_43", _PALM): True,  # "infinitely many composite numbers": answers No
    ("P_Number-Theory_47", _G4T): True,  # "no integer values of m ... because ... factor of 37"
    ("P_Number-Theory_48", _G35): False,  # "not possible to determine"
    ("P_Number-Theory_59", _G35): False,
    ("P_Number-Theory_59", _G4): False,
    ("P_Number-Theory_59", _G4T): False,
    ("P_Number-Theory_59", _PALM): False,
    ("P_Number-Theory_63", _G4): False,  # "can't definitively say"
    ("P_Number-Theory_63", _G4T): False,  # "no conclusive evidence ... further analysis is required"
    ("P_Number-Theory_66", _PALM): False,  # "all the integers from 0 to (n-2)!"
    ("P_Number-Theory_67", _G35): False,  # 49
    ("P_Number-Theory_67", _PALM): False,  # 6
    ("P_Number-Theory_75", _G4T): False,  # "no straightforward solution ... would require"
    # Polynomial
    ("P_Polynomial_2", _G35): False,
    ("P_Polynomial_2", _G4): False,  # two of the four roots
    ("P_Polynomial_2", _G4T): False,
    ("P_Polynomial_2", _PALM): False,
    ("P_Polynomial_3", _G35): False,  # "at most n"
    ("P_Polynomial_3", _PALM): False,  # "at most one"
    ("P_Polynomial_5", _G35): False,  # only (8, 2); misses (2, 8)
    ("P_Polynomial_5", _G4): False,  # only x = 8, y = 2
    ("P_Polynomial_6", _G35): False,
    ("P_Polynomial_6", _G4): False,  # only (2, 1); misses (1, 2)
    ("P_Polynomial_6", _G4T): False,
    ("P_Polynomial_6", _PALM): False,
    ("P_Polynomial_14", _G35): False,  # "cannot be factorized"
    ("P_Polynomial_14", _G4): False,
    ("P_Polynomial_14", _G4T): False,
    ("P_Polynomial_14", _PALM): False,  # a right form with sqrt(1) "or" a wrong one
    ("P_Polynomial_15", _G35): False,
    ("P_Polynomial_15", _G4): False,  # only f = 1 where x != 0
    ("P_Polynomial_15", _G4T): False,  # misses f = 0
    ("P_Polynomial_15", _PALM): False,
    ("P_Polynomial_16", _G4): False,
    ("P_Polynomial_16", _G4T): False,  # floor((k-2)/3)
    ("P_Polynomial_16", _PALM): False,
    ("P_Polynomial_18", _G35): False,
    ("P_Polynomial_18", _G4): False,
    ("P_Polynomial_18", _G4T): False,
    ("P_Polynomial_18", _PALM): False,
    ("P_Polynomial_19", _G35): True,  # "can be factorized as (x + y + z)(x^2 + y^2 + z^2 - xy - xz - yz)"
    ("P_Polynomial_19", _G4T): False,  # calls it irreducible
    ("P_Polynomial_20", _G35): False,
    ("P_Polynomial_20", _G4): True,  # f(x) = 0
    ("P_Polynomial_20", _G4T): True,
    ("P_Polynomial_20", _PALM): False,
    ("P_Polynomial_28", _G35): False,
    ("P_Polynomial_28", _G4): False,  # (n+1)/(n+2)
    ("P_Polynomial_28", _G4T): False,
    ("P_Polynomial_28", _PALM): False,
    ("P_Polynomial_29", _G35): False,
    ("P_Polynomial_29", _G4): False,  # an incomplete factorization
    ("P_Polynomial_29", _G4T): False,
    ("P_Polynomial_31", _G35): False,  # b/a + xy: not in a and b alone
    ("P_Polynomial_37", _G4): False,  # adds x = 1, which is no solution
    ("P_Polynomial_43", _PALM): False,  # "Yes ... if and only if a_0 = a_2 = ... = 0"
    ("P_Polynomial_46", _G35): False,
    ("P_Polynomial_46", _G4): False,
    ("P_Polynomial_46", _G4T): False,
    ("P_Polynomial_46", _PALM): False,
    # Sequence
    ("P_Sequence_2", _G35): False,
    ("P_Sequence_2", _G4): False,
    ("P_Sequence_2", _G4T): False,
    ("P_Sequence_2", _PALM): True,  # "for all x_1, y_1, z_1, w_200 >= 20": the "always greater" option
    ("P_Sequence_3", _G4T): True,  # "can be extended indefinitely ... the denominator never equals zero"
    ("P_Sequence_4", _G4): False,  # "0 and any positive integer less than 100"
    ("P_Sequence_9", _G35): True,  # "will always be able to return all lamps to ON": none fail
    ("P_Sequence_12", _G4): False,  # "converges to a finite limit ... cannot be determined"
    ("P_Sequence_13", _G4): True,  # "No, it is not possible to have a_100 < 2^99"
    ("P_Sequence_16", _G35): False,  # "±sqrt(a)", although x_0 > 0
    ("P_Sequence_17", _G35): False,
    ("P_Sequence_17", _G4): False,
    ("P_Sequence_17", _G4T): False,
    ("P_Sequence_17", _PALM): False,
    ("P_Sequence_26", _G4): False,  # "does not exist"
    ("P_Sequence_27", _G35): False,  # 10
    ("P_Sequence_27", _G4): True,  # "all of them"
    ("P_Sequence_27", _G4T): True,
    ("P_Sequence_28", _PALM): False,  # "L_u - L_v < 0"
    ("P_Sequence_36", _G35): True,
    ("P_Sequence_36", _G4): False,
    ("P_Sequence_36", _G4T): True,
    ("P_Sequence_36", _PALM): False,
    ("P_Sequence_37", _G35): True,  # "does not have x_n = 0 for any n": answers Yes
    ("P_Sequence_37", _G4T): True,  # "satisfies x_n != 0 for all n"
    ("P_Sequence_39", _G35): False,  # "is to be determined"
    ("P_Sequence_39", _G4): False,  # "only the first 5"
    ("P_Sequence_39", _G4T): True,  # "All of the first 100"
    ("P_Sequence_39", _PALM): False,  # "no integers"
    ("P_Sequence_41", _G4): True,  # "L = [1 + sqrt(1 + 4a)] / 2"
    ("P_Sequence_43", _G35): False,
    ("P_Sequence_43", _G4): False,
    ("P_Sequence_43", _G4T): False,
    ("P_Sequence_43", _PALM): False,
    ("P_Sequence_44", _G35): False,  # infinitely many
    ("P_Sequence_44", _G4): False,
    ("P_Sequence_44", _G4T): False,
    ("P_Sequence_45", _G35): False,  # "approximately 3.16, which is less than 30"
    ("P_Sequence_46", _G4T): True,  # "not possible to partition ... into 12 geometric progressions"
}


def _champ_task(spec) -> ChampTask:
    return ChampTask(spec.path)


# The task family `task.kind: champ` (masrl.tasks.BUILTIN): the pool file's problems.
CHAMP = TaskFamily(_champ_task, "CHAMP's competition problems from a built pool file (task.path)", needs_path=True)


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
