"""Task families: determinism, split disjointness, difficulty, extraction, grading, rewards."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from masrl.config import ConfigError, TaskConfig
from masrl.pools.simulated import ItemIndex
from masrl.registry import build_task
from masrl.tasks import BUILTIN, Grade, Task, format_reward, grade, held_out, reward_terms
from masrl.tasks.jsonl import MAX_LINE_BYTES, JsonlTask
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


def test_grade():
    task = MathTask()
    item = TaskItem("i", "q", "12")
    assert grade(task, item, "so <answer>12</answer>") == Grade(correct=True, answer="12", formatted=True)
    assert grade(task, item, "I think 3 + 4 = 7") == Grade(correct=False, answer="7", formatted=True)
    assert grade(task, item, "no idea") == Grade(correct=False, answer=None, formatted=False)


# ---- JsonlTask ----


def _write(tmp_path, rows, name="data.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_explicit_splits_ids_and_grading(tmp_path):
    path = _write(
        tmp_path,
        [
            {"question": "1+1?", "answer": "2", "split": "train", "id": "a"},
            {"question": "2+2?", "answer": 4, "split": "train"},
            "",
            {"question": "3+3?", "answer": "6", "split": "eval", "source": "hand"},
        ],
    )
    task = JsonlTask(path, seed=0)
    assert task.name == "data"
    assert {i.id for i in task.items("train", 0, 2)} == {"a", "data/2"}
    [item] = task.items("eval", 0, 5)  # eval does not cycle
    assert (item.id, item.answer, item.metadata) == ("data/4", "6", {"line": 4, "source": "hand"})
    assert task.score(item, "6.0") == 1.0 and task.score(item, "7") == 0.0
    assert grade(task, item, "<answer>6</answer>").correct


def test_jsonl_train_cycles_in_a_seeded_order(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i), "split": "train"} for i in range(5)]
    path = _write(tmp_path, [*rows, {"question": "held out", "answer": "0", "split": "eval"}])
    task = JsonlTask(path, seed=0)
    first = task.items("train", 0, 5)
    assert sorted(i.answer for i in first) == ["0", "1", "2", "3", "4"]
    assert task.items("train", 5, 10) == first + first
    assert task.items("train", 3, 4) == (first + first)[3:7]
    assert JsonlTask(path, seed=0).items("train", 0, 5) == first
    orders = {tuple(i.answer for i in JsonlTask(path, seed=s).items("train", 0, 5)) for s in range(5)}
    assert len(orders) > 1


def test_jsonl_hash_split(tmp_path):
    rows = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(400)]
    task = JsonlTask(_write(tmp_path, rows), eval_fraction=0.25)
    evals = task.items("eval", 0, 1000)
    train = task.items("train", 0, len(task.train))
    assert len(evals) + len(train) == 400
    assert 60 < len(evals) < 140
    assert all(held_out(i.question, 0.25) for i in evals)
    assert not {i.question for i in evals} & {i.question for i in train}


def test_jsonl_question_in_both_splits_is_dropped_from_train(tmp_path):
    rows = [
        {"question": "1+1?", "answer": "2", "split": "train"},
        {"question": "2+2?", "answer": "4", "split": "train"},
        {"question": "1+1?", "answer": "2", "split": "eval"},
    ]
    task = JsonlTask(_write(tmp_path, rows))
    assert [i.question for i in task.items("train", 0, 2)] == ["2+2?", "2+2?"]
    assert [i.question for i in task.items("eval", 0, 2)] == ["1+1?"]


@pytest.mark.parametrize(
    "bad,message",
    [
        ('{"question": "q", "answer": ', r"data\.jsonl:3: not valid JSON"),
        ('{"question": "q"}', r"data\.jsonl:3: missing required field 'answer'"),
        ('["q", "a"]', r"data\.jsonl:3: expected a JSON object"),
        ('{"question": "q", "answer": null}', r"data\.jsonl:3: field 'answer' must be"),
        ('{"question": "q", "answer": "1", "split": "test"}', r"data\.jsonl:3: split must be"),
        ('{"question": "q", "answer": "1", "id": "x"}', r"data\.jsonl:3: duplicate id 'x'"),
    ],
)
def test_jsonl_malformed_line_names_its_number(tmp_path, bad, message):
    rows = [{"question": "a", "answer": "1", "id": "x"}, {"question": "b", "answer": "2"}, bad]
    with pytest.raises(ValueError, match=message):
        JsonlTask(_write(tmp_path, rows))


def test_jsonl_without_train_or_held_out_items_is_refused_when_read(tmp_path):
    """Before a run starts: a file without held-out items used to fail at the final evaluation, after training."""
    with pytest.raises(ValueError, match=r"data\.jsonl: no train items: every line is in the eval split"):
        JsonlTask(_write(tmp_path, [{"question": "q", "answer": "1", "split": "eval"}]))
    with pytest.raises(ValueError, match=r"data\.jsonl: no held-out items: .* raise task\.eval_fraction \(now 0\.1\)"):
        JsonlTask(_write(tmp_path, [{"question": "q", "answer": "1", "split": "train"}]))


def test_jsonl_line_not_utf8_or_too_long_is_named(tmp_path):
    path = _write(tmp_path, [{"question": "a", "answer": "1"}, {"question": "b", "answer": "2", "split": "eval"}])
    with path.open("ab") as f:
        f.write(b'{"question": "caf\xe9", "answer": "3"}\n')  # Latin-1, not UTF-8
    with pytest.raises(ValueError, match=r"data\.jsonl:3: not UTF-8 text \(byte 17 of the line is 0xe9\)"):
        JsonlTask(path)
    path.write_text(json.dumps({"question": "x" * MAX_LINE_BYTES, "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match=rf"data\.jsonl:1: longer than {MAX_LINE_BYTES} bytes"):
        JsonlTask(path)


# ---- rewards ----


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer>7</answer>", 1.0),
        ("thinking...\n<answer> 7 </answer>\n  ", 1.0),
        ("<answer>7</answer> and more", 0.5),
        ("<answer></answer>", 0.5),
        ("<answer>  \n</answer>", 0.5),
        ("<answer>1</answer><answer>2</answer>", 0.5),
        ("<answer>1</answer> <answer>", 0.5),
        ("<answer>7", 0.0),
        ("</answer>7<answer>", 0.0),
        ("the answer is 7", 0.0),
        ("", 0.0),
    ],
)
def test_format_reward(text, expected):
    assert format_reward(text) == expected


def test_format_reward_other_tag():
    assert format_reward("<final>3</final>", tag="final") == 1.0
    assert format_reward("<answer>3</answer>", tag="final") == 0.0


def test_reward_terms():
    task = MathTask()
    item = TaskItem("i", "q", "12")
    assert reward_terms(task, item, "<answer>12</answer>") == {"correct": 1.0, "format": 1.0}
    assert reward_terms(task, item, "it is 12") == {"correct": 1.0, "format": 0.0}
    assert reward_terms(task, item, "<answer>11</answer> ok") == {"correct": 0.0, "format": 0.5}


# ---- registry ----


def test_build_task(tmp_path):
    assert set(BUILTIN) == {"math", "jsonl", "champ", "search", "sudoku", "sokoban", "planpath", "math_turns", "code"}
    task = build_task(TaskConfig(kind="math", dataset="chain_sum", seed=2, difficulty="easy"))
    assert isinstance(task, MathTask) and isinstance(task, Task)
    assert task.items("train", 0, 3) == MathTask("chain_sum", seed=2, difficulty="easy").items("train", 0, 3)
    path = _write(tmp_path, [{"question": "q", "answer": "1"}, {"question": "e", "answer": "2", "split": "eval"}])
    assert isinstance(build_task(TaskConfig(kind="jsonl", path=str(path))), JsonlTask)
    with pytest.raises(ConfigError, match="task.kind: unknown task family 'gsm8k'; available: champ, code, jsonl"):
        build_task(TaskConfig(kind="gsm8k"))


def test_an_unknown_math_dataset_is_a_config_error_listing_every_name():
    names = reasoning_gym_datasets()
    assert len(names) == 106 and set(DIFFICULTY) <= set(names)  # reasoning-gym 0.1.25
    with pytest.raises(ConfigError) as refused:
        build_task(TaskConfig(kind="math", dataset="basic_arithmetics"))
    assert str(refused.value) == ("task.dataset 'basic_arithmetics' is not a reasoning-gym dataset. Levels of their "
                                  "own: basic_arithmetic, chain_sum, gsm_symbolic; all of reasoning-gym's (at their "
                                  f"defaults): {', '.join(names)}")  # fmt: skip


def test_jsonl_items_are_known_to_a_simulated_pool(tmp_path):
    """Both splits are `known_items`: the default config's simulated agents find a user's questions."""
    rows = [
        {"question": "What is 1+1?", "answer": "2", "split": "train"},
        {"question": "What is 2+2?", "answer": "4", "split": "eval"},
    ]
    task = JsonlTask(_write(tmp_path, rows))
    assert [i.answer for i in task.known_items()] == ["2", "4"] and task.known_count() == 2
    index = ItemIndex(task)
    assert index.find("Solve this. What is 2+2? Answer in <answer></answer>.").id == "data/2"
    assert index.find("What is 1+1?").answer == "2"


def test_jsonl_file_without_questions_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"data\.jsonl: no question/answer lines"):
        JsonlTask(_write(tmp_path, ["", ""]))
