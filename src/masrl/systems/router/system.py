"""The critique-and-routing controller (paper: arXiv:2605.08686, sections 3.1-3.4).

A trainable controller coordinates a pool of K agents ordered weak to strong:

- turn 1: it reads the problem and names an agent (`<model>NAME</model>`);
  that agent writes a draft;
- turn t > 1: it reads the problem and the last draft and gives a verdict
  (`<verdict>True</verdict>` stops; `<verdict>False</verdict>` followed by
  `<model>NAME</model>` sends the problem, the draft and the controller's
  critique to a stronger agent);
- at turn T it only verifies. The answer is always the last draft.

Rewards per controller action (section 3.2, Proposition 3.1):

    R_r  = 1 if the chosen agent's draft is correct     (0 at turn T, 0 with no agent)
    R_v  = 1 if the verdict matches the draft's truth   (0 at turn 1)
    R'_r = R_r - sum_k 2 xi_k [chose k]
    r    = 0.5 R'_r + 0.5 R_v                            (weights configurable)

A malformed output is a format failure: the episode ends with the last draft
and the action earns nothing (no penalty either: no agent was chosen).

In the episode tree each routing action is followed by the routed agent's
call (a frozen step that never branches). The routing term R_r is known only
once that agent has answered, so it sits on the agent's call; credit adds it
to the controller's action at the same turn (`tree_q` discounts per turn, not
per call), which gives exactly the paper's Q = r + gamma * V(s_{t+1}).

`xi` is a mutable `Multipliers` shared with the training loop: fixed by hand
(the paper) or moved between steps by dual ascent on measured usage
(`dual_ascent`, `observe`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from masrl.systems.api import (
    Built, ConfigError, Episode, Message, Reply, Step, Task, TaskItem, Transition, build_pool, match_agent,
)
from masrl.systems.router.action import Action, ActionKind, LabelStyle
from masrl.systems.router.rewards import (
    REWARDS,
    Multipliers,
    RewardWeights,
    default_caps,
    default_multipliers,
    dual_ascent,
)

CONTROLLER = "controller"

# Short on purpose: on a CPU every prompt token costs about as much as a generated one
# (prefill dominates), and the controller reads these at every decision of the tree.
ROUTE_PROMPT = (
    "Route the math problem to one solver: {tags}. They are listed weakest and cheapest first; the strong "
    "ones are scarce, so pick the weakest that will solve it."
)
VERIFY_PROMPT = (
    "Check the solution from {author}. If it is correct, reply <verdict>True</verdict>. If not, reply "
    "<verdict>False</verdict> and a stronger solver redoes it; you may name it: {tags}."
)
LAST_VERIFY_PROMPT = (
    "Check the solution from {author}. Reply <verdict>True</verdict> if it is correct, else <verdict>False</verdict>."
)
# Numbered options (`system.labels: numbers`): the controller writes 1..K, weak to strong, as the
# budget controller does (budget/system.py): a 135M model copies a digit it was shown far more
# reliably than a name. The options close the user turn, next to the decision, where the untrained
# SmolLM2 put 0.86 of its first token's probability on a label (0.12 with them in the system prompt
# and a "<model>N</model>" placeholder, which it copied; `scripts/router_probe.py`).
ROUTE_SYSTEM_NUMBERED = "You route math problems to solvers, weakest and cheapest first."
ROUTE_USER_NUMBERED = "Problem: {question}\n\nWho solves it? Reply with one number: {options}."
VERIFY_SYSTEM_NUMBERED = (
    "You check math solutions. A solution is wrong if a line's arithmetic is wrong or the answer does not "
    "match the last line."
)
REDO_NUMBERED = " If it is wrong, a stronger solver redoes it."
VERIFY_USER_NUMBERED = (
    "Problem: {question}\n\nSolution from {author}:\n{draft}\n\nIs it right? Reply <verdict>True</verdict> or "
    "<verdict>False</verdict>."
)
# With names (`system.labels: names`): the problem alone at turn 1, the problem and the draft after.
ROUTE_USER = "Problem: {question}"
VERIFY_USER = "Problem: {question}\n\nProposed solution from {author}:\n{draft}"
AGENT_PROMPT = "Solve the math problem. Show your steps briefly and end with the final answer as <answer>ANSWER</answer>."
ESCALATION = (
    "{question}\n\nA previous attempt by another solver:\n{draft}\n\nA reviewer judged it wrong: {critique}\n\n"
    "Solve the problem yourself from the start."
)


# ---------------------------------------------------------------- label styles
@dataclass(frozen=True)
class NamedOptions:
    """`system.labels: names`: the controller writes an agent's name; the options are tags in the system
    prompt, the user turn holds the problem (and the draft under review)."""

    route_user: str = ROUTE_USER
    verify_user: str = VERIFY_USER
    stop: tuple[str, ...] = ("</model>",)  # a True verdict ends at EOS

    def labels(self, agents: Sequence[str]) -> tuple[str, ...] | None:
        return None  # the parser matches names

    def route(self, agents: Sequence[str], question: str) -> tuple[str, str]:
        tags = ", ".join(f"<model>{a}</model>" for a in agents)
        return ROUTE_PROMPT.format(tags=tags), self.route_user.format(question=question)

    def verify(self, agents: Sequence[str], question: str, author: str, draft: str, last: bool) -> tuple[str, str]:
        stronger = agents[list(agents).index(author) + 1 :] if author in agents else ()
        tags = ", ".join(f"<model>{a}</model>" for a in stronger)
        system = (LAST_VERIFY_PROMPT if last else VERIFY_PROMPT).format(author=author, tags=tags)
        return system, self.verify_user.format(question=question, author=author, draft=draft)


@dataclass(frozen=True)
class NumberedOptions:
    """`system.labels: numbers`: the controller writes 1..K, weak to strong; the options close the user turn."""

    route_user: str = ROUTE_USER_NUMBERED
    verify_user: str = VERIFY_USER_NUMBERED
    # A verdict ends at its closing tag too: the decision is made, and a False hands the problem to the
    # next stronger agent without naming it.
    stop: tuple[str, ...] = ("</model>", "</verdict>")

    def labels(self, agents: Sequence[str]) -> tuple[str, ...] | None:
        return tuple(str(i + 1) for i in range(len(agents)))

    def route(self, agents: Sequence[str], question: str) -> tuple[str, str]:
        options = ", ".join(f"<model>{label}</model> {a}" for label, a in zip(self.labels(agents), agents))
        return ROUTE_SYSTEM_NUMBERED, self.route_user.format(question=question, options=options)

    def verify(self, agents: Sequence[str], question: str, author: str, draft: str, last: bool) -> tuple[str, str]:
        system = VERIFY_SYSTEM_NUMBERED + ("" if last else REDO_NUMBERED)
        return system, self.verify_user.format(question=question, author=author, draft=draft)


OPTIONS = {LabelStyle.NAMES: NamedOptions(), LabelStyle.NUMBERS: NumberedOptions()}


# ---------------------------------------------------------------- the action
_MODEL = re.compile(r"<model>\s*(.*?)\s*</model>", re.IGNORECASE | re.DOTALL)
_VERDICT = re.compile(r"<verdict>\s*(true|false)\s*</verdict>", re.IGNORECASE)
# Numbered options: the decision is the word right after the opening tag (the prefill); what follows it,
# a closing tag sampled as "</verdict</verdict>" or "</verirdr" at temperature 1, does not change it.
_NUMBER_FIRST = re.compile(r"<model>\s*(\d+)(?!\d)")
_VERDICT_FIRST = re.compile(r"<verdict>\s*(true|false)(?![a-z])", re.IGNORECASE)


def parse_action(
    text: str, turn: int, max_turns: int, agents: Sequence[str], author: str | None,
    labels: Sequence[str] | None = None,
) -> Action:
    """The controller's decision in `text` at `turn` (1-based); never raises.

    `author` wrote the draft under review (None at turn 1). After a False
    verdict a named agent must be stronger than the author; with no name the
    next stronger agent takes over (a small model rarely writes a second tag
    untrained, so the common case needs none). Where no stronger agent
    exists, or at the last turn, a False verdict simply ends the episode.
    `labels` are what the controller writes for each agent (default: the names); with labels the
    decision is the first word after the tag, whatever follows it.
    """
    model, verdict_tag = (_NUMBER_FIRST, _VERDICT_FIRST) if labels is not None else (_MODEL, _VERDICT)
    if turn == 1:
        found = model.findall(text)
        if not found:
            return Action(ActionKind.FORMAT_ERROR, reason="no <model> tag")
        agent = _agent_named(found[0], agents, labels)
        if agent is None:
            return Action(ActionKind.FORMAT_ERROR, reason=f"unknown agent {found[0][:40]!r}")
        return Action(ActionKind.ROUTE, agent=agent)
    verdicts = verdict_tag.findall(text)
    if not verdicts:
        return Action(ActionKind.FORMAT_ERROR, reason="no <verdict>True/False</verdict>")
    verdict = verdicts[0].lower() == "true"
    stronger = list(agents)[list(agents).index(author) + 1 :] if author in agents else []
    if verdict or turn >= max_turns or not stronger:
        return Action(ActionKind.STOP, verdict=verdict)
    found = model.findall(text)
    if not found:  # our protocol: a bare False hands the problem to the next stronger agent
        return Action(ActionKind.ROUTE, verdict=verdict, agent=stronger[0])
    agent = _agent_named(found[0], agents, labels)
    if agent not in stronger:
        reason = f"{found[0][:40]!r} is not stronger than {author}"
        return Action(ActionKind.FORMAT_ERROR, verdict=verdict, reason=reason)
    return Action(ActionKind.ROUTE, verdict=verdict, agent=agent)


def _agent_named(written: str, agents: Sequence[str], labels: Sequence[str] | None) -> str | None:
    """The agent whose label (or name, without labels) `written` refers to."""
    if labels is None:
        return match_agent(written, agents)
    label = match_agent(written, labels)
    return None if label is None else agents[list(labels).index(label)]


# ---------------------------------------------------------------- rewards
@dataclass(frozen=True)
class RouterState:
    task: TaskItem
    turn: int = 1  # the controller's turn about to happen (or the routed agent's, when pending)
    draft: str | None = None
    draft_correct: bool | None = None
    author: str | None = None
    pending: str | None = None  # an agent the controller just routed to
    critique: str = ""


@dataclass(frozen=True)
class RouterSystem:
    task_family: Task
    agents: tuple[str, ...]  # weak -> strong
    multipliers: Multipliers
    max_turns: int = 3
    weights: RewardWeights = RewardWeights()
    prefill: bool = True  # start the controller's reply inside its tag
    agent_prompt: str = AGENT_PROMPT
    policy: str = CONTROLLER
    labels: LabelStyle = LabelStyle.NAMES  # what the controller writes for an agent (OPTIONS)
    reward: str = "paper"  # a key of rewards.REWARDS
    # False: a draft written just before turn T ends the episode instead of getting turn T's verdict,
    # which could not re-route it (the answer is the last draft either way).
    final_verification: bool = True

    def __post_init__(self):
        object.__setattr__(self, "labels", LabelStyle(self.labels))

    @property
    def options(self) -> NamedOptions | NumberedOptions:
        """How the controller names the agents: its prompts, labels and stop strings."""
        return OPTIONS[self.labels]

    def label(self, agent: str) -> str:
        """What the controller writes for `agent`."""
        labels = self.options.labels(self.agents)
        return agent if labels is None else labels[self.agents.index(agent)]

    def start(self, task: TaskItem) -> RouterState:
        return RouterState(task)

    # -- prompts
    def next_step(self, state: RouterState) -> Step:
        if state.pending is not None:
            return Step(state.pending, "agent", state.turn, self.agent_messages(state), branch=False)
        return Step(self.policy, CONTROLLER, state.turn, self.controller_messages(state))

    def controller_messages(self, state: RouterState) -> tuple[Message, ...]:
        q = state.task.question.strip()
        if state.turn == 1:
            (system, user), tag = self.options.route(self.agents, q), "<model>"
        else:
            last = state.turn >= self.max_turns or state.author == self.agents[-1]  # no stronger agent to name
            (system, user), tag = self.options.verify(self.agents, q, state.author, state.draft, last), "<verdict>"
        messages = (Message("system", system), Message("user", user))
        return messages + ((Message("assistant", tag),) if self.prefill else ())

    def agent_messages(self, state: RouterState) -> tuple[Message, ...]:
        q = state.task.question.strip()
        user = q if state.draft is None else ESCALATION.format(question=q, draft=state.draft, critique=state.critique)
        return (Message("system", self.agent_prompt), Message("user", user))

    # -- transitions
    def advance(self, state: RouterState, step: Step, reply: Reply) -> Transition:
        if state.pending is not None:
            return self._agent_answered(state, reply)
        text = self._full_text(reply.text, state.turn)
        action = parse_action(text, state.turn, self.max_turns, self.agents, state.author,
                              self.options.labels(self.agents))
        terms = REWARDS[self.reward].controller(action, state.turn, state.draft_correct, self.multipliers.xi,
                                                self.weights)
        reward = terms.pop("reward")
        if action.kind != ActionKind.ROUTE:
            final = {"correct": float(bool(state.draft_correct)), "turns": float(state.turn)}
            return Transition(state, action, {**terms, **final}, reward, done=True)
        nxt = replace(state, pending=action.agent, critique=_critique(text))
        return Transition(nxt, action, terms, reward, done=False)

    def draft_correct(self, item: TaskItem, answer: str | None) -> bool:
        """Whether a routed agent's answer (its draft's, the action of its call) is right for `item`."""
        return answer is not None and self.task_family.score(item, answer) > 0

    def _agent_answered(self, state: RouterState, reply: Reply) -> Transition:
        answer = self.task_family.extract_answer(reply.text)
        correct = self.draft_correct(state.task, answer)
        # T = 1 (the single-turn router) routes once and never verifies; without final verification a draft
        # that could only be verified is final too
        last = state.turn >= self.max_turns or (not self.final_verification and state.turn + 1 >= self.max_turns)
        terms = REWARDS[self.reward].routed(correct, last, self.weights)
        reward = terms.pop("reward")
        nxt = RouterState(state.task, state.turn + 1, reply.text, correct, state.pending)
        if last:
            final = {"correct": float(correct), "turns": float(state.turn)}
            return Transition(nxt, answer, {**terms, **final}, reward, done=True)
        return Transition(nxt, answer, terms, reward, done=False)

    def _full_text(self, text: str, turn: int) -> str:
        if not self.prefill:
            return text
        return ("<model>" if turn == 1 else "<verdict>") + text

    # -- between steps
    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Usage of each agent on this step's trees; one dual-ascent step on xi when automatic."""
        usage = tree_usage(episodes, self.agents)
        m = self.multipliers
        if m.auto:
            m.xi = dual_ascent(m.xi, usage, m.rho, m.lr)
        metrics = {f"usage/{k}": v for k, v in usage.items()}
        metrics.update({f"xi/{k}": v for k, v in m.xi.items()})
        metrics["final_correct"] = tree_accuracy(episodes)
        return metrics

    def state_dict(self) -> dict[str, float]:
        return self.multipliers.state_dict()

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.multipliers.load_state_dict(state)


