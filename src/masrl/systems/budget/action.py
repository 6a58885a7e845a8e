"""The budget controller's parsed decision (`Action`) and how it writes an expert (`LabelStyle`).

`parse_action` (system.py) turns a controller reply into an `Action` and the reward scores it by its
kind. A reply that does not parse is an action too (`FORMAT_ERROR`), never an exception. The kinds
are strings underneath (`StrEnum`), so a kind compares and serialises as its name (`action.kind ==
"call"`), and an action's repr (what samples.jsonl and the run page show) gives the kind's name and
the fields it sets. The router has the same shape with its own kinds (router/action.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum


class ActionKind(StrEnum):
    ANSWER = "answer"  # the final answer, in `answer`
    CALL = "call"  # ask the expert `agent` the sub-query `query`
    ALONE = "alone"  # (protocol decide) the choice to answer without an expert
    FORMAT_ERROR = "format_error"  # the reply did not parse; `reason` says why


@dataclass(frozen=True)
class Action:
    """One parsed controller output."""

    kind: ActionKind
    agent: str | None = None  # the expert called
    answer: str | None = None  # the <answer> body
    query: str = ""  # the sub-query for the expert ("" = the problem itself)
    reason: str = ""  # why a reply is a format error

    def __post_init__(self):
        object.__setattr__(self, "kind", ActionKind(self.kind))

    def __repr__(self) -> str:  # what samples.jsonl and the run page show: the kind's name, then the fields set
        given = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)[1:] if getattr(self, f.name) != f.default]
        return f"Action({', '.join([f'kind={self.kind.value!r}', *given])})"


class LabelStyle(StrEnum):
    """What the controller writes for an expert (`system.labels`, protocol decide)."""

    NAMES = "names"  # the expert's name: <call>sim-nano</call>
    NUMBERS = "numbers"  # its number, 1..K weak to strong, 0 answers alone: <call>1</call>
