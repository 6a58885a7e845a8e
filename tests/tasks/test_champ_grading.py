"""CHAMP's rule grader (masrl.tasks.champ_grading): hand-read summaries against reference answers."""

import pytest

from masrl.tasks.champ_grading import grade_summary

Q_STRINGS = "How many strings of length 6 over the digits 1, 2, 3 have adjacent digits differing by at most 1?"
Q_ODD = "In how many ways can you take an odd number of objects from n (distinct) objects?"
Q_MIN = "What is the smallest value of a/(b+c)+b/(a+c)+c/(a+b) for positive numbers a, b, c?"
Q_EQ = "Find all integer solutions to the equation 15x^2-7y^2=9."


@pytest.mark.parametrize(
    ("reference", "question", "summary", "expected"),
    [
        ("239", Q_STRINGS, "There are 239 strings of length 6 where adjacent digits differ by at most 1.", True),
        ("239", Q_STRINGS, "There are 29 valid strings of length 6 with adjacent digits differing by 1.", False),
        ("@@3/2@@", Q_MIN, "The smallest value is \\( \\frac{3}{2} \\), achieved when \\( a = b = c \\).", True),
        ("@@3/2@@", Q_MIN, "The smallest value of a/(b+c) + b/(a+c) + c/(a+b) is 3, when a = b = c.", False),
        ("@@2^(n-1)@@", Q_ODD, "The number of ways to take an odd number of objects is \\(2^{n-1}\\).", True),
        ("@@2^(n-1)@@", Q_ODD, "The number of ways is (n+1)/2 if n is odd, and n/2 if n is even.", False),
        ("@@x=6, y=5@@", "Solve x^3-y^3=xy+61.", "The only solution is \\(x = 6\\) and \\(y = 5\\).", True),
        ("@@5/14@@, or approximately 35.7%", "What is the probability?", "It is approximately 35.7143%.", True),
        ("No", "Is it possible?", "No, it is not possible to label the edges of a cube that way.", True),
        ("No", "Does it exist?", "Yes, a polyhedron exists with an odd number of faces.", False),
        ("No integer solutions", Q_EQ, "There are no integer solutions to the equation 15x^2 - 7y^2 = 9.", True),
        ("No integer solutions", Q_EQ, "The integer solutions are (x, y) = (3, 0) and (x, y) = (-3, 0).", False),
        ("Monotonically increasing", "Is a_n/b_n monotone?", "The sequence a_n/b_n is monotonically increasing.", None),
    ],
)
def test_grade_summary_rule(reference, question, summary, expected):
    assert grade_summary(reference, question, summary) is expected


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        ("The answer is 2 * 3.", False),  # a factor of a product is not a stated value
        ("The answer is 2 × 3.", False),
        ("The answer is 2^(3).", False),  # nor a number inside an exponent
        ("The answer is 2^(2*3).", False),
        ("The answer is 6/2.", True),  # the expression's value is
        ("It is 3 × 1 = 3.", True),
    ],
)
def test_an_operand_is_not_the_answer(summary, expected):
    assert grade_summary("3", "What is 1+2?", summary) is expected


@pytest.mark.parametrize(
    "summary",
    [
        "The answer is 9^(9^9).",  # exact evaluation would build 9^387420489
        "The answer is 10^10^10.",
        "The answer is (10^9)!.",
        "The answer is C(10^9, 5*10^8).",
        "The answer is x^(10^9).",  # cheap as a formula, not at the test point x = 3
        "The answer is 10^(10^n).",  # cheap as a formula, not at n = 10
        "The answer is 99999999!.",  # a function of a literal: computed while parsing, unless held
        "The answer is C(99999999, 49999999).",
        "The answer is " + "9" * 400 + ".5.",  # beyond any float
    ],
)
def test_an_answer_too_costly_to_evaluate_is_wrong_not_a_stall(summary):
    """What a model writes is hostile: an answer whose exact value has billions of digits would hold
    the process for minutes; the grader refuses to build it and the answer earns nothing."""
    assert not grade_summary("@@2^6@@", "What is 2 to the sixth?", summary)
    assert not grade_summary("@@2^(n-1)@@", Q_ODD, summary)
    assert not grade_summary("3", "What is 1+2?", summary)


def test_what_may_be_evaluated_exactly():
    import sympy

    from masrl.tasks.champ_grading import MAX_COMBINATORIAL, MAX_COMPOUND_EXPONENT, MAX_EXPONENT, _parse_plain

    assert _parse_plain(f"2^{MAX_EXPONENT}") == 2**MAX_EXPONENT and _parse_plain(f"2^{MAX_EXPONENT + 1}") is None
    assert _parse_plain(f"x^{MAX_EXPONENT}") is not None and _parse_plain(f"x^{MAX_EXPONENT + 1}") is None
    assert _parse_plain("2^(2*3)") == 64 and _parse_plain("sqrt(2)") == sympy.sqrt(2)
    assert _parse_plain("2^(n-1)") is not None and _parse_plain("C(10, 5)") == 252
    assert _parse_plain(f"(1+x)^{MAX_COMPOUND_EXPONENT}") is not None
    assert _parse_plain(f"(1+x)^{MAX_COMPOUND_EXPONENT + 1}") is None
    assert _parse_plain(f"{MAX_COMBINATORIAL}!") == sympy.factorial(MAX_COMBINATORIAL)
    assert _parse_plain(f"{MAX_COMBINATORIAL + 1}!") is None  # a function of a literal: held unevaluated to check
    assert _parse_plain("9^(9^9)") is None and _parse_plain("floor(9^99999999)") is None
    assert MAX_EXPONENT > 1958  # CHAMP's own answers hold x^1958
