"""Question/answer pairs from a user's JSONL file, graded like any math task (the format, for users:
docs/usage.md, "Your own questions").

Each line is a JSON object with `question` and `answer`, and optionally `id`
and `split` ("train" or "eval"). A line without `split` goes where
`held_out(question, eval_fraction)` sends it (base.py), so the same question
text always lands in the same split. A question that also appears in eval is
dropped from train, whatever the file says: eval stays as the file wrote it.

The train split is shuffled once by the seed and then cycles (item i is
train[i % n]), so training can run for more steps than the file has problems;
a repeated problem keeps its id. Eval keeps file order and does not cycle.

Every item of both splits is `known_items`, where the simulated and recorded agent pools look a
question up (masrl.pools.simulated.ItemIndex), as they do in a math task's generated items.

`read_jsonl` is the one reader of JSONL files of objects (this task's and the
search corpora's, masrl.retrieval.corpus): an error names the file and line.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from masrl.tasks.base import SPLITS, check_split, held_out
from masrl.tasks.math import extract_math_answer, math_equal
from masrl.types import TaskItem


class JsonlTask:
    def __init__(self, path: str | Path, seed: int = 0, eval_fraction: float = 0.1):
        if not 0.0 <= eval_fraction <= 1.0:
            raise ValueError(f"eval_fraction must be in [0, 1], got {eval_fraction}")
        self.path = Path(path)
        self.name = self.path.stem
        self.seed = seed
        splits: dict[str, list[TaskItem]] = {split: [] for split in SPLITS}
        records = _read(self.path)
        if not records:
            raise ValueError(f"{self.path}: no question/answer lines (one JSON object a line, see docs/usage.md)")
        for item, split in records:
            if split is None:
                split = "eval" if held_out(item.question, eval_fraction) else "train"
            splits[split].append(item)
        eval_questions = {item.question.strip() for item in splits["eval"]}
        self.train = [item for item in splits["train"] if item.question.strip() not in eval_questions]
        random.Random(seed).shuffle(self.train)
        self.eval = splits["eval"]
        # both splits are needed, and found missing here, before a run starts (not at its final evaluation)
        if not self.train:
            raise ValueError(f"{self.path}: no train items: every line is in the eval split (or its question is "
                             "in it); mark some lines \"split\": \"train\"")  # fmt: skip
        if not self.eval:
            raise ValueError(f"{self.path}: no held-out items: no line is in the eval split; mark some lines "
                             f"\"split\": \"eval\" or raise task.eval_fraction (now {eval_fraction})")  # fmt: skip

    def items(self, split: str, start: int, count: int) -> list[TaskItem]:
        check_split(split)
        if split == "eval":
            return self.eval[start : start + count]
        return [self.train[i % len(self.train)] for i in range(start, start + count)]

    def known_items(self) -> list[TaskItem]:
        """Every item of the file, both splits: simulated and recorded agent pools look questions up here
        (masrl.pools.simulated.ItemIndex), as they do in a math task's generated items."""
        return [*self.train, *self.eval]

    def known_count(self) -> int:
        return len(self.train) + len(self.eval)

    def score(self, item: TaskItem, answer: str) -> float:
        return 1.0 if math_equal(item.answer, answer) else 0.0

    def extract_answer(self, text: str) -> str | None:
        return extract_math_answer(text)


# A line is one question: a longer one is a mistake that would otherwise
# surface a minute later as an allocation of terabytes (a 5 MB question: "can't allocate 25001360018496
# bytes"), since attention grows with the square of the prompt. 64 KiB is past any shipped model's context.
MAX_LINE_BYTES = 1 << 16


def read_jsonl(path: Path, max_bytes: int | None = MAX_LINE_BYTES) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, where, object) for each non-blank line of a JSONL file of objects (gzipped when
    it ends in .gz); `where` is "path:line", the prefix of every error message about that line (not
    UTF-8, longer than `max_bytes` (None: any length), not JSON, not an object)."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(-1 if max_bytes is None else max_bytes + 1), b""), 1):
            where = f"{path}:{number}"
            if max_bytes is not None and len(raw) > max_bytes:
                raise ValueError(f"{where}: longer than {max_bytes} bytes, the most a line may hold")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 text (byte {e.start} of the line is "
                                 f"{raw[e.start]:#04x}); save the file as UTF-8") from None  # fmt: skip
            if not line.strip():
                continue
            try:
                row: Any = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from e
            except RecursionError:
                raise ValueError(f"{where}: JSON nested deeper than Python's parser reads") from None
            except ValueError as e:  # an integer past Python's 4,300 digits
                raise ValueError(f"{where}: {e}") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield number, where, row


def _read(path: Path) -> list[tuple[TaskItem, str | None]]:
    """Every record in the file with its `split` field (None when absent)."""
    records: list[tuple[TaskItem, str | None]] = []
    ids: set[str] = set()
    for number, where, row in read_jsonl(path):
        for key in ("question", "answer"):
            if key not in row:
                raise ValueError(f"{where}: missing required field {key!r}")
            if isinstance(row[key], bool) or not isinstance(row[key], (str, int, float)):
                raise ValueError(f"{where}: field {key!r} must be a string or a number")
        split = row.get("split")
        if split is not None and split not in SPLITS:
            raise ValueError(f"{where}: split must be one of {SPLITS}, got {split!r}")
        item_id = str(row.get("id", f"{path.stem}/{number}"))
        if item_id in ids:
            raise ValueError(f"{where}: duplicate id {item_id!r}")
        ids.add(item_id)
        extra = {k: v for k, v in row.items() if k not in ("question", "answer", "id", "split")}
        item = TaskItem(
            id=item_id, question=str(row["question"]), answer=str(row["answer"]), metadata={"line": number, **extra}
        )
        records.append((item, split))
    return records
