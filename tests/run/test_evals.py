"""Held-out evaluations during a run (masrl/run/evals.py): when `eval.every` asks for one. (Logging
them and the before/after report run in tests/test_train.py's runs.)"""

from __future__ import annotations

import pytest

from masrl.loading import load_config
from masrl.run.evals import eval_due


@pytest.mark.parametrize(
    "every, due",
    [(0, []), (2, [2, 4]), (3, [3]), (5, [])],  # 5 steps: the last step's evaluation is the final one
)
def test_an_evaluation_is_due_every_n_steps_before_the_last(every, due):
    config = load_config("single-arithmetic", ["model.name=tiny", f"eval.every={every}"])
    assert [step for step in range(0, 6) if eval_due(config.eval, step, steps=5)] == due
