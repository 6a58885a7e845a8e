"""Puppeteer's majority vote over the W paths' answers: the most common, ties to the first reached, a given sameness."""

from __future__ import annotations

import pytest

from masrl.systems.puppeteer.vote import majority_vote

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- majority vote
def test_majority_vote_takes_the_most_common_answer():
    assert majority_vote(["3", "4", "4"]) == "4"
    assert majority_vote([None, "5", None]) == "5"
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None


def test_majority_vote_tie_goes_to_the_answer_reached_first():
    assert majority_vote(["3", "4"]) == "3"
    assert majority_vote(["4", "3", "3", "4"]) == "4"
    assert majority_vote([None, "9", "8", "8", "9"]) == "9"


def test_majority_vote_uses_the_given_sameness():
    same = lambda a, b: float(a) == float(b)  # noqa: E731
    assert majority_vote(["2", "3", "3.0", "2.00", "2"], same) == "2"  # 2 x3 against 3 x2
