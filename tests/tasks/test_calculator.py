"""The calculator a checker calls (masrl.tasks.calculator): exact values, and nothing but arithmetic runs."""

from __future__ import annotations

from fractions import Fraction

from masrl.tasks.calculator import calculate, evaluate, number_text


def test_values_are_exact_fractions():
    assert evaluate("1/3 * 3") == 1
    assert evaluate("-( 51 - 24 ) - 93") == -120
    assert evaluate("( 14 + 30 ) / 11") == 4
    assert evaluate("0.1 + 0.2") == Fraction(3, 10)
    assert evaluate("2 ** 10") == 1024


def test_anything_but_arithmetic_is_refused():
    for text in ("__import__('os').system('true')", "x + 1", "'1' + '2'", "len([1])", "1 if 1 else 2", "True + 1", "1 / 0"):
        assert evaluate(text) is None, text
    assert evaluate("9 ** 65") is None and evaluate("1000001 ** 2") is None  # the power bounds
    assert evaluate("(" * 5000 + "1" + ")" * 5000) is None  # too deep for the parser: refused, not a crash


def test_a_value_too_large_to_write_is_no_value_not_a_crash():
    """Products of allowed powers: calculate raised OverflowError (a fraction past float's range) or
    ValueError (an int past Python's 4,300 digits) out of the system's advance, which stops the run
    (rollout.on_system_error's default; with drop, the episode)."""
    assert calculate("<calc>999998**64/3</calc>") is None
    assert calculate("<calc>" + "*".join(["999999**64"] * 12) + "</calc>") is None
    assert evaluate("999999**64 * 999999**64") == 999999**128  # 768 digits: still written
    assert calculate("<calc>999999**64 * 999999**64</calc>")[1] == str(999999**128)
    assert evaluate("999998**64 / 999998**63 / 3") == Fraction(999998, 3)  # large only on the way


def test_a_call_is_found_in_a_reply_and_written_as_the_tasks_write_answers():
    assert calculate("<calc>71 + 40</calc>") == ("71 + 40", "111")
    assert calculate("Sure. <calc> 7 / 2 =</calc> done") == ("7 / 2", "3.5")
    assert calculate("<calc>2^3 × 2") == ("2^3 × 2", "16")  # left open at the token limit; ^ and × read
    assert calculate("<calc></calc>") is None and calculate("The answer is 12.") is None
    assert calculate("<calc>" + "1+" * 150 + "1</calc>") is None  # longer than a calculator call
    assert number_text(Fraction(1, 3)) == "0.333333" and number_text(Fraction(-5)) == "-5"


def test_a_reply_without_a_call_types_its_first_arithmetic():
    """What a reader would type: the first run of numbers and operators, up to "=" or a word."""
    assert calculate("To calculate 9 - 10, we subtract") == ("9 - 10", "-1")
    assert calculate("5 - 6 = 3") == ("5 - 6", "-1")  # the left side, not the model's wrong result
    assert calculate("1. Add 5 to 6.\n2. 7 is 1 more") is None  # numbers without an operation
    assert calculate("-( 51 - 24 ) - 93 is it") == ("-( 51 - 24 ) - 93", "-120")
    assert calculate("20 -\n1") is None  # a run does not cross lines
