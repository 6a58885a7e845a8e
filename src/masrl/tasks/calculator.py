"""A calculator: the exact value of plain arithmetic, for agents that hand it an expression.

`evaluate` reads + - * / ** and parentheses over integer and decimal numbers with Python's own
parser (`ast`, mode "eval") and computes over `Fraction`s, so 1/3 * 3 is exactly 1 and nothing but
numbers and those operators runs: a name, a call, an attribute or a string is not arithmetic and
gives None. Powers are bounded (exponent <= 64, base <= 10^6), so an agent's expression cannot
make the calculator build a number of millions of digits. It is the yardstick of the simulated
pool's slips (masrl.pools.slips) and the tool a checker calls (masrl.systems.team, `checker:
calculator`); `calculate` finds the expression in an agent's reply and writes the value as a
number the tasks' answer parsers read.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_EXPONENT = 64
MAX_BASE = 10**6
MAX_LENGTH = 200  # characters of one expression: a reply is tens of tokens, so longer is not a calculator call
# A value the calculator can write (`number_text`): an integer of at most 4,000 digits (Python writes
# no int of more than 4,300: ValueError), anything else as a float (past 1.8e308: OverflowError).
# Both bounds are reached by a short product of allowed powers ("999998**64/3"), which raised out
# of `calculate` into the system's advance and stopped the run; such a value is now no value.
MAX_INTEGER_BITS = 13_287  # 2^13287 < 10^4000
MAX_FRACTION = Fraction(2) ** 1023  # below float's largest finite value
_CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
_OPEN_CALL = re.compile(r"<calc>(.*)$", re.DOTALL)  # a call cut by the token limit or the stop string
# A run of arithmetic in prose ("To calculate 9 - 10, we ..."): numbers, operators, parentheses, spaces.
_RUN = re.compile(r"[-+(]*[ \t]*\d[\d. \t()+\-*/^×÷]*")
_OPERATION = re.compile(r"[\d)]\s*(?:[-+*/^×÷]|\*\*)\s*[-(]*\s*\d")


def evaluate(expression: str) -> Fraction | None:
    """The exact value of plain arithmetic, or None when it is not that (or too large to check)."""
    try:
        value = _value(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, TypeError, OverflowError, RecursionError):
        return None
    if value.denominator == 1:
        return value if value.numerator.bit_length() <= MAX_INTEGER_BITS else None
    return value if abs(value) < MAX_FRACTION else None


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            return a / b
        if isinstance(node.op, ast.Pow) and b.denominator == 1 and abs(b) <= MAX_EXPONENT and abs(a) <= MAX_BASE:
            return a ** int(b)
    raise ValueError("not plain arithmetic")


def number_text(value: Fraction) -> str:
    """A value as the tasks write answers: an integer without a point, else a decimal (6 places, trailing zeros cut)."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def calculate(reply: str) -> tuple[str, str] | None:
    """(the expression, its value as text) that `reply` types into the calculator, or None.

    The expression is the first `<calc>EXPRESSION</calc>` (a call left open at the end counts);
    a reply without one types its first run of arithmetic with an operation in it, as a person
    reading "To calculate 9 - 10, we ..." would (a 135M model rarely writes the tag untrained, but
    usually restates the problem). A run ends at anything else, "=" included, so "5 - 6 = 3" computes
    5 - 6."""
    found = _CALL.search(reply) or _OPEN_CALL.search(reply)
    candidates = [found.group(1)] if found else [m.group(0) for m in _RUN.finditer(reply)]
    for candidate in candidates:
        expression = candidate.strip().rstrip("=").strip().rstrip(".").strip()
        if not expression or len(expression) > MAX_LENGTH or (not found and not _OPERATION.search(expression)):
            continue
        value = evaluate(expression.replace("^", "**").replace("×", "*").replace("÷", "/"))
        if value is not None:
            return expression, number_text(value)
    return None
