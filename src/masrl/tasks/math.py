"""Math problems from reasoning-gym generators, and the grading every math task shares.

`MathTask` draws problems from a reasoning-gym procedural dataset. Each split
reads its own stream of generator seeds (derived from the task seed), in
chunks of `chunk_size` problems that are generated on first use and cached.
A problem goes to the split that `held_out(question)` assigns it (base.py), so
the eval split is a fixed share of the question space that training never
sees; item i of a split is the i-th generated problem that belongs there.

Grading is two functions used by every math-like task:
- `extract_math_answer(text)`: the last `<answer>...</answer>`, else the last
  `\\boxed{...}`, else what follows a final "Answer:" / "answer is", else the
  last number in the text;
- `math_equal(gold, answer)`: exact string, then exact rational equality
  ("7" == "7.0" == "14/2", "1,000" == "1000", "−4" == "-4"), then math_verify's
  symbolic comparison (Kydlíček et al., huggingface/Math-Verify), which never
  raises into the caller. Against a gold that is not a plain number it runs in a
  child process with a deadline (masrl.tasks.symbolic), since sympy can compute
  for ever on what a reply writes.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from masrl.config import ConfigError
from masrl.tasks.base import SPLITS, check_split, held_out
from masrl.tasks.symbolic import PARSE_TIMEOUT_S, WORKER, compare
from masrl.types import TaskItem

LEVELS = ("easy", "medium", "hard")

# Difficulty level -> reasoning-gym config overrides. "hard" is always the
# dataset's own defaults. A dataset missing here uses its defaults at every
# level; pass `config` to MathTask to shape it.
DIFFICULTY: dict[str, dict[str, dict[str, Any]]] = {
    "basic_arithmetic": {
        # The parenthesis-free generator evaluates strictly left to right, which
        # is only right for + and -: reasoning-gym 0.1.25 labels "814 + 707 * 965"
        # as 1467765. So only easy (no * or /) may turn parentheses off.
        "easy": dict(
            min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=("+", "-"), allow_parentheses=False
        ),
        "medium": dict(
            min_terms=2, max_terms=3, min_digits=1, max_digits=2, operators=("+", "-", "*"), allow_negation=False
        ),
        "hard": {},  # 2-6 terms, 1-4 digits, + - * /, parentheses, negated groups
    },
    "chain_sum": {  # chain_sum only ever uses + and -
        "easy": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
        "medium": dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
        "hard": {},  # 2-6 terms, 1-4 digits
    },
    # reasoning-gym 0.1.25 rejects any gsm_symbolic difficulty but 1.0: one level.
    "gsm_symbolic": {"easy": {}, "medium": {}, "hard": {}},
}

# A question space of a handful of questions may hash wholly into one split,
# leaving the other nothing to draw: give up after this many empty chunks.
MAX_EMPTY_CHUNKS = 20
# Replies longer than this are not compared: no answer to a task is this long.
MAX_VERIFY_CHARS = 512
# Fraction("1e99999999") builds 10^99999999 exactly: minutes of CPU holding the GIL, so one sampled
# answer would stall every episode of the process. No task's value is near 10^1000, so text with a
# decimal exponent beyond this is not read as a number (`fraction`).
MAX_DECIMAL_EXPONENT = 1000
_DECIMAL_EXPONENT = re.compile(r"[eE]\s*[-+]?([\d_]+)")


class MathTask:
    """Problems from one reasoning-gym dataset at one difficulty level."""

    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        seed: int = 0,
        difficulty: str = "medium",
        config: Mapping[str, Any] | None = None,
        eval_fraction: float = 0.1,
        chunk_size: int = 500,
    ):
        if difficulty not in LEVELS:
            raise ValueError(f"difficulty must be one of {LEVELS}, got {difficulty!r}")
        if not 0.0 < eval_fraction < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        config = dict(config or {})
        if {"seed", "size"} & config.keys():
            raise ValueError("MathTask sets reasoning-gym's seed and size itself; leave them out of config")
        self.name = dataset
        self.dataset = dataset
        self.seed = seed
        self.difficulty = difficulty
        self.overrides = {**DIFFICULTY.get(dataset, {}).get(difficulty, {}), **config}
        self.eval_fraction = eval_fraction
        self.chunk_size = chunk_size
        self._items: dict[str, list[TaskItem]] = {split: [] for split in SPLITS}
        self._chunks_read = {split: 0 for split in SPLITS}
        self._lock = threading.Lock()  # items() may be called from several rollout workers
        check_dataset(dataset)
        self._generator(seed=0, size=1)  # a bad config fails here, not mid-run

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        with self._lock:
            while len(self._items[split]) < start + count:
                self._read_chunk(split)
            return self._items[split][start : start + count]

    def score(self, item: TaskItem, answer: str) -> float:
        return 1.0 if math_equal(item.answer, answer) else 0.0

    def extract_answer(self, text: str) -> str | None:
        return extract_math_answer(text)

    def known_items(self) -> list[TaskItem]:
        """Every item generated so far, both splits (simulated agents look questions up here)."""
        with self._lock:
            return [item for split in SPLITS for item in self._items[split]]

    def known_count(self) -> int:
        """len(known_items()), without building the list (checked on every lookup miss)."""
        with self._lock:
            return sum(len(self._items[split]) for split in SPLITS)

    def _read_chunk(self, split: str) -> None:
        """Generate chunks of this split's seed stream until one adds an item."""
        out = self._items[split]
        for _ in range(MAX_EMPTY_CHUNKS):
            chunk = self._chunks_read[split]
            self._chunks_read[split] += 1
            # reasoning-gym seeds item j with Random(seed + j), so consecutive
            # chunks take consecutive seed ranges: one unbroken stream per split.
            generator = self._generator(self._stream_seed(split) + chunk * self.chunk_size, self.chunk_size)
            before = len(out)
            for j in range(self.chunk_size):
                entry = generator[j]
                if held_out(entry["question"], self.eval_fraction) != (split == "eval"):
                    continue
                out.append(
                    TaskItem(
                        id=f"{self.dataset}/{split}/{len(out)}",
                        question=entry["question"],
                        answer=str(entry["answer"]),
                        metadata=entry["metadata"],
                    )
                )
            if len(out) > before:
                return
        raise RuntimeError(
            f"{self.dataset}: {MAX_EMPTY_CHUNKS * self.chunk_size} generated problems in a row held none for"
            f" {split!r}; the question space is too small for eval_fraction={self.eval_fraction}"
        )

    def _stream_seed(self, split: str) -> int:
        # Hashed so the two splits start far apart in seed space; below 2**30 so
        # that seed + index stays a valid numpy seed for generators using numpy.
        digest = hashlib.sha256(f"{self.seed}/{split}".encode("utf-8")).digest()
        return int.from_bytes(digest[:4], "big") >> 2

    def _generator(self, seed: int, size: int) -> Any:
        # lazy: importing reasoning_gym registers every dataset and
        # costs about 2 s, which `import masrl.tasks` should not pay.
        import reasoning_gym

        try:
            return reasoning_gym.create_dataset(self.dataset, seed=seed, size=size, **self.overrides)
        except (TypeError, ValueError, AssertionError) as e:
            raise ValueError(f"reasoning-gym dataset {self.dataset!r} with config {self.overrides}: {e}") from e


