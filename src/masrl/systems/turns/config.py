"""The turn-based agents' `system` section (AT-GRPO (arXiv:2510.11062), section 3 and appendix A)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from masrl.systems.api import SystemSection


class TurnsConfig(SystemSection):
    agents: list[str] = Field(
        default_factory=list, description="roles in acting order; empty = the task's roles (tool, planner / "
        "tool, reasoner / coder, tester); one role = the single-agent baseline"
    )
    policies: Literal["shared", "per_role"] = Field(
        "shared", description="shared: one LoRA adapter plays every role; per_role: one adapter per role, one base "
        "model (separate base models: model.bases)"
    )
    max_turns: int = Field(2, ge=1, description="T: turns per episode (paper: 4); every agent acts once per turn")
    mix: Literal["lambda", "alpha"] = Field(
        "lambda", description="lambda: lam*team + (1-lam)*mask*local (appendix A.1); alpha: alpha*team + local (eq. 4)"
    )
    alpha: float = Field(1.0, ge=0.0, description="mix alpha: weight of the team reward (paper: 1)")
    lam: float | None = Field(
        None, ge=0.0, le=1.0, description="mix lambda; null = the task's appendix-A.1 value (math .7, sudoku .6, "
        "plan-path .5, sokoban .4, code .5)"
    )
    answer_role: str | None = Field(
        None, description="math_turns only: the role whose answer is the episode's (null: the reasoner's; tool for "
        "one agent holding the Python tool, turns-math-single-tool)"
    )
    code_roles: list[str] = Field(
        default_factory=lambda: ["tool"], description="roles whose ```python reply is run in the sandbox; its "
        "printed output is their answer"
    )
    timeout: float = Field(5.0, gt=0.0, description="sandbox wall-clock and CPU seconds per program")
    history: int = Field(6, ge=0, description="history lines (earlier agents' outputs) shown in each observation")
    prompts: dict[str, str] = Field(default_factory=dict, description="role -> system prompt override")
    prefill: dict[str, str] = Field(
        default_factory=dict, description="role -> text its reply starts with (e.g. '#### [' for a planner); "
        "part of the prompt, and of what the task parses"
    )