def _critique(text: str) -> str:
    """What the next agent is told about the draft: the controller's words minus its tags."""
    body = re.sub(r"<model>.*?</model>", "", text, flags=re.DOTALL | re.IGNORECASE)
    body = re.sub(r"</?(verdict|checking|thinking)>", " ", body, flags=re.IGNORECASE)
    body = " ".join(body.split())
    return body if body and body.lower() != "false" else "it did not pass verification."


# ---------------------------------------------------------------- tree statistics
def path_weights(episode: Episode) -> dict[str, float]:
    """Probability weight of each call's path: its parent's weight / number of siblings drawn.

    A node's G actions are G samples of one policy, so the weighted count of a
    tree's calls estimates expected counts per trajectory (e.g. each of the G
    turn-1 actions counts 1/G, each turn-2 action under it 1/G^2)."""
    siblings: dict[str | None, int] = defaultdict(int)
    for c in episode.calls:
        siblings[c.parent] += 1
    weight: dict[str, float] = {}
    for c in episode.calls:  # parents first
        weight[c.id] = (1.0 if c.parent is None else weight[c.parent]) / siblings[c.parent]
    return weight


def tree_usage(episodes: Sequence[Episode], agents: Sequence[str]) -> dict[str, float]:
    """Each agent's share of the expected agent calls per trajectory, estimated from the trees."""
    counts = {a: 0.0 for a in agents}
    for ep in episodes:
        w = path_weights(ep)
        for c in ep.calls:
            if c.role == "agent" and c.agent in counts:
                counts[c.agent] += w[c.id]
    total = sum(counts.values())
    return {a: (n / total if total else 0.0) for a, n in counts.items()}


