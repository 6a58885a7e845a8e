"""The `system` section of `system.kind: program`: the command, its agents, its limits."""

from __future__ import annotations

import os
import shlex

from pydantic import Field, field_validator, model_validator

from masrl.systems.api import PoolAgentConfig, SystemSection


class ProgramConfig(SystemSection):
    command: list[str] = Field(description="the program and its arguments (a string is split like a shell would)")
    trained: dict[str, str] = Field(
        description="model name the program asks for -> the trainable policy that answers it "
        "(several names may share one policy)"
    )
    frozen: list[PoolAgentConfig] = Field(
        default_factory=list, description="agents that are not trained, by the model name the program uses (`name`)"
    )
    cwd: str | None = Field(
        None, description="working directory of the program, and what a relative path in `command` is relative "
        "to (default: the directory masrl is started in); saved as an absolute path, so a run serves from anywhere"
    )
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables of the program")
    timeout: float = Field(120.0, gt=0, description="seconds an episode may run before it is killed (failed)")
    concurrency: int = Field(
        32, ge=1, description="how many programs run at once; their calls share generation batches, so fewer runs "
        "at once than a step has (trainer.batch_size x the group size) or an evaluation batch means smaller batches; "
        "each is a process (about 60 MB with the openai client)",
    )
    max_output_bytes: int = Field(1 << 20, ge=1024, description="stdout beyond this kills the program (failed)")
    max_calls: int = Field(64, ge=1, description="model calls an episode may make; the next one fails it")
    correct_weight: float = Field(1.0, description="weight of the checker's score of the answer in the final reward")
    program_reward_weight: float = Field(
        1.0, description="weight of the reward the program reports itself (its last line's `reward`)"
    )
    local_weight: float = Field(
        1.0, description="weight of the rewards the program reports per role or per call (its last line's "
        "`rewards`) in each named call's own reward: AT-GRPO's local reward beside the team's (docs/program.md)"
    )
    per_call_rewards: bool = Field(True, description="accept rewards the program posts for single calls")
    prewarm: bool = Field(
        True, description="run `python script.py ...` commands as forks of one pre-warmed interpreter that has "
        "imported openai and httpx (saves each run 1-2 s of CPU); false: a fresh interpreter per run (docs/program.md)"
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value):
        return shlex.split(value) if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _where(cls, values):
        """`cwd` as an absolute path, fixed when the config is first read (at train time): the saved config
        then names where the program ran, and `masrl serve RUN` or `masrl eval RUN` from another directory
        start the same program there."""
        if isinstance(values, dict):
            values = {**values, "cwd": os.path.abspath(values.get("cwd") or ".")}
        return values

    @model_validator(mode="after")
    def _names(self) -> "ProgramConfig":
        if not self.command:
            raise ValueError("system.command is empty: name the program to run")
        if not self.trained:
            raise ValueError("system.trained is empty: name at least one model name of the program to train")
        clash = set(self.trained) & {a.name for a in self.frozen}
        if clash:
            raise ValueError(f"model names both trained and frozen: {sorted(clash)}")
        for policy in self.trained.values():
            if not policy.isidentifier():
                raise ValueError(f"policy name {policy!r} in system.trained must be an identifier")
        return self
