"""The router controller's parsed decision (`Action`) and how it writes an agent (`LabelStyle`).

`parse_action` (system.py) turns a controller reply into an `Action` and the rewards score it by its
kind. A reply that does not parse is an action too (`FORMAT_ERROR`), never an exception. The kinds
are strings underneath (`StrEnum`), so a kind compares and serialises as its name (`action.kind ==
"route"`), and an action's repr (what samples.jsonl and the run page show) gives the kind's name and
the fields it sets. The budget controller has the same shape with its own kinds (budget/action.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum


class ActionKind(StrEnum):
    ROUTE = "route"  # send the problem (and the draft, on a re-route) to `agent`
    STOP = "stop"  # a verdict that ends the episode with the last draft
    FORMAT_ERROR = "format_error"  # the reply did not parse; `reason` says why


@dataclass(frozen=True)
class Action:
    """One parsed controller output."""

    kind: ActionKind
    verdict: bool | None = None  # the verdict on the draft under review (turns after the first)
    agent: str | None = None  # the agent routed to
    reason: str = ""  # why a reply is a format error

    def __post_init__(self):
        object.__setattr__(self, "kind", ActionKind(self.kind))

    def __repr__(self) -> str:  # what samples.jsonl and the run page show: the kind's name, then the fields set
        given = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)[1:] if getattr(self, f.name) != f.default]
        return f"Action({', '.join([f'kind={self.kind.value!r}', *given])})"


class LabelStyle(StrEnum):
    """What the controller writes for an agent (`system.labels`)."""

    NAMES = "names"  # the agent's name: <model>sim-weak</model>
    NUMBERS = "numbers"  # its number, 1..K weak to strong: <model>1</model>
