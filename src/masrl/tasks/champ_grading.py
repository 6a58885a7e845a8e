"""The rule grader of CHAMP's free-form answers: a one-sentence summary against a reference answer.

CHAMP's reference answers are free-form ("C(10, 5), or equivalently 252", "0 is
the only possible value", "No integer solutions", "(x+1)(x-1)...", "The limit
exists and is equal to 3") and so are the models' answers, so `math_equal` alone
cannot grade them. `grade_summary(reference, question, summary)` picks a rule by
the kind of the reference answer (`reference_kind`):

- number or set of numbers (the values of its ``@@``-marked constant expressions
  such as C(10, 5), "±" expanded, "(i.e., ...)" asides dropped): the answer part
  of the summary is the text after its last "is"/"are"/"equals" before any
  trailing "which ... / when ..." clause, else after a final "=" that a value
  follows (`answer_parts`). One reference value: the first value stated there
  must equal it (exactly, as fractions; decimals and percentages to the
  precision written) and no other value the question lacks may appear; a set:
  the values stated must be the set, up to numbers restated from the question.
  With no number in the answer part, the whole sentence's numbers that the
  question lacks are used, and if every reference value is also in the question
  the rule abstains. A reference 0 also accepts "no"/"none" phrasing;
- yes / no: a leading "Yes"/"No", else negative if the sentence has a negation
  ("not", "no", "cannot", "never", ...), else positive;
- "no solutions" / "does not exist" answers: negative phrasing and no number the
  question lacks;
- expressions in n, m, k, r, a, b, x (and irrational constants): the expression
  in the answer part, LaTeX turned to plain text (`normalize`), parsed with sympy
  and compared with the reference at three integer points;
- anything else (a relation, an interval of text, "Monotonically increasing",
  "Infinitely many solutions"): no rule, the verdict is None.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from masrl.tasks.symbolic import WORKER

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
        if verdict is False and len(values) == 1 and isinstance(next(iter(values)), Fraction):  # stated as "2^997"
            return WORKER("champ_expression", reference, text, default=False) or False
        return verdict
    if kind == "expr":
        return WORKER("champ_expression", reference, text, default=False)
    return None


def expression_verdict(reference: str, text: str) -> bool | None:
    """The expression rule on a normalized summary, run in masrl.tasks.symbolic's worker (a deadline)."""
    import sympy  # lazy: sympy takes about a second to import

    kind, values = reference_kind(reference)
    return _grade_expression([sympy.Rational(v) for v in values] if kind == "numbers" else values, text)


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
_IN_EXPONENT = re.compile(r"\^\s*\([^()]*\Z")  # text ending inside the parentheses of an exponent


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
        if text[:start].rstrip()[-1:] in ("*", "×", "·") or _IN_EXPONENT.search(text, 0, start):
            continue  # a factor of a product ("2*3") or a number inside an exponent ("2^(2*3)"), not a value
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
        try:
            return {_Approx(float(s * value), 0.5 * 10.0**-places) for s in signs}
        except OverflowError:  # a decimal of hundreds of digits: no answer is near it
            return set()
    return {s * value for s in signs}


@dataclass(frozen=True)
class _Approx:
    value: float
    tolerance: float

    def matches(self, other: Any) -> bool:
        try:
            return abs(float(other) - self.value) <= self.tolerance + 1e-12
        except (TypeError, ValueError, OverflowError):  # OverflowError: beyond any float, so not this decimal
            return False


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, _Approx):
        return a.matches(b.value if isinstance(b, _Approx) else b)
    if isinstance(b, _Approx):
        return b.matches(a)
    try:
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    except (TypeError, ValueError, OverflowError):  # OverflowError: unequal exact values beyond any float
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
    import sympy  # lazy: sympy takes about a second to import
    from sympy.parsing.sympy_parser import (  # lazy: as above
        convert_xor,
        implicit_multiplication_application,
        standard_transformations,
    )

    t = text.strip().rstrip(".").replace("±", "")
    t = re.sub(r"sum_\(.*", "", t) if "sum_(" in t else t
    if not t or re.search(r"[=<>]|\.\.\.|sum|lim|\d[eE][-+]?\d{4}", t):  # 1e999999 parses as an exact integer
        return None
    names = {v: sympy.Symbol(v, positive=True, integer=v in "nmkr") for v in _VARIABLES}
    names.update(C=sympy.binomial, binom=sympy.binomial, floor=sympy.floor, sqrt=sympy.sqrt, choose=sympy.binomial,
                 factorial=sympy.factorial, binomial=sympy.binomial)  # fmt: skip
    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sympy deprecation chatter on odd input
        return _parse_checked(t, names, transformations)


def _parse_checked(t: str, names: dict, transformations: tuple) -> Any:
    import sympy  # lazy: as above
    from sympy.parsing.sympy_parser import parse_expr  # lazy: as above

    # evaluate=False leaves operators alone, not functions: 99999999! would be computed while parsing
    held = {k: functools.partial(f, evaluate=False) if callable(f) else f for k, f in names.items()}
    try:
        raw = parse_expr(t, local_dict=held, transformations=transformations, evaluate=False)
        if not _cheap(raw):
            return None  # not an answer we grade: evaluating it exactly would not finish
        expr = parse_expr(t, local_dict=names, transformations=transformations, evaluate=True)
    except Exception:  # noqa: BLE001 - any parse failure means "no expression here"
        return None
    if not isinstance(expr, sympy.Basic) or expr.free_symbols - set(names.values()):
        return None
    return expr


# Exact evaluation builds every constant power, factorial and binomial in full: 9^(9^9), (10^9)! or
# (1/2^1958 - ...)^1959 hold the process (and the GIL) for minutes, so one answer a model writes would
# stall every episode. A constant exponent may reach MAX_EXPONENT over a number or a variable
# (-x^1958 - x^1957 is a CHAMP answer) and MAX_COMPOUND_EXPONENT over anything else; a factorial's or
# binomial's constant arguments MAX_COMBINATORIAL. The test points are checked the same way, as
# 10^(10^n) is cheap until n is 10.
MAX_EXPONENT = 10_000
MAX_COMPOUND_EXPONENT = 200
MAX_COMBINATORIAL = 10_000


def _cheap(expr: Any) -> bool:
    """Whether `expr`, parsed unevaluated, is cheap to evaluate exactly (see MAX_EXPONENT)."""
    import sympy  # lazy: as above

    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not node.exp.free_symbols:
            limit = MAX_EXPONENT if node.base.is_Atom else MAX_COMPOUND_EXPONENT  # a number or a variable
            if not _bounded(node.exp, limit):
                return False
        elif isinstance(node, (sympy.factorial, sympy.binomial)):
            if not all(a.free_symbols or _bounded(a, MAX_COMBINATORIAL) for a in node.args):
                return False
    return True


def _bounded(constant: Any, limit: float) -> bool:
    """Whether a constant expression is cheap to evaluate and a number no larger than `limit` in size."""
    if constant.is_Number:
        return abs(constant) <= limit
    if not _cheap(constant):  # a smaller tree: the recursion ends
        return False
    value = constant.doit()
    return bool(value.is_Number) and abs(value) <= limit


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
    import sympy  # lazy: as above

    for point in _POINTS:
        subs = {s: point[s.name] for s in a.free_symbols | b.free_symbols if s.name in point}
        try:
            with sympy.evaluate(False):
                at_a, at_b = a.subs(subs), b.subs(subs)
            if not (_cheap(at_a) and _cheap(at_b)):
                return False
            va, vb = sympy.nsimplify(at_a.doit()), sympy.nsimplify(at_b.doit())
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