def reasoning_gym_datasets() -> list[str]:
    """The names reasoning-gym has a dataset for (106 in reasoning-gym 0.1.25)."""
    from reasoning_gym.factory import DATASETS  # lazy: importing reasoning_gym registers every dataset (about 2 s)

    return sorted(DATASETS)


def check_dataset(name: str) -> None:
    """Refuse a dataset name reasoning-gym does not have, listing the names it has (a ConfigError: the user's to fix)."""
    names = reasoning_gym_datasets()
    if name not in names:
        tuned = ", ".join(DIFFICULTY)
        raise ConfigError(f"task.dataset {name!r} is not a reasoning-gym dataset. Levels of their own: {tuned}; "
                          f"all of reasoning-gym's (at their defaults): {', '.join(names)}")  # fmt: skip


class MixedMathTask:
    """Easy, medium and hard problems of one dataset, interleaved: item i of a
    split comes from level i % 3. The level is in each item's metadata and id,
    never in its question, so a router must read difficulty from the problem."""

    def __init__(self, dataset: str = "basic_arithmetic", seed: int = 0, config: Mapping[str, Any] | None = None, **kw: Any):
        self.name = f"{dataset}-mixed"
        self.levels = {level: MathTask(dataset, seed=seed, difficulty=level, config=config, **kw) for level in LEVELS}

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        out = []
        for i in range(start, start + count):
            level = LEVELS[i % len(LEVELS)]
            item = self.levels[level].items(split, i // len(LEVELS), 1)[0]
            out.append(TaskItem(f"{level}/{item.id}", item.question, item.answer, {**item.metadata, "level": level}))
        return out

    def score(self, item: TaskItem, answer: str) -> float:
        return 1.0 if math_equal(item.answer, answer) else 0.0

    def extract_answer(self, text: str) -> str | None:
        return extract_math_answer(text)

    def known_items(self) -> list[TaskItem]:
        return [
            TaskItem(f"{level}/{it.id}", it.question, it.answer, {**it.metadata, "level": level})
            for level, task in self.levels.items()
            for it in task.known_items()
        ]

    def known_count(self) -> int:
        return sum(task.known_count() for task in self.levels.values())


# ---- answer extraction ----

_REASONING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_FINAL_MARKER = re.compile(r"answer\s*:|answer\s+is\b\s*:?", re.IGNORECASE)
_NUMBER = re.compile(r"[-−]?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def extract_math_answer(text: str) -> str | None:
    """The final answer in a model response, by the first rule that finds one:
    the last non-empty <answer>...</answer>, the last \\boxed{...}, the rest of the
    line after the last "Answer:" / "answer is", the last number; else None.

    Reasoning (<think>...</think>, or an unclosed <think> to the end) is dropped first: an
    answer stated only there is not stated. Two different tagged (or boxed) answers are a
    hedge, and a hedge states no answer (None): otherwise a policy learns to list candidates."""
    text = _REASONING.sub("", text)
    tagged = [_clean(m) for m in re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)]
    tagged = [t for t in tagged if t]
    if tagged:
        return tagged[-1] if len(set(tagged)) == 1 else None
    boxed = [_clean(b) for b in _all_boxed(text)]
    boxed = [b for b in boxed if b]
    if boxed:
        return boxed[-1] if len(set(boxed)) == 1 else None
    markers = list(_FINAL_MARKER.finditer(text))
    if markers:
        rest = text[markers[-1].end() :].strip()
        line = _clean(rest.splitlines()[0]) if rest else None
        if line:
            return line
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _all_boxed(text: str) -> list[str]:
    """Contents of every complete \\boxed{...}, in order (a box inside a box is part of its content)."""
    found, at = [], text.find("\\boxed{")
    while at >= 0:
        content = _boxed_at(text, at)
        if content is None:
            break
        found.append(content)
        at = text.find("\\boxed{", at + len("\\boxed{") + len(content))
    return found


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, braces matched; None if absent or cut off."""
    start = text.rfind("\\boxed{")
    return None if start < 0 else _boxed_at(text, start)


def _boxed_at(text: str, start: int) -> str | None:
    """Content of the \\boxed{...} that starts at `start`; None if cut off."""
    begin = start + len("\\boxed{")
    depth = 1
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


def _clean(answer: str) -> str:
    """Strip what wraps an answer without being part of it: a \\boxed{}, $ signs,
    markdown bold, a full stop."""
    answer = answer.strip()
    boxed = _last_boxed(answer)
    if boxed is not None:
        answer = boxed
    return re.sub(r"^[\s$*]+|[\s$*.]+$", "", answer)


# ---- grading ----


def math_equal(gold: str, answer: str) -> bool:
    """Whether `answer` states the same value as `gold`."""
    # U+2212 is what models print for a minus in prose; math_verify 0.9.0 parses
    # "−4" as nothing at all.
    gold, answer = gold.strip().replace("\u2212", "-"), answer.strip().replace("\u2212", "-")
    if gold and gold == answer:
        return True
    if len(answer) > MAX_VERIFY_CHARS:
        return False
    gold_value = _rational(gold)
    if gold_value is None:  # sympy evaluates whatever the reply writes: a child process with a deadline
        return WORKER("math_verify", gold, answer, default=False)
    # A number is answered by one number. math_verify alone would also accept "3 or 7",
    # "{3, 7}", "3 7", "\\pm 7" and the question's own "3 + 4" for a gold 7 (it matches any
    # candidate it parses, and evaluates expressions): hedges and restated givens.
    # Both sides are then one plain number, its exponent bounded (`_single_number`): math_verify
    # compares them in milliseconds, so they stay in this process.
    number = _single_number(answer)
    if number is None:
        return False
    return _rational(number) == gold_value or _verify(gold, number)


_TEX_FRACTION = re.compile(r"\\[dt]?frac\{\s*([-−]?\d+)\s*\}\{\s*([-−]?\d+)\s*\}")
_ONE_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?:/\d+)?")
_PLUS_MINUS = re.compile(r"±|∓|\\pm\b|\\mp\b")


def _single_number(answer: str) -> str | None:
    """The number an answer states when it states exactly one ("7", "x = 7", "7 apples",
    "\\frac{1}{2}" as "1/2", "-3/4", "1,000", "1e2"); None for none, several, or a plus-minus."""
    text = _TEX_FRACTION.sub(r"\1/\2", answer).replace("\u2212", "-")
    numbers = _ONE_NUMBER.findall(text)
    if len(numbers) != 1 or _PLUS_MINUS.search(text) or _huge_exponent(numbers[0]):
        return None  # a huge exponent: math_verify would build the number too
    return numbers[0]


def _rational(text: str) -> Fraction | None:
    """Exact value of a plain number ("7.0", "1,000", "-3/4", "1e2"), else None."""
    if re.fullmatch(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?", text):
        text = text.replace(",", "")
    return fraction(text)


def _huge_exponent(text: str) -> bool:
    found = _DECIMAL_EXPONENT.search(text)
    digits = found.group(1).replace("_", "").lstrip("0") if found else ""
    return len(digits) > len(str(MAX_DECIMAL_EXPONENT)) or int(digits or 0) > MAX_DECIMAL_EXPONENT


def fraction(text: str) -> Fraction | None:
    """`Fraction(text)` ("7", "-3/4", "3.5", "1e2"), or None: not a number, a zero denominator, or a
    decimal exponent beyond +-MAX_DECIMAL_EXPONENT (what a model writes is hostile input)."""
    if _huge_exponent(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _verify(gold: str, answer: str) -> bool:
    """math_verify's comparison in this process, never raising: only for inputs known to be small
    (two plain numbers). Anything else goes to `WORKER`, the child process with a deadline."""
    on_main = threading.current_thread() is threading.main_thread()
    return compare(gold, answer, timeout_s=PARSE_TIMEOUT_S if on_main else None)
