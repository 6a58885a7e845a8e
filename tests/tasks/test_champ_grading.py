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
