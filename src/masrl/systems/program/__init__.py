"""`system.kind: program`: train an agent program people already wrote, through the training gateway.

The program knows nothing of masrl: it reads the task (JSON) on stdin, talks to its models
through `OPENAI_BASE_URL` / `OPENAI_API_KEY` with any OpenAI client (the `openai` package,
LangGraph, the OpenAI Agents SDK, ...), and prints `{"answer": ..., "reward": ...}` as its last
line. The config names which of its model names are trained policies (`trained`) and which are
frozen agents (`frozen`, any pool backend). Credit, groups and updates are the engine's, on the
call trees the gateway recorded (docs/program.md).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from masrl.systems.api import Built, ConfigError, Serving, SystemSpec, build_agent
from masrl.systems.program.config import ProgramConfig
from masrl.systems.program.system import ProgramSystem, answer

RULES = ("parallel", "fork_on_first", "per_turn_greedy", "full_tree")


def interpreter(command: list[str]) -> list[str]:
    """The command, with `python` or `python3` as its program meaning the interpreter masrl runs on.

    So an example's `python solver_checker.py` finds masrl's own environment (the `openai` client
    and the rest) whether or not that environment is activated: `.venv/bin/masrl train` from a
    shell without the venv on PATH would otherwise start whichever Python comes first there.
    Name a path (`/opt/env/bin/python`) to run a program under another interpreter.
    """
    if command[0] in ("python", "python3"):
        return [sys.executable, *command[1:]]
    return list(command)


def script(command: list[str]) -> str | None:
    """The script a Python interpreter is given (`python -u debate.py` -> debate.py); None for `-m`, `-c` or
    another program."""
    if not Path(command[0]).name.startswith("python"):
        return None
    for arg in command[1:]:
        if arg in ("-m", "-c"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def check_found(command: list[str], cwd: str) -> None:
    """One line naming the path when the program or its script is missing (at train, eval and serve start)."""
    program = command[0]
    if not Path(cwd).is_dir():
        raise ConfigError(f"system.cwd: no directory {cwd} (the program runs there)")
    if shutil.which(program) is None and not (Path(cwd) / program).is_file():
        raise ConfigError(f"system.command: no program {Path(cwd) / program} (nor {program!r} on PATH)")
    name = script(command)
    if name is not None and not (Path(cwd) / name).is_file():
        raise ConfigError(f"system.command: no program {Path(cwd) / name} (relative paths are from system.cwd)")


def build(config, task) -> Built:
    c = config.system.model_copy(update={"command": interpreter(config.system.command)})
    check_found(c.command, c.cwd)
    frozen = {a.name: build_agent(a, task, config.run.seed) for a in c.frozen}
    return Built(ProgramSystem(c, task), dict(c.trained), frozen=frozen)


def check(config) -> None:
    if config.trainer.processes > 1:
        raise ValueError("system.kind 'program' runs its programs in one process (trainer.processes=1)")


SYSTEM = SystemSpec(
    kind="program",
    config=ProgramConfig,
    build=build,
    check=check,
    rules=RULES,
    serving=Serving(answer=answer),
    summary="an agent program (any OpenAI client) trained through the gateway; trees by replay",
)
