"""Checkable slips in a worked solution: what a reader can verify without solving the problem again.

A draft shows where it went wrong when it states something a reader can
check on the spot:

- a **false step**: an equation between plain numbers that does not hold when
  recomputed ("7 + 6 = 12", "1089 - 1083 = 17");
- an **answer that does not match the last line**: the final answer differs
  from the value the last equation arrived at ("... 255 - 17 = 238. So the
  answer is <answer>283</answer>").

`check_draft` finds both. It is the yardstick of the simulated pool's drafts
(`masrl.pools.simulated`, ``drafts: visible``): a wrong draft is *visible*
when it finds a slip, and the pool's visible rate was calibrated with it on
real models' answers (`scripts/draft_slips.py`: the recorded CHAMP answers and
SmolLM2's own arithmetic drafts). The checker is deliberately narrow: only
arithmetic it can evaluate exactly (+ - * / ^ and parentheses over numbers,
LaTeX's \\times, \\cdot and \\frac{}{} rewritten), never an equation with a
variable in it; an exponent above 64 or a base above 10^6 is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from masrl.tasks.calculator import evaluate

_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)")
# after the stated number: an operator and another operand means the right side is an expression
# ("= 49 - 28 + 3"), a letter or "(" straight after it a term ("= 5x", "= 2(")
_CONTINUES = re.compile(r"(\s*[-+*/^]\s*[\d(])|[A-Za-z_(]")
_ARITH_CHAR = re.compile(r"[-+*/().\d\s]")
_HAS_OPERATOR = re.compile(r"[\d)]\s*(?:[-+*/]|\*\*)\s*[-\d(]|^-\s*\(")  # a binary operation, or "-(...)"


@dataclass(frozen=True)
class Equation:
    """One checkable equation: `lhs` (plain arithmetic) = `stated` (a number), on line `line`."""

    line: int
    lhs: str
    stated: str
    value: Fraction  # what lhs evaluates to

    @property
    def holds(self) -> bool:
        """Whether the stated number is the value; a decimal is read to the places it was written."""
        stated = Fraction(self.stated)
        if "." in self.stated:
            places = len(self.stated.split(".")[1])
            return abs(self.value - stated) <= Fraction(51, 100) * Fraction(1, 10**places)
        return self.value == stated


@dataclass(frozen=True)
class SlipReport:
    equations: int  # checkable equations found
    false_steps: int  # of them, how many do not hold
    answer_mismatch: bool  # the final answer differs from the last equation's value

    @property
    def visible(self) -> bool:
        """Whether a reader can see on the spot that something is wrong."""
        return self.false_steps > 0 or self.answer_mismatch


def normalize(text: str) -> str:
    """Plain-text arithmetic: LaTeX and Unicode operators rewritten, thousands separators dropped."""
    for old, new in (("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("·", "*"), ("÷", "/"), ("\u2212", "-"),
                     ("\\left", ""), ("\\right", ""), ("$", " "), ("equals", "=")):  # fmt: skip
        text = text.replace(old, new)
    text = re.sub(r"\\frac\{([^{}]+)\}\{([^{}]+)\}", r"((\1)/(\2))", text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return text.replace("^", "**").replace("{", "(").replace("}", ")")


def equations(text: str) -> list[Equation]:
    """Every `arithmetic = number` in `text`, in order (chains "a = b = c" give one per checkable link)."""
    found = []
    for n, line in enumerate(normalize(text).splitlines()):
        parts = line.split("=")
        for left, right in zip(parts, parts[1:]):
            m = _NUMBER.match(right)
            if m is None or _CONTINUES.match(right, m.end()):
                continue
            start = len(left)
            while start > 0 and _ARITH_CHAR.match(left[start - 1]):
                start -= 1
            lhs = left[start:].strip()
            if not _HAS_OPERATOR.search(lhs):
                continue
            if start > 0 and not left[start].isspace() and re.match(r"[A-Za-z_\\]", left[start - 1]):
                continue  # f(2) = 5, x_1 + 1 = 3: a name, not arithmetic
            value = evaluate(lhs)
            if value is not None:
                found.append(Equation(n, lhs, m.group(1), value))
    return found


def slip_kind(value: Fraction, stated: Fraction) -> str:
    """How a written number differs from the right one: "sign", "off_by_one", "magnitude" (a digit
    dropped or added at the end), "digit" (one digit changed, same length), "near" (within 10) or
    "other"; "none" when it does not."""
    if stated == value:
        return "none"
    if stated == -value:
        return "sign"
    if abs(stated - value) == 1:
        return "off_by_one"
    if value != 0 and (stated == value * 10 or stated * 10 == value):
        return "magnitude"
    a, b = str(abs(value.numerator)), str(abs(stated.numerator))
    if value.denominator == stated.denominator == 1 and len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1:
        return "digit"
    return "near" if abs(stated - value) <= 10 else "other"


def check_draft(text: str, answer: str | None) -> SlipReport:
    """The slips a reader can check in `text`, whose final answer is `answer` (None: none stated).

    Equations inside the final `<answer>` tag are not steps of the work and are left out."""
    work = re.sub(r"<answer>.*?</answer>", " ", text, flags=re.DOTALL)
    eqs = equations(work)
    false_steps = sum(not e.holds for e in eqs)
    mismatch = False
    if eqs and answer is not None:
        final = evaluate(normalize(answer).strip())
        mismatch = final is not None and final != Fraction(eqs[-1].stated)
    return SlipReport(len(eqs), false_steps, mismatch)
