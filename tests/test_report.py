"""The report (masrl/report.py): the training curve as a Markdown table, by hand (the page itself is
`masrl view`'s, tested in tests/test_view.py)."""

from __future__ import annotations

from masrl.report import curve_table


def train(step, reward):
    return {"kind": "train", "step": step, "reward": reward, "reward/correct": reward / 2, "response_tokens_mean": 10.0}


ROWS = [{"kind": "eval", "step": 0, "eval/accuracy": 0.25}, train(1, 0.5), train(2, 0.6), train(3, 0.7),
        {"kind": "eval", "step": 3, "eval/accuracy": 0.5}]  # fmt: skip


def test_curve_table_has_a_row_per_step_the_evaluations_and_the_one_before():
    assert curve_table(ROWS).splitlines() == [
        "| step | reward | sampled accuracy | tokens/call | held-out accuracy |",
        "|---|---|---|---|---|",
        "| 0 (before) | | | | 0.250 |",
        "| 1 | 0.500 | 0.250 | 10.0 |  |",
        "| 2 | 0.600 | 0.300 | 10.0 |  |",
        "| 3 | 0.700 | 0.350 | 10.0 | 0.500 |",
    ]


def test_every_nth_step_keeps_the_last_one():
    steps = [line.split(" | ")[0] for line in curve_table(ROWS, every=2).splitlines()[2:]]
    assert steps == ["| 0 (before)", "| 2", "| 3"]  # step 1 and 3 are odd, but the last step always shows
