"""A controller's parsed decision: the one `Action` shape the router and the budget controller share,
and the `LabelStyle` both write their options in.

Both systems parse a trainable controller's reply into an `Action` (router/system.py, budget/system.py)
and score it by its kind. A reply that does not parse is an action too (`FORMAT_ERROR`), never an
exception. The kinds are strings underneath (`StrEnum`), so a kind compares and serialises as its
name (`action.kind == "route"`), and an action's repr shows the kind's name and the fields it sets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum


class ActionKind(StrEnum):
    ROUTE = "route"  # router: send the problem (and the draft, on a re-route) to `agent`
    STOP = "stop"  # router: a verdict that ends the episode with the last draft
    ANSWER = "answer"  # budget: the final answer, in `answer`
    CALL = "call"  # budget: ask the expert `agent` the sub-query `query`
    ALONE = "alone"  # budget (decide_first): the choice to answer without an expert
    FORMAT_ERROR = "format_error"  # either: the reply did not parse; `reason` says why


@dataclass(frozen=True)
class Action:
    """One parsed controller output; a system fills the fields its kinds use."""

    kind: ActionKind
    verdict: bool | None = None  # router: the verdict on the draft under review (turns after the first)
    agent: str | None = None  # the agent routed to (router) or the expert called (budget)
    answer: str | None = None  # budget: the <answer> body
    query: str = ""  # budget: the sub-query for the expert ("" = the problem itself)
    reason: str = ""  # why a reply is a format error

    def __post_init__(self):
        object.__setattr__(self, "kind", ActionKind(self.kind))

    def __repr__(self) -> str:  # what samples.jsonl and the run page show: the kind's name, then the fields set
        given = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)[1:] if getattr(self, f.name) != f.default]
        return f"Action({', '.join([f'kind={self.kind.value!r}', *given])})"


class LabelStyle(StrEnum):
    """What a controller writes for an option (`system.labels` of the router and the budget controller)."""

    NAMES = "names"  # the agent's name: <model>sim-weak</model>
    NUMBERS = "numbers"  # its number, 1..K weak to strong (budget: 0 answers alone): <model>1</model>
