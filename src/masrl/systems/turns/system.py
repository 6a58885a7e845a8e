"""Turn-based cooperating agents (AT-GRPO; arXiv:2510.11062, sec. 3-4 and appendix A.2).

N agents take turns on a task environment (masrl.tasks.base.TurnTask). In
each turn every agent acts once, in order, on its own observation: its role
prompt, the environment state as text, and the interaction history (what the
agents did in earlier steps). A role listed in `code_roles` may answer with a
Python block; the system runs it in the sandbox (masrl.tasks.tools) and the
program's printed output is what the task parses. The environment steps on
the parsed action (a malformed one is the action None: a format failure,
never an exception); a role in the task's `commits` changes the state, the
others' actions are proposals the next agents see. The episode stops when the
task says so (goal met, or the agents agree) or after `max_turns` turns.

Every call's reward is its team and local reward mixed as configured
(masrl.tasks.team: `alpha` = main text eq. 4, `lambda` = appendix A.1), and
every component is recorded on the call (team, local, mask, local/<score>),
plus `correct` (the state after it is solved: what evaluation counts on the
final call) and `format` (its action could be read).

Sampling and grouping are engine parts: `sampler.rule: per_turn_greedy`
draws K candidates per (environment, agent, turn) and continues the best
(Algorithm 1, line 13); `algo.credit: immediate` and `algo.grouping:
agent_turn` score each candidate by its own reward within its (environment,
agent, turn) group (lines 10-11). Policies: `turns.policies: shared` (one
LoRA adapter for all roles) or `per_role` (one adapter per role on one base
model, or on separate base models with `model.bases`, built by the engine);
each call trains the adapter that produced it.

A single agent is the same system with one agent (`turns.agents: [planner]`),
and `max_turns: 1` is the paper's single-turn single-agent baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from masrl.systems.api import (
    Built, ConfigError, Message, Reply, Step, TaskItem, ToolRun, Transition, TurnTask, final_segment, mixed_reward,
    tool_output,
)

HISTORY_CHARS = 240  # characters of one agent's output kept in the history line others see

# Our own role prompts, by role; a task family may need its own wording (TASK_PROMPTS).
ROLE_PROMPTS = {
    "planner": (
        "You are the planner of a two-agent team. Read the task, the state and what the tool agent proposed. "
        "Check the proposal against the rules; adopt it if it is right, otherwise correct it. "
        "Finish with one line: #### followed by your final answer."
    ),
    "tool": (
        "You are the tool agent of a two-agent team. Write one Python program in a ```python block whose "
        "printed output is your proposed answer, or write the answer directly after ####."
    ),
    "reasoner": (
        "You are the reasoner of a two-agent team. Solve the problem step by step, compare with the tool "
        "agent's answer if there is one, and finish with one line: #### followed by the final answer."
    ),
    "coder": (
        "You are the coder of a two-agent team. Write the requested function in one ```python block. "
        "If the tester's tests disagree with your code, decide who is right and fix your code if needed."
    ),
    "tester": (
        "You are the unit tester of a two-agent team. Write test cases for the requested function, one per "
        "line, exactly as: solve(ARGUMENTS) == EXPECTED, with Python literals. Work out each expected value carefully."
    ),
}
# A single agent (the SA baselines) works alone: no team, no proposals to check.
SOLO_PROMPTS = {
    "planner": "Solve the task on your own. Think briefly, then finish with one line: #### followed by your answer.",
    "reasoner": "Solve the problem step by step on your own, then finish with one line: #### followed by the answer.",
    "coder": "Write the requested function in one ```python block.",
    "tool": ROLE_PROMPTS["tool"].replace("You are the tool agent of a two-agent team. ", ""),
    "tester": ROLE_PROMPTS["tester"].replace("You are the unit tester of a two-agent team. ", ""),
}
ANSWER_FORMAT = {
    "planpath": "The answer is the list of moves to make now, e.g. [U, R, R, D].",
    "sokoban": "The answer is the list of moves to make now, e.g. [U, R, R, D].",
    "sudoku": (
        "The answer is the completed grid as JSON rows, e.g. [[1,2,3,4],...], "
        "or a list of [row, column, value] fills (1-based)."
    ),
    "math_turns": "The answer is a single number or expression.",
    "code": "",
}


@dataclass(frozen=True)
class TurnState:
    item: TaskItem
    env: Any  # the task environment's state (what committed actions made of it)
    turn: int = 0
    index: int = 0  # who acts next: position in the agent order
    history: tuple[str, ...] = ()


@dataclass(frozen=True)
class TurnsSystem:
    task: TurnTask
    agents: tuple[str, ...]  # agent names in acting order; each is also its role in the task's reward design
    prompts: Mapping[str, str]  # role -> system prompt
    max_turns: int = 2
    mix: str = "lambda"
    alpha: float = 1.0
    lam: float | None = None  # None: the task's appendix-A.1 lambda
    code_roles: tuple[str, ...] = ("tool",)  # roles whose reply code is run in the sandbox
    timeout: float = 5.0
    history: int = 6  # history lines shown
    prefill: Mapping[str, str] = field(default_factory=dict)  # role -> text its reply starts with

    def __post_init__(self):
        unknown = [a for a in self.agents if a not in self.task.design.coefficients]
        if unknown or not self.agents:
            raise ValueError(
                f"turns.agents {list(self.agents)}: each must be a role of the task ({', '.join(self.task.roles)})"
            )
        if len(set(self.agents)) != len(self.agents):
            raise ValueError(f"turns.agents has duplicates: {list(self.agents)}")

    def start(self, task: TaskItem) -> TurnState:
        return TurnState(task, self.task.reset(task))

    def next_step(self, state: TurnState) -> Step:
        role = self.agents[state.index]
        lines = [self.task.observe(state.env)]
        if state.history:
            lines.append("What the team did so far:\n" + "\n".join(state.history[-self.history :]))
        lines.append(f"Turn {state.turn + 1} of {self.max_turns}. You are the {role}.")
        messages = (Message("system", self.prompts[role]), Message("user", "\n\n".join(lines)))
        if self.prefill.get(role):  # a trailing assistant message: the reply continues it (agents/policy.py)
            messages += (Message("assistant", self.prefill[role]),)
        return Step(agent=role, role=role, turn=state.turn, messages=messages)

    def advance(self, state: TurnState, step: Step, reply: Reply) -> Transition:
        role = step.role
        full = self.prefill.get(role, "") + reply.text  # the prefill is part of what the agent said
        text, run = tool_output(full, self.timeout) if role in self.code_roles else (full, None)
        action = self.task.parse(text)
        outcome = self.task.step(state.env, role, action)
        parts = self.task.reward_parts(role, state.env, outcome, run)
        reward, components = mixed_reward(self.task.design, role, parts, self.mix, self.alpha, self.lam)
        env = outcome.state if role in self.task.commits else state.env
        components["correct"] = float(self.task.solved(env))
        components["format"] = float(action is not None)
        index = (state.index + 1) % len(self.agents)
        turn = state.turn + (index == 0)
        history = (*state.history, f"[turn {state.turn + 1}] {role}: {_summary(full, run)}")
        new = replace(state, env=env, turn=turn, index=index, history=history)
        done = (role in self.task.commits and self.task.done(env)) or turn >= self.max_turns
        return Transition(state=new, action=action, rewards=components, reward=reward, done=done)

    def eval_metrics(self, episodes) -> dict[str, float]:
        """Turns used per episode (the paper's fig. 5b: fewer as the agents align)."""
        n = max(len(episodes), 1)
        turns = [max((c.turn for c in ep.calls), default=0) + 1 for ep in episodes]
        return {"turns": sum(turns) / n}


def _summary(text: str, run: ToolRun | None) -> str:
    """One history line: what a program printed (or how it failed), else the reply's final part."""
    if run is not None:
        if run.ok:
            return "its program printed: " + _clip(run.stdout.strip() or "(nothing)")
        last = (run.stderr.strip().splitlines() or [""])[-1]
        return f"its program failed ({run.status}): " + _clip(last)
    return _clip(final_segment(text).strip() or "(empty reply)")


def _clip(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= HISTORY_CHARS else s[: HISTORY_CHARS - 3] + "..."


def build_turns(config, task) -> Built:
    """The turn loop over a TurnTask; the config's `system` section."""
    if not isinstance(task, TurnTask):
        raise ConfigError(
            "system.kind 'turns' needs a turn-based task (sudoku, sokoban, planpath, math_turns, code), "
            f"got {task.name!r}"
        )
    tc = config.system
    agents = tuple(tc.agents) or tuple(task.roles)
    unknown = sorted(set(agents) - set(task.roles)) + sorted((set(tc.prompts) | set(tc.prefill)) - set(agents))
    if unknown:
        raise ConfigError(
            f"system.agents / system.prompts / system.prefill name {unknown}; "
            f"the roles of task {config.task.kind!r} are {list(task.roles)}"
        )
    if tc.answer_role is not None:  # the episode is decided by another role's answer (math_turns)
        if not hasattr(task, "answered_by"):
            raise ConfigError(f"system.answer_role is for task math_turns; task {config.task.kind!r} decides its "
                              "episodes by its state")  # fmt: skip
        if tc.answer_role not in agents:
            raise ConfigError(f"system.answer_role {tc.answer_role!r} must be one of system.agents {list(agents)}")
        task = task.answered_by(tc.answer_role)
    fmt = ANSWER_FORMAT.get(config.task.kind, "")
    base = SOLO_PROMPTS if len(agents) == 1 else ROLE_PROMPTS
    prompts = {role: (tc.prompts.get(role) or f"{base[role]} {fmt}".strip()) for role in agents}
    try:
        system = TurnsSystem(
            task, agents, prompts, tc.max_turns, tc.mix, tc.alpha, tc.lam,
            tuple(r for r in agents if r in tc.code_roles), tc.timeout, tc.history, dict(tc.prefill),
        )  # fmt: skip
    except ValueError as e:
        raise ConfigError(str(e)) from None
    policies = {a: ("shared" if tc.policies == "shared" else a) for a in agents}
    return Built(system, policies)