def tree_accuracy(episodes: Sequence[Episode]) -> float:
    """Expected correctness of the final draft per trajectory, from the trees' terminal calls."""
    if not episodes:
        return 0.0
    total = 0.0
    for ep in episodes:
        w = path_weights(ep)
        total += sum(w[c.id] * c.rewards.get("correct", 0.0) for c in ep.calls if c.done and not c.failed)
    return total / len(episodes)


# ---------------------------------------------------------------- from config
def build_router(config, task: Task) -> Built:
    """The controller over the configured pool (weak to strong), caps and multipliers.

    The controller's reply ends with its routing tag (and with numbered options, its verdict's)."""
    r = config.system
    pool = build_pool(r.pool, task)
    names = tuple(pool)
    for key, given in (("rho", r.rho), ("xi", r.xi)):
        unknown = set(given) - set(names)
        if unknown:
            raise ConfigError(f"system.{key} names agents not in the pool: {sorted(unknown)}; pool: {list(names)}")
    multipliers = Multipliers(
        xi={**default_multipliers(names), **r.xi},
        rho={**default_caps(names), **r.rho},
        auto=r.dual_ascent,
        lr=r.dual_lr,
    )
    weights = RewardWeights(r.routing_weight, r.verification_weight)
    system = RouterSystem(task, names, multipliers, r.max_turns, weights, r.prefill, labels=r.labels, reward=r.reward,
                          final_verification=r.final_verification)
    return Built(system, {CONTROLLER: CONTROLLER}, frozen=pool, stop=system.options.stop)

