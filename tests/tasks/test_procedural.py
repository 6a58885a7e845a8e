"""Seeded procedural splits (masrl/tasks/procedural.py): item i of a split is its i-th kept instance,
drawn from its own stream, the splits disjoint by question; and the games built on them keep that."""

from __future__ import annotations

from random import Random

import pytest

from masrl.tasks import Task, TurnTask
from masrl.tasks.base import held_out
from masrl.tasks.planpath import PlanPathTask
from masrl.tasks.procedural import MAX_REJECTED, Instance, ProceduralSplits
from masrl.tasks.sokoban import SokobanTask
from masrl.tasks.sudoku import SudokuTask


def numbers(rng: Random) -> Instance:
    n = rng.randint(0, 10**6)
    return Instance(f"what is {n} + 1?", str(n + 1), {"n": n})


def test_item_i_is_the_ith_kept_draw_of_its_own_stream():
    splits = ProceduralSplits("add", numbers, seed=7, eval_fraction=0.5)
    held = splits.items("eval", 0, 5)
    expected, j = [], 0  # by hand: draw j of the eval stream is Random("7/eval/j"), kept when held out
    while len(expected) < 5:
        inst = numbers(Random(f"7/eval/{j}"))
        if held_out(inst.question, 0.5):
            expected.append((f"add/eval/{len(expected)}", inst.question, inst.answer, inst.metadata))
        j += 1
    assert [(i.id, i.question, i.answer, i.metadata) for i in held] == expected
    # asking later items first draws nothing differently: another object, same seed, start at 3
    assert ProceduralSplits("add", numbers, seed=7, eval_fraction=0.5).items("eval", 3, 2) == held[3:]


def test_the_splits_are_disjoint_and_the_seed_matters():
    splits = ProceduralSplits("add", numbers, seed=0, eval_fraction=0.2)
    train, held = splits.items("train", 0, 200), splits.items("eval", 0, 50)
    assert not {i.question for i in train} & {i.question for i in held}
    other = ProceduralSplits("add", numbers, seed=1, eval_fraction=0.2).items("train", 0, 10)
    assert [i.question for i in other] != [i.question for i in train[:10]]


def test_bad_fractions_splits_and_a_space_too_small_are_refused():
    with pytest.raises(ValueError, match="eval_fraction"):
        ProceduralSplits("add", numbers, seed=0, eval_fraction=1.0)
    with pytest.raises(ValueError, match="split"):
        ProceduralSplits("add", numbers, seed=0, eval_fraction=0.5).items("test", 0, 1)
    one = Instance("the only question", "1")
    split = "train" if held_out(one.question, 0.5) else "eval"  # the split its one question never goes to
    with pytest.raises(RuntimeError, match=f"{MAX_REJECTED} draws in a row held none"):
        ProceduralSplits("one", lambda rng: one, seed=0, eval_fraction=0.5).items(split, 0, 1)


@pytest.mark.parametrize("cls", [SudokuTask, SokobanTask, PlanPathTask])
def test_generated_items_are_seeded_disjoint_and_solved_by_their_answer(cls):
    a, b = cls(seed=3), cls(seed=3)
    train = a.items("train", 0, 120)
    assert b.items("train", 100, 20) == train[100:]  # b never drew 0..99: item i does not depend on history
    assert a.items("eval", 0, 10) == b.items("eval", 0, 10)
    evals = a.items("eval", 0, 60)
    assert not {i.question for i in train} & {i.question for i in evals}
    assert len({i.question for i in train}) >= 115  # a varied space, not a handful repeated
    assert [i.question for i in cls(seed=4).items("train", 0, 10)] != [i.question for i in train[:10]]
    assert isinstance(a, Task) and isinstance(a, TurnTask)
    for item in train[:40] + evals[:20]:
        assert a.score(item, a.extract_answer(item.answer)) == 1.0
        assert not a.solved(a.reset(item))  # never already solved
    assert a.extract_answer("I am not sure.") is None
