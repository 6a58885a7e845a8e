"""Reading an agent program's result (masrl/systems/program/runner.py): its last non-empty stdout line
is a JSON object with an `answer`, maybe a finite `reward` and `rewards` by role or call; anything else
in `answer` or `reward` is a `no_json` fault, and bad `rewards` are the program's mistake (BadRewards)."""

from __future__ import annotations

import pytest

from masrl.systems.program.runner import BadRewards, parse_last_line


@pytest.mark.parametrize(
    "stdout, parsed",
    [
        (b'thinking...\n{"answer": "19", "reward": 0.5}\n\n', ("19", 0.5, None, {})),
        (b'{"answer": 42, "rewards": {"solver": 1, "chatcmpl-1": -0.5}}', ("42", None, None, {"solver": 1.0,
                                                                                             "chatcmpl-1": -0.5})),  # fmt: skip
        (b'{"answer": null, "reward": 1}', ("", 1.0, None, {})),
        (b"", (None, None, "no_json: the program printed nothing", {})),
        (b"done", (None, None, "no_json: last line is not JSON: 'done'", {})),
        (b'{"reward": 1}', (None, None, "no_json: last line has no 'answer': '{\"reward\": 1}'", {})),
        (b'{"answer": [1, 2]}', (None, None, "no_json: 'answer' must be a string or a number", {})),
        (b'{"answer": "x", "reward": true}', (None, None, "no_json: 'reward' must be a finite number, got True", {})),
        (b'{"answer": "x", "reward": NaN}', (None, None, "no_json: 'reward' must be a finite number, got nan", {})),
        pytest.param(b'{"answer": "x", "reward": 1' + b"0" * 400 + b"}",
                     (None, None, f"no_json: 'reward' must be a finite number, got {10**400}", {}), id="past-float"),
        (b"[" * 4000, (None, None, f"no_json: last line is not JSON: {'[' * 120!r}", {})),  # RecursionError, raised
        (b'{"answer": ' + b"9" * 5000 + b"}", (None, None, "no_json: last line is not JSON: '{\"answer\": "
                                                + "9" * 109 + "'", {})),  # past int's 4,300 digits  # fmt: skip
    ],
)
def test_the_last_line_gives_answer_reward_rewards_or_the_fault(stdout, parsed):
    assert parse_last_line(stdout) == parsed


@pytest.mark.parametrize("line", [b'{"answer": "x", "rewards": [1]}', b'{"answer": "x", "rewards": {"solver": "high"}}',
                                  pytest.param(b'{"answer": "x", "rewards": {"solver": 1' + b"0" * 400 + b"}}", id="past-float")])
def test_rewards_that_are_not_an_object_of_finite_numbers_are_the_programs_mistake(line):
    with pytest.raises(BadRewards):
        parse_last_line(line)
