"""The checkable-slip reader (masrl/pools/slips.py) against hand-checked drafts."""

from fractions import Fraction

import pytest

from masrl.pools.slips import check_draft, equations
from masrl.tasks.calculator import evaluate


def test_a_false_step_and_a_true_one():
    text = "7 + 6 = 12\n12 * 2 = 24"
    eqs = equations(text)
    assert [(e.lhs, e.stated, e.value, e.holds) for e in eqs] == [("7 + 6", "12", 13, False), ("12 * 2", "24", 24, True)]
    assert check_draft(text, "24") == check_draft(text, "24")
    report = check_draft(text, "24")
    assert (report.equations, report.false_steps, report.answer_mismatch, report.visible) == (2, 1, False, True)


def test_an_answer_that_does_not_match_the_last_line():
    text = "85 * 3 = 255\n255 - 17 = 238\nSo the answer is <answer>283</answer>."
    report = check_draft(text, "283")
    assert (report.false_steps, report.answer_mismatch, report.visible) == (0, True, True)
    assert not check_draft(text.replace("283", "238"), "238").visible


def test_a_chain_is_checked_where_it_reaches_a_number():
    # 7^2 - 4*7 + 3 = 49 - 28 + 3 = 24: the first link's right side is an expression, not a number
    eqs = equations("7^2 - 4*7 + 3 = 49 - 28 + 3 = 24")
    assert [(e.lhs, e.stated, e.holds) for e in eqs] == [("49 - 28 + 3", "24", True)]


def test_names_and_variables_are_not_arithmetic():
    assert equations("f(2) = 5, x_1 + 1 = 3, 2x + 1 = 7, n = 4") == []
    # a word before the arithmetic, with a space, is fine; "equals" reads as "="
    assert [e.lhs for e in equations("So 7 + 6 equals 13.")] == ["7 + 6"]


def test_latex_unicode_negation_and_thousands():
    eqs = equations(r"$\frac{3}{4} \times 8 = 6$, 2^{10} = 1024, 1,000 − 1 = 999, -(14) = -14, 3 · 3 = 10")
    assert [e.holds for e in eqs] == [True, True, True, True, False]


def test_decimals_are_read_to_the_places_written():
    assert [e.holds for e in equations("1 / 3 = 0.33\n1 / 3 = 0.3\n2 / 3 = 0.6")] == [True, True, False]


def test_too_large_to_check_is_skipped_not_raised():
    assert evaluate("2 ** 100000") is None and evaluate("9999999 ** 3") is None
    assert evaluate("1 / 0") is None and evaluate("import os") is None
    assert evaluate("(2 + 3) * 4") == Fraction(20)
    assert equations("2^100000 = 5") == []


def test_equations_inside_the_answer_tag_are_not_steps():
    report = check_draft("3 + 4 = 7\n<answer>2 + 2 = 5</answer>", "7")
    assert (report.equations, report.false_steps) == (1, 0)


@pytest.mark.parametrize("answer, mismatch", [("-26", False), ("26", True), (None, False), ("twenty", False)])
def test_mismatch_needs_a_number_to_compare(answer, mismatch):
    assert check_draft("-53 + 8 = -45\n-45 + 19 = -26", answer).answer_mismatch is mismatch
