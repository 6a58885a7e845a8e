"""A user's system whose own code raises where its config says (rollout.on_system_error, issue 38).

Found by a dotted path, `system.kind=faulty_system:SYSTEM`, as a user's plugin is. One agent
answers each item once; with `system.then` a second turn asks that agent (a name nobody serves
tests the unknown-agent check). `system.hook` names the hook that raises, on the items whose id ends
with `system.items` ("" raises on every item). The lines that raise are marked, so tests can name
them. `system.reward` is the reward `advance` returns (issue 50: "nan", "inf" and any text that is no
number are returned as they are, a float or a string), and `system.hangs` makes `advance` sleep on
those items instead (touching the file $FAULTY_HANGING first, when set, so a test knows it hangs).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from masrl.systems.api import Built, Message, Step, SystemSection, SystemSpec, Transition


class FaultyConfig(SystemSection):
    hook: Literal["none", "start", "next_step", "advance"] = Field("none", description="the hook that raises")
    items: str = Field("/1", description="it raises on the items whose id ends so ('': on every item)")
    first: str = Field("solver", description="the agent of the first turn")
    then: str = Field("", description="the agent of a second turn ('': one turn)")
    prompt: str = Field("Answer with <answer>NUMBER</answer>.", description="the agent's system prompt")
    reward: str = Field("0", description="advance's reward: a number, nan, inf, or text returned as a string")
    hangs: bool = Field(False, description="advance sleeps for an hour on the items `items` names")


@dataclass(frozen=True)
class State:
    item: object
    turn: int = 0


@dataclass(frozen=True)
class Faulty:
    config: FaultyConfig

    def raises(self, hook: str, state_or_item) -> bool:
        item = getattr(state_or_item, "item", state_or_item)
        return self.config.hook == hook and item.id.endswith(self.config.items)

    def start(self, item):
        if self.raises("start", item):
            raise ValueError(f"no start for {item.id}")  # RAISES: start
        return State(item)

    def next_step(self, state):
        if self.raises("next_step", state):
            return {}[state.item.id]  # RAISES: next_step
        agent = self.config.first if state.turn == 0 else self.config.then
        return Step(agent, agent, state.turn, (Message("system", self.config.prompt), Message("user", state.item.question)))

    def advance(self, state, step, reply):
        if self.raises("advance", state):
            return _parse({})
        if self.config.hangs and state.item.id.endswith(self.config.items):
            _hang()
        done = state.turn == 1 or not self.config.then
        return Transition(State(state.item, state.turn + 1), rewards={"correct": 0.0}, reward=_reward(self.config.reward),
                          done=done)


def _reward(text: str):
    """The reward as configured: a float when Python reads it as one (nan and inf included), else the text."""
    try:
        return float(text)
    except ValueError:
        return text


def _hang() -> None:
    if os.environ.get("FAULTY_HANGING"):
        Path(os.environ["FAULTY_HANGING"]).touch()
    time.sleep(3600)  # HANGS


def _parse(record: dict) -> Transition:
    """A helper of the system's own, so the line named is the deepest frame of the system's code."""
    return record["x"]  # RAISES: advance


def build(config, task):
    return Built(Faulty(config.system), {"solver": "solver"})


SYSTEM = SystemSpec(kind="faulty", config=FaultyConfig, build=build, summary="raises where its config says")
