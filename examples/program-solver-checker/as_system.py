"""The same solver-and-checker team written as a masrl System (for comparison with the program).

Its prompts and its send-back rule are the program's own (imported from solver_checker.py), so
with the same model replies both ask exactly the same things; tests check that the two give the
same training samples. Use it with `system.kind: as_system:SYSTEM` and this directory on PYTHONPATH.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from solver_checker import checker_messages, sends_back, solver_messages

from masrl.systems.api import Built, Message, Step, SystemSection, SystemSpec, Transition


class TeamConfig(SystemSection):
    pass


@dataclass(frozen=True)
class State:
    item: object
    draft: str | None = None  # the solver's latest answer
    calls: int = 0
    sent_back: bool = False


def _messages(raw: list[dict]) -> tuple[Message, ...]:
    return tuple(Message(m["role"], m["content"]) for m in raw)


@dataclass(frozen=True)
class SolverChecker:
    task: object

    def start(self, item):
        return State(item)

    def next_step(self, state: State) -> Step:
        q = state.item.question
        if state.calls == 0:
            return Step("solver", "solver", 0, _messages(solver_messages(q)))
        if state.calls == 1:
            return Step("checker", "checker", 1, _messages(checker_messages(q, state.draft)))
        return Step("solver", "solver", 2, _messages(solver_messages(q, state.draft)))

    def advance(self, state: State, step: Step, reply) -> Transition:
        calls = state.calls + 1
        if step.agent == "solver":
            new = replace(state, draft=reply.text, calls=calls)
            done = calls == 3
        else:
            new = replace(state, calls=calls, sent_back=sends_back(reply.text))
            done = not new.sent_back
        if not done:
            return Transition(new)
        found = self.task.extract_answer(new.draft) if new.draft else None  # what the program's answer is scored on
        correct = float(self.task.score(state.item, found)) if found is not None else 0.0
        rewards = {"correct": correct, "final": correct}
        return Transition(new, action=new.draft, rewards=rewards, reward=correct, done=True)


def build(config, task):
    return Built(SolverChecker(task), {"solver": "shared", "checker": "shared"})


SYSTEM = SystemSpec(kind="solver-checker", config=TeamConfig, build=build, summary="solver + checker as a System")
