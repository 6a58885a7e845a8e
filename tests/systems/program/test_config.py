"""The program system's `system` section (masrl/systems/program/config.py): a command string is split
like a shell's, and the names it trains and leaves frozen are checked."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from masrl.systems.program.config import ProgramConfig


def test_a_command_string_is_split_like_a_shell_would():
    config = ProgramConfig(command="python 'my solver.py' --fast", trained={"solver": "solver"})
    assert config.command == ["python", "my solver.py", "--fast"]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"command": "", "trained": {"m": "p"}}, "system.command is empty"),
        ({"command": "run", "trained": {}}, "system.trained is empty"),
        ({"command": "run", "trained": {"m": "p"}, "frozen": [{"name": "m", "backend": "simulated"}]},
         "model names both trained and frozen: ['m']"),
        ({"command": "run", "trained": {"m": "not-a-name"}}, "policy name 'not-a-name' in system.trained"),
    ],
)
def test_names_are_checked(fields, message):
    with pytest.raises(ValidationError) as info:
        ProgramConfig(**fields)
    assert message in str(info.value)
