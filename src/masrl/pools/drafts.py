"""The simulated pool's reply text: worked solutions that end in a right or a plausibly wrong answer.

A simulated agent (masrl.pools.simulated) draws whether it is right; this module
writes the draft. Every choice (an opener, the kind of error, which operation
slips) comes from `uniform` / `pick`: a SHA-256 of the draw's key (seed, agent
name, item id, question, attempt) and its purpose, never global random state.

Wrong answers differ from the gold under `math_equal` by construction: an
off-by-one, a sign error, a digit slip, a dropped or extra digit, or (for
arithmetic) the same expression evaluated with one operator swapped; the
worked steps are made consistent with the wrong number where the expression
can be parsed. A conversation that already holds a draft (an ``<answer>`` tag,
e.g. a weaker agent's draft plus the controller's critique) is acknowledged
in the text, but the new draft's correctness is only this agent's own draw.

Visible drafts (``drafts: visible``, `DraftStyle`, `visible_draft`). The original, consistent drafts
(`consistent_draft`) hide their errors: every wrong draft is internally consistent but for its last line. Real models'
wrong answers more often show where they went wrong: `VISIBLE` shows a slip in 62% of wrong drafts,
a false step in 94% of those (one operation's result written wrong and carried on) and an answer
that does not match the last line in the rest; the other wrong drafts work out a misread expression
(an operator or a digit read wrongly) with every line true. Right drafts never show a slip. Every
visible draft writes one line per operation, negations of a group included, and no restatement of
the expression. The rates were measured on SmolLM2-135M's own wrong arithmetic with the checker
every draft is held to (`masrl.pools.slips.check_draft`, `scripts/draft_slips.py`): docs/pools.md.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from masrl.tasks.math import math_equal
from masrl.types import Message, TaskItem

WRONG_KINDS = ("off_by_one", "sign", "digit_slip", "magnitude", "wrong_operation")
# How a visible draft's slip writes a number wrong, as `slips.slip_kind` names it, with the shares
# measured on the first false step of SmolLM2's 125 wrong arithmetic answers that had one
# (scripts/draft_slips.py): other 64, digit 35, near 17, off by one 6, sign 3.
SLIP_MIX = (("other", 0.51), ("digit", 0.28), ("near", 0.14), ("off_by_one", 0.05), ("sign", 0.02))


@dataclass(frozen=True)
class DraftStyle:
    """How a simulated agent writes its drafts.

    ``visible_rate`` None: the original pool's *consistent* drafts (`consistent_draft`). A number:
    *visible* drafts (`visible_draft`), where a wrong draft shows a checkable slip
    (`masrl.pools.slips`) with this probability, a false step in `false_step_share` of those and an
    answer that does not match the last line in the rest; the other wrong drafts work out a misread
    expression without a slip. Right drafts never show a slip."""

    visible_rate: float | None = None
    false_step_share: float = 0.5


CONSISTENT = DraftStyle()
# Calibrated on SmolLM2-135M's own drafts of the same arithmetic (docs/pools.md, "Visible drafts").
VISIBLE = DraftStyle(visible_rate=0.62, false_step_share=0.94)


def draft_style(kind: str = "consistent", visible_rate: float | None = None) -> DraftStyle:
    """The named draft style, with its visible rate overridden when given."""
    if kind == "consistent":
        return CONSISTENT
    if kind == "visible":
        return VISIBLE if visible_rate is None else DraftStyle(visible_rate, VISIBLE.false_step_share)
    raise ValueError(f"unknown draft style {kind!r}; valid: consistent, visible")


# ---- reply text -----------------------------------------------------------------

_OPENERS = (
    "Let me work through this step by step.",
    "I'll compute this carefully, one operation at a time.",
    "Breaking the problem into steps:",
)
_CLOSERS = ("So the answer is", "Therefore, the final answer is", "Putting it together, the answer is")


def consistent_draft(item: TaskItem, correct: bool, key: tuple, previous: str | None) -> str:
    """The original pool's draft: every line consistent with its answer except, when wrong, the last
    step's result (an arithmetic slip a reader can find only by recomputing it) or the whole solution
    of a misread expression."""
    if correct:
        answer, steps = item.answer, _worked_steps(item, None)
    else:
        answer, steps = _wrong_answer(item, key)
    expr = item.metadata.get("expression")
    if steps and isinstance(expr, str):
        # Every draft restates the expression, right or wrong: a line that
        # only wrong drafts carried would let a verifier read correctness
        # off the wording instead of checking the arithmetic.
        steps = [f"Reading the expression as {expr.strip()}:"] + steps
    return _draft_text(item, answer, steps, previous, key)


def visible_draft(item: TaskItem, correct: bool, key: tuple, style: DraftStyle, previous: str | None) -> str | None:
    """A draft whose error, when it has one, shows as a checkable slip with probability
    `style.visible_rate` (`DraftStyle`); None for an item without an arithmetic expression to work.

    - right: one line per operation, in evaluation order, then the answer;
    - wrong, visible, false step: one operation's result is slipped and carried on, so every later
      line and the answer follow from it (a reader recomputing that line sees it);
    - wrong, visible, answer mismatch: every line right, the answer a slip of the last line's value;
    - wrong, hidden: the steps of a misread expression (one operator or one number read wrongly),
      each line true and the answer the last line's value: nothing to see without the problem.

    `masrl.pools.slips.check_draft` finds a slip in exactly the visible wrong drafts."""
    expr = item.metadata.get("expression")
    gold = _number(item.answer)
    steps: list[str] = []
    if not isinstance(expr, str) or gold is None or _evaluate(expr, steps, negations=True) != gold or not steps:
        return None  # no expression, or one whose label is not its exact value (a few reasoning-gym divisions)
    answer: Fraction | None = gold
    if not correct:
        if uniform(*key, "visible") < (style.visible_rate or 0.0):
            if uniform(*key, "slip_form") < style.false_step_share:
                answer, steps = _false_step(expr, gold, key)
            else:
                answer = _slipped(gold, (*key, "answer"))
        else:
            answer, steps = _misread(expr, gold, key)
        if answer is None:  # no slip or misreading changes the result (rare): slip the answer itself
            answer, steps = _slipped(gold, (*key, "answer")), _right_steps(expr)
    return _draft_text(item, _format_number(answer, item.answer), steps, previous, key)


def _right_steps(expr: str) -> list[str]:
    steps: list[str] = []
    _evaluate(expr, steps, negations=True)
    return steps


def _slipped(value: Fraction, key: tuple) -> Fraction:
    """`value` written wrong, the kind drawn from `SLIP_MIX`: another number of about its size
    ("other", more than 10 away), one digit changed ("digit"), within 10 ("near"), off by one, or the
    sign lost. A kind that cannot change `value` (a digit of a fraction, the sign of 0) falls to other."""
    u, kind = uniform(*key, "slip_kind"), SLIP_MIX[-1][0]
    for name, share in SLIP_MIX:
        if u < share:
            kind = name
            break
        u -= share
    sign = 1 if pick(key, "slip_sign", 2) else -1
    if kind == "digit" and value.denominator == 1:
        digits = list(str(abs(value.numerator)))
        i = pick(key, "slip_digit", len(digits))
        choices = [d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0" and len(digits) > 1)]
        digits[i] = choices[pick(key, "slip_digit_to", len(choices))]
        return Fraction(int("".join(digits))) * (1 if value >= 0 else -1)
    if kind == "near":
        return value + sign * (2 + pick(key, "slip_near", 9))
    elif kind == "off_by_one":
        return value + sign
    elif kind == "sign" and value != 0:
        return -value
    span = max(20, int(abs(value)))  # "other": 11..span away
    return value + sign * (11 + pick(key, "slip_far", span - 10))


def _false_step(expr: str, gold: Fraction, key: tuple) -> tuple[Fraction | None, list[str]]:
    """The steps with one operation's result slipped and carried on, starting with the operation
    `key` picks and moving on while a slip cancels out (times 0); (None, []) if every one does."""
    right: list[str] = []
    _evaluate(expr, right, negations=True)
    start = pick(key, "slip_step", len(right))
    for at in [*range(start, len(right)), *range(start)]:
        steps: list[str] = []
        value = _evaluate(expr, steps, slip=(at, lambda v: _slipped(v, (*key, "step"))), negations=True)
        if value is not None and value != gold:
            return value, steps
    return None, []


def _misread(expr: str, gold: Fraction, key: tuple) -> tuple[Fraction | None, list[str]]:
    """The steps of `expr` read with one operator swapped, else one number's digit changed, trying
    each operator and then each number from the ones `key` picks until the value differs from `gold`."""
    ops = pick(key, "op_index", 97)
    readings = [_swap_operator(expr, ops + i) for i in range(4)]
    readings += [_misread_number(expr, (*key, i)) for i in range(6)]
    for mutated in readings:
        steps: list[str] = []
        value = _evaluate(mutated, steps, negations=True) if mutated else None
        if value is not None and value != gold and steps:
            return value, steps
    return None, []


def _misread_number(expr: str, key: tuple) -> str | None:
    """`expr` with one digit of one of its numbers read as another digit."""
    numbers = list(re.finditer(r"\d+", expr))
    if not numbers:
        return None
    m = numbers[pick(key, "misread_number", len(numbers))]
    digits = list(m.group())
    i = pick(key, "misread_digit", len(digits))
    digits[i] = str((int(digits[i]) + 1 + pick(key, "misread_bump", 8)) % 10)
    return expr[: m.start()] + str(int("".join(digits))) + expr[m.end() :]


def _draft_text(item: TaskItem, answer: str, steps: list[str] | None, previous: str | None, key: tuple) -> str:
    lines = []
    if previous is not None:
        lines.append(
            f"The previous draft concluded {previous}. Taking the critique into account, "
            "I redo the solution from the start."
        )
    lines.append(_OPENERS[pick(key, "opener", len(_OPENERS))])
    lines += steps if steps else [f"Working through the problem: {item.question.strip()[:200]}"]
    lines.append(f"{_CLOSERS[pick(key, 'closer', len(_CLOSERS))]} <answer>{answer}</answer>.")
    return "\n".join(lines)


def previous_answer(messages: Sequence[Message]) -> str | None:
    """The last <answer> in the conversation: a draft this agent is asked to improve on.

    System messages are instructions (they show the answer format, e.g.
    "<answer>ANSWER</answer>"), never drafts."""
    for m in reversed(messages):
        if m.role == "system":
            continue
        found = re.findall(r"<answer>(.*?)</answer>", m.content, re.DOTALL)
        if found and found[-1].strip():
            return found[-1].strip()
    return None


def _worked_steps(item: TaskItem, expression: str | None) -> list[str] | None:
    """Steps evaluating `expression` (default: the item's own), or the item's recorded chain
    of thought; None when neither is available."""
    expr = expression if expression is not None else item.metadata.get("expression")
    if isinstance(expr, str):
        steps: list[str] = []
        if _evaluate(expr, steps) is not None:
            return steps or [f"{expr.strip()} = {item.answer}"]
        return None
    cot = item.metadata.get("answer_cot")
    if isinstance(cot, str) and expression is None:
        return [line.strip() for line in cot.split("####")[0].splitlines() if line.strip()]
    return None


def _wrong_answer(item: TaskItem, key: tuple) -> tuple[str, list[str] | None]:
    """A plausibly wrong answer and worked steps leading to it; never equal to the gold."""
    gold = _number(item.answer)
    if gold is None:
        return _wrong_text_answer(item.answer, key), None
    kinds = list(WRONG_KINDS)
    start = pick(key, "wrong_kind", len(kinds))
    for kind in kinds[start:] + kinds[:start]:
        value, steps = _mutate(item, gold, kind, key)
        if value is not None and value != gold:
            return _format_number(value, item.answer), steps
    return _format_number(gold + 1, item.answer), None  # unreachable in practice: off_by_one always differs


def _mutate(item: TaskItem, gold: Fraction, kind: str, key: tuple) -> tuple[Fraction | None, list[str] | None]:
    if kind == "wrong_operation":
        expr = item.metadata.get("expression")
        if not isinstance(expr, str):
            return None, None
        mutated = _swap_operator(expr, pick(key, "op_index", 97))
        steps: list[str] = []
        value = _evaluate(mutated, steps) if mutated else None
        return value, steps or None
    if kind == "off_by_one":
        value = gold + (1 if pick(key, "sign_of_slip", 2) else -1)
    elif kind == "sign":
        value = -gold if gold != 0 else None
    elif kind == "digit_slip":
        value = _digit_slip(gold, key)
    else:  # magnitude: a dropped or an extra trailing digit
        value = gold * 10 if pick(key, "magnitude", 2) or abs(gold) < 10 else Fraction(int(gold / 10))
    if value is None:
        return None, None
    steps = _worked_steps(item, None)
    if steps:  # the slip happens in the last step
        last = steps[-1]
        gold_text = item.answer.strip()
        cut = last.rfind(gold_text)
        wrong_text = _format_number(value, item.answer)
        steps = steps[:-1] + [last[:cut] + wrong_text + last[cut + len(gold_text) :] if cut >= 0 else last]
    return value, steps


def _digit_slip(gold: Fraction, key: tuple) -> Fraction | None:
    if gold.denominator != 1:
        return None
    digits = list(str(abs(gold.numerator)))
    i = pick(key, "digit", len(digits))
    if len(digits) > 1 and pick(key, "swap", 2) and digits[i] != digits[(i + 1) % len(digits)]:
        j = (i + 1) % len(digits)
        digits[i], digits[j] = digits[j], digits[i]
    else:
        digits[i] = str((int(digits[i]) + 1 + pick(key, "bump", 8)) % 10)
    if digits[0] == "0" and len(digits) > 1:
        digits[0] = "1"
    value = Fraction(int("".join(digits))) * (1 if gold >= 0 else -1)
    return value


def _swap_operator(expr: str, which: int) -> str | None:
    """`expr` with one binary operator replaced (+<->-, *->+, /->*), chosen by `which`."""
    tokens = re.split(r"(\s+)", expr)
    ops = [i for i, t in enumerate(tokens) if t in {"+", "-", "*", "/"} and _is_binary(tokens, i)]
    if not ops:
        return None
    i = ops[which % len(ops)]
    tokens[i] = {"+": "-", "-": "+", "*": "+", "/": "*"}[tokens[i]]
    return "".join(tokens)


def _is_binary(tokens: list[str], i: int) -> bool:
    before = [t for t in tokens[:i] if t.strip()]
    return bool(before) and before[-1] not in {"+", "-", "*", "/", "("}


Slip = tuple[int, Callable[[Fraction], Fraction]]  # (which operation, how its result is written wrong)


def _evaluate(expr: str, steps: list[str], slip: Slip | None = None, negations: bool = False) -> Fraction | None:
    """Exact value of an arithmetic expression, appending one "a op b = c" line per operation.

    With `slip` = (i, wrong), operation i (in evaluation order) writes wrong(its result) and every
    later operation works on that written value, as a person carries a slip forward. With
    `negations`, negating a group is a line of its own ("-(14) = -14"), so every line follows from the
    one before (the original pool's drafts leave it out)."""
    try:
        tree = ast.parse(expr.strip(), mode="eval").body
        return _eval_node(tree, steps, slip, negations)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError):
        return None


def _eval_node(node: ast.AST, steps: list[str], slip: Slip | None = None, negations: bool = False) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _eval_node(node.operand, steps, slip, negations)
        if not isinstance(node.op, ast.USub):
            return inner
        if not negations or isinstance(node.operand, ast.Constant):
            return -inner
        return _step(steps, f"-({_show(inner)})", -inner, slip)
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
        symbol = ops.get(type(node.op))
        if symbol is None:
            raise ValueError("unsupported operator")
        left, right = _eval_node(node.left, steps, slip, negations), _eval_node(node.right, steps, slip, negations)
        value = {"+": left + right, "-": left - right, "*": left * right}.get(symbol)
        if symbol == "/":
            value = left / right
        return _step(steps, f"{_show(left)} {symbol} {_show(right)}", value, slip)
    raise ValueError("unsupported expression")


def _step(steps: list[str], lhs: str, value: Fraction, slip: Slip | None) -> Fraction:
    """Write the line `lhs = value` (its value slipped when it is the slip's operation); the written value."""
    if slip is not None and slip[0] == len(steps):
        value = slip[1](value)
    steps.append(f"{lhs} = {_show(value)}")
    return value


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _number(text: str) -> Fraction | None:
    text = text.strip().replace(",", "").replace("\u2212", "-")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _format_number(value: Fraction, like: str) -> str:
    """`value` written the way the gold answer `like` is written (integer, decimal or fraction)."""
    if value.denominator == 1:
        return str(value.numerator)
    if "." in like:
        places = len(like.strip().split(".")[-1])
        return f"{float(value):.{max(1, places)}f}"
    return _show(value)


def _wrong_text_answer(gold: str, key: tuple) -> str:
    """A wrong non-numeric answer: one digit of the gold slipped, else a different word."""
    digits = [i for i, ch in enumerate(gold) if ch.isdigit()]
    if digits:
        i = digits[pick(key, "digit", len(digits))]
        candidate = gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1 :]
        if not math_equal(gold, candidate):
            return candidate
    return "none" if gold.strip().lower() != "none" else "all"


# ---- hashed draws --------------------------------------------------------------------


def uniform(*parts: Any) -> float:
    """A uniform [0, 1) number that depends only on `parts` (SHA-256, no global state)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def pick(key: tuple, purpose: str, n: int) -> int:
    return min(n - 1, int(uniform(*key, purpose) * n))
