"""The reasoning-gym math task: determinism, split disjointness, difficulty levels, answer extraction, equivalence grading, config mistakes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import pytest

from masrl.config import ConfigError, TaskConfig
from masrl.registry import build_task
from masrl.tasks import held_out
from masrl.tasks.math import DIFFICULTY, MathTask, _verify, extract_math_answer, math_equal, reasoning_gym_datasets
from masrl.types import TaskItem


# ---- MathTask: determinism and splits ----


def test_same_seed_same_items_and_any_start_agrees():
    a = MathTask("basic_arithmetic", seed=3, difficulty="medium")
    b = MathTask("basic_arithmetic", seed=3, difficulty="medium")
    assert b.items("train", 40, 5) == a.items("train", 0, 45)[40:]  # b never saw items 0..39
    assert a.items("eval", 0, 20) == b.items("eval", 0, 20)
    assert a.items("train", 7, 1)[0].id == "basic_arithmetic/train/7"
    assert a.items("eval", 2, 1)[0].id == "basic_arithmetic/eval/2"


def test_pinned_first_item():
    # Pins reasoning-gym 0.1.25 plus our seed derivation: a change here silently
    # changes every training run's data.
    item = MathTask("basic_arithmetic", seed=1, difficulty="easy").items("train", 0, 1)[0]
    assert (item.question, item.answer) == ("Calculate 26 + 84.", "110")


def test_different_index_or_seed_gives_different_items():
    items = MathTask("gsm_symbolic", seed=0).items("train", 0, 20)
    assert len({i.question for i in items}) == 20
    other = MathTask("gsm_symbolic", seed=1).items("train", 0, 20)
    assert [i.question for i in items] != [i.question for i in other]


@pytest.mark.parametrize(
    "dataset,difficulty",
    [("chain_sum", "easy"), ("basic_arithmetic", "easy"), ("basic_arithmetic", "hard"), ("gsm_symbolic", "medium")],
)
def test_train_and_eval_disjoint_over_500(dataset, difficulty):
    task = MathTask(dataset, seed=0, difficulty=difficulty)
    train = {i.question for i in task.items("train", 0, 500)}
    evals = {i.question for i in task.items("eval", 0, 500)}
    assert not train & evals
    assert all(held_out(q, 0.1) for q in evals) and not any(held_out(q, 0.1) for q in train)


def test_disjointness_is_not_luck():
    # Easy chain_sum has a small question space: two independently seeded
    # streams of 500 share about a hundred questions, so seeds alone would leak.
    a = {i.question for i in MathTask("chain_sum", seed=0, difficulty="easy").items("train", 0, 500)}
    b = {i.question for i in MathTask("chain_sum", seed=1, difficulty="easy").items("train", 0, 500)}
    assert len(a & b) > 50


# ---- MathTask: difficulty ----


def test_easy_basic_arithmetic_is_two_terms_plus_minus():
    items = MathTask("basic_arithmetic", seed=0, difficulty="easy").items("train", 0, 200)
    assert all(i.metadata["num_terms"] == 2 for i in items)
    for item in items:
        expression = item.metadata["expression"]
        assert not set("*/()") & set(expression)
        assert eval(expression) == int(item.answer)
        assert all(len(tok) <= 2 or tok == "100" for tok in expression.split() if tok.isdigit())


def test_medium_basic_arithmetic_answers_respect_precedence():
    items = MathTask("basic_arithmetic", seed=0, difficulty="medium").items("train", 0, 200)
    assert {i.metadata["num_terms"] for i in items} == {2, 3}
    assert any("*" in i.metadata["expression"] for i in items)
    assert not any("/" in i.metadata["expression"] for i in items)
    assert all(eval(i.metadata["expression"]) == int(i.answer) for i in items)


def test_hard_is_reasoning_gym_defaults():
    items = MathTask("basic_arithmetic", seed=0, difficulty="hard").items("train", 0, 200)
    assert max(i.metadata["num_terms"] for i in items) > 3
    assert any("/" in i.metadata["expression"] for i in items)


def test_chain_sum_levels():
    easy = MathTask("chain_sum", seed=0, difficulty="easy").items("train", 0, 100)
    hard = MathTask("chain_sum", seed=0, difficulty="hard").items("train", 0, 100)
    assert {i.metadata["num_terms"] for i in easy} == {2}
    assert max(i.metadata["num_terms"] for i in hard) > 3


def test_raw_config_and_unmapped_dataset():
    task = MathTask("chain_sum", difficulty="hard", config={"min_terms": 4, "max_terms": 4})
    assert {i.metadata["num_terms"] for i in task.items("train", 0, 20)} == {4}
    # gcd has no mapping: every level is reasoning-gym's defaults.
    assert MathTask("gcd", difficulty="easy").items("train", 0, 5) == MathTask("gcd", difficulty="hard").items(
        "train", 0, 5
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"difficulty": "extreme"}, "difficulty"),
        ({"dataset": "no_such_dataset"}, "no_such_dataset"),
        ({"config": {"min_terms": 0}}, "min_terms"),
        ({"config": {"nonsense": 1}}, "nonsense"),
        ({"config": {"seed": 1}}, "seed"),
    ],
)
def test_bad_math_task_config_fails_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MathTask(**kwargs)


def test_bad_split():
    with pytest.raises(ValueError, match="split"):
        MathTask().items("test", 0, 1)


# ---- answer extraction ----


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer>42</answer>", "42"),
        ("<answer>1</answer> no, wait: <answer> 2 </answer>", None),  # two answers: a hedge
        ("<answer>2</answer> again: <answer> 2 </answer>", "2"),  # the same answer twice
        ("<answer>\\boxed{5}</answer>", "5"),
        ("<answer>$-3$.</answer>", "-3"),
        ("<answer> </answer> the answer is 3", "3"),  # empty tag: next rule
        ("so \\boxed{\\frac{1}{2}} is it", "\\frac{1}{2}"),
        ("\\boxed{3} or rather \\boxed{4}", None),  # a hedge
        ("<think>it is 5</think>", None),  # stated only in the reasoning
        ("<think>maybe 5</think> so 6", "6"),
        ("cut off \\boxed{3", "3"),  # unclosed box: last number
        ("Answer: 17", "17"),
        ("The answer is $-3$.", "-3"),
        ("**Answer:** 12\nbecause 3 * 4", "12"),
        ("Final answer:\n\n9", "9"),
        ("I think 3 + 4 = 7", "7"),
        ("in all 1,234 apples", "1,234"),
        ("half of it: 1/2", "1/2"),
        ("x is −5", "−5"),
        ("no idea", None),
        ("", None),
        ("The answer is", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_math_answer(text) == expected
    assert MathTask().extract_answer(text) == expected


# ---- scoring ----


@pytest.mark.parametrize(
    "gold,answer",
    [
        ("7", "7"),
        ("7", "7.0"),  # exact rational path
        ("7", "14/2"),
        ("1000", "1,000"),
        ("100", "1e2"),  # math_verify alone reads "1e2" as 1
        ("-4", "−4"),  # U+2212; math_verify alone parses it as nothing
        ("0.5", "\\frac{1}{2}"),  # math_verify path
        ("7", "x = 7"),
        ("20", "$20$"),
        ("1/3", "0.333333"),  # math_verify rounds to 6 places
    ],
)
def test_equivalent_answers_score_one(gold, answer):
    assert math_equal(gold, answer)
    assert MathTask().score(TaskItem("i", "q", gold), answer) == 1.0


@pytest.mark.parametrize(
    "gold,answer", [("7", "8"), ("-61", "61"), ("3", "3.0000001"), ("7", "seven"), ("7", ""), ("12", "1/2")]
)
def test_wrong_answers_score_zero(gold, answer):
    assert MathTask().score(TaskItem("i", "q", gold), answer) == 0.0


def test_what_math_verify_does_alone():
    # Why math_equal normalises before calling it.
    assert _verify("-4", "−4") is False
    assert _verify("100", "1e2") is False
    assert _verify("0.5", "1/2") is True


def test_scoring_off_the_main_thread():
    # math_verify raises in a worker thread if given a timeout; ours must not.
    task = MathTask()
    item = TaskItem("i", "q", "0.5")
    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(lambda a: task.score(item, a), ["\\frac{1}{2}", "\\frac{1}{3}", "1/2"]))
    assert scores == [1.0, 0.0, 1.0]


def test_overlong_answer_is_wrong_not_slow():
    assert MathTask().score(TaskItem("i", "q", "7"), "(" * 2000 + "7") == 0.0


def test_a_huge_exponent_earns_nothing_and_builds_no_huge_number(monkeypatch):
    """Fraction("1e99999999") computes 10^99999999 exactly (minutes holding the GIL, measured: over 100 s
    here), so an answer like it would stall every episode of the process. Every reader of a model's
    number refuses it before building anything; an exponent up to MAX_DECIMAL_EXPONENT still reads."""
    import masrl.tasks.math as math_task
    from masrl.systems.chain.system import plain_number
    from masrl.tasks.mathturn import num_eq

    built = []

    def recording(text, *rest):
        built.append(text)
        return Fraction(text, *rest)

    monkeypatch.setattr(math_task, "Fraction", recording)
    for answer in ("1e99999999", "1.5e-99999999", "7E+1_000_000", "<answer>1e99999999</answer>"):
        assert MathTask().score(TaskItem("i", "q", "7"), answer) == 0.0
        assert math_task.fraction(answer) is None and plain_number(answer) is None
        assert not num_eq(answer, "7")
    assert set(built) == {"7"}  # the gold alone: no answer became a Fraction
    assert math_task.fraction("1e1000") == 10**1000 and math_task.fraction("1e1001") is None
    assert math_equal("7000", "7e3") and math_equal("0.007", "7e-3")
    assert not num_eq("1e999", "7")  # a number, beyond any float: wrong, not an OverflowError


def test_an_unknown_math_dataset_is_a_config_error_listing_every_name():
    names = reasoning_gym_datasets()
    assert len(names) == 106 and set(DIFFICULTY) <= set(names)  # reasoning-gym 0.1.25
    with pytest.raises(ConfigError) as refused:
        build_task(TaskConfig(kind="math", dataset="basic_arithmetics"))
    assert str(refused.value) == ("task.dataset 'basic_arithmetics' is not a reasoning-gym dataset. Levels of their "
                                  "own: basic_arithmetic, chain_sum, gsm_symbolic; all of reasoning-gym's (at their "
                                  f"defaults): {', '.join(names)}")  # fmt: skip
