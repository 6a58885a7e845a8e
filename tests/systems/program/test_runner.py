"""Reading an agent program's result (masrl/systems/program/runner.py): its last non-empty stdout line
is a JSON object with an `answer` and maybe a finite `reward`; anything else is a `no_json` fault."""

from __future__ import annotations

import pytest

from masrl.systems.program.runner import parse_last_line


@pytest.mark.parametrize(
    "stdout, parsed",
    [
        (b'thinking...\n{"answer": "19", "reward": 0.5}\n\n', ("19", 0.5, None)),
        (b'{"answer": 42}', ("42", None, None)),  # a number is taken as text, the reward is optional
        (b'{"answer": null, "reward": 1}', ("", 1.0, None)),
        (b"", (None, None, "no_json: the program printed nothing")),
        (b"done", (None, None, "no_json: last line is not JSON: 'done'")),
        (b'{"reward": 1}', (None, None, "no_json: last line has no 'answer': '{\"reward\": 1}'")),
        (b'{"answer": [1, 2]}', (None, None, "no_json: 'answer' must be a string or a number")),
        (b'{"answer": "x", "reward": true}', (None, None, "no_json: 'reward' must be a finite number, got True")),
        (b'{"answer": "x", "reward": NaN}', (None, None, "no_json: 'reward' must be a finite number, got nan")),
    ],
)
def test_the_last_line_gives_answer_reward_or_the_fault(stdout, parsed):
    assert parse_last_line(stdout) == parsed
