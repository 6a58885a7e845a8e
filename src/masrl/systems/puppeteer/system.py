"""The evolving orchestrator, Puppeteer (arXiv:2505.19591, sections 2.1-2.2, 3).

A trainable orchestrator picks one agent per step from the whole state (the
task and every output so far); the agent's output updates the state; the path
stops when the orchestrator picks the terminator or after `depth` agent steps.
The sampler draws W parallel paths per task (`sampler.group_size`, the paper's
width); evaluation aggregates their final answers by majority vote
(`masrl.systems.puppeteer.vote`). A path's final answer is the last answer any of its
agents stated.

Each step is two calls in the episode tree: the orchestrator's decision (the
trainable call) and the chosen agent's answer at the same turn (frozen, never
forked). Rewards sit on the calls so that the engine's `tree_q` credit with
`algo.gamma` = gamma yields eq. 6 exactly for every decision:

- agent call at step t < T: reward -lambda * C_t, C_t = F_t log(1 + t/phi);
- the last agent call (the depth limit): reward r - lambda * C_T;
- a terminator decision at step T: reward r (the terminator costs nothing, F_T = 0).

`tree_q` adds an agent's reward to the decision at the same turn and discounts
by gamma per turn, so Q(decision t) = -lambda C_t + gamma Q(decision t+1) = R_t.
F_t is the step's tokens (prompt and reply of the agent) divided by
`puppeteer.cost_unit`, or with `puppeteer.cost: flops` an estimated FLOP count,
2 x parameters x tokens (the forward-pass rule of thumb; the paper names FLOPs
or tokens), in GFLOPs / cost_unit; phi is the depth limit. With `algo.advantage: reinforce`
(or `reinforce_baseline`) and one update epoch the update is REINFORCE (eq. 5).

Two orchestrator policies: `llm`, a LoRA adapter of the base model that names
the next agent as <agent>NAME</agent>, and `head`, a frozen encoder with a
trainable scoring head (masrl.systems.puppeteer.head). The LLM names an agent by its number
in the prompt's list or by its name; a malformed or unknown choice ends the path
like the terminator would, and is counted (`format_error`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from masrl.systems.api import (
    Built, ConfigError, Episode, Head, Message, Reply, Step, Task, TaskItem, Transition, build_pool, match_agent,
    option_number,
)
from masrl.systems.puppeteer.head import BatchedEncoder, HeadAgent, HeadLearner, build_encoder, scoring_head
from masrl.systems.puppeteer.returns import step_cost
from masrl.systems.puppeteer.space import (
    TERMINATOR, AgentSpec, agent_space, build_tools, list_files, resolve_folder, space_agents,
)  # fmt: skip
from masrl.systems.puppeteer.topology import topology_metrics
from masrl.systems.puppeteer.vote import majority_vote

ORCHESTRATOR = "orchestrator"

ORCHESTRATOR_PROMPT = (
    "You lead a team that solves math problems. Each step, pick the one agent who should act next, "
    "or 0 to stop once the work so far holds a trustworthy answer. Every step costs tokens. "
    "Reply with the agent's number as <agent>NUMBER</agent>. Agents are named model:pattern[:tool]. "
    "Patterns: {patterns}. Agents: {agents}; 0 {terminator}."
)
PATTERN_GLOSS = {
    "planning": "plans steps",
    "reasoning": "works it out",
    "critique": "checks the work",
    "reflect": "diagnoses failures",
    "question": "asks and answers a sub-question",
    "summarize": "sums up",
    "conclude": "states the final answer",
    "modify": "fixes errors",
}
EXCERPT = 400  # characters of each earlier output shown to the next agent
SHOWN = 3  # earlier outputs shown to the next agent


@dataclass(frozen=True)
class Work:
    """One agent activation: who, what it wrote, and the answer it stated."""

    agent: str
    text: str
    answer: str | None


@dataclass(frozen=True)
class PuppeteerState:
    task: TaskItem
    history: tuple[Work, ...] = ()
    pending: str | None = None  # the agent the orchestrator just picked

    @property
    def step(self) -> int:
        """The current step, 1-based: the next decision (or the picked agent's turn)."""
        return len(self.history) + 1

    @property
    def answer(self) -> str | None:
        return next((w.answer for w in reversed(self.history) if w.answer is not None), None)


_AGENT = re.compile(r"<agent>\s*(.*?)\s*</agent>", re.IGNORECASE | re.DOTALL)
_STEP_LINE = re.compile(r"^Step (\d+) of at most \d+\.$", re.MULTILINE)  # state_text's second line


def step_number(state_text: str) -> int | None:
    """The step a state text (`PuppeteerSystem.state_text`) is at, from its step line (the last one: a
    problem's own text may hold a line like it; the work-so-far lines after it are numbered)."""
    found = _STEP_LINE.findall(state_text)
    return int(found[-1]) if found else None


def parse_choice(text: str, actions: Sequence[str]) -> str | None:
    """The action named in `text` (actions listed agents first, the terminator last): the
    <agent> tag's content as the agent's number (1-based; 0 is the terminator) or its name,
    matched exactly, case-insensitively, or as the unique action containing it; else None.

    Numbers because a small untrained model writes "<agent>3</agent>" far more often than
    a long exact name (SmolLM2-135M named no agent in 12 of 12 probes)."""
    found = _AGENT.findall(text)
    name = (found[0] if found else text).strip()
    k = option_number(name)
    if k is not None:
        return actions[-1] if k == 0 else (actions[k - 1] if k < len(actions) else None)
    return match_agent(name, actions) if name else None


@dataclass(frozen=True)
class PuppeteerSystem:
    task_family: Task
    specs: tuple[AgentSpec, ...]
    depth: int = 4  # phi: the most agent steps on a path
    lam: float = 0.1
    cost_unit: float = 100.0  # F = tokens / cost_unit
    prefill: bool = True  # llm policy: start the orchestrator's reply inside <agent>
    files: tuple[str, ...] = ()  # what read_file may open, listed in its prompt
    policy: str = ORCHESTRATOR
    per_token: Mapping[str, float] = field(default_factory=dict)  # agent -> cost of a token (default 1)

    @property
    def actions(self) -> tuple[str, ...]:
        return (*(s.name for s in self.specs), TERMINATOR)

    def start(self, task: TaskItem) -> PuppeteerState:
        return PuppeteerState(task)

    # -- prompts
    def next_step(self, state: PuppeteerState) -> Step:
        if state.pending is not None:
            return Step(state.pending, "agent", state.step, self.agent_messages(state), branch=False)
        return Step(self.policy, ORCHESTRATOR, state.step, self.orchestrator_messages(state))

    def state_text(self, state: PuppeteerState) -> str:
        """The whole state as the orchestrator reads it: the task and a line per step so far."""
        lines = [f"Problem: {state.task.question.strip()}", f"Step {state.step} of at most {self.depth}."]
        for i, w in enumerate(state.history, start=1):
            said = f"answer {w.answer}" if w.answer is not None else "no answer"
            lines.append(f"{i}. {w.agent}: {said}")
        return "\n".join(lines)

    def orchestrator_messages(self, state: PuppeteerState) -> tuple[Message, ...]:
        patterns = ", ".join(f"{p} ({PATTERN_GLOSS[p]})" for p in dict.fromkeys(s.pattern for s in self.specs))
        agents = "; ".join(f"{i} {s.name}" for i, s in enumerate(self.specs, 1))
        system = ORCHESTRATOR_PROMPT.format(terminator=TERMINATOR, patterns=patterns, agents=agents)
        messages = (Message("system", system), Message("user", self.state_text(state)))
        return messages + ((Message("assistant", "<agent>"),) if self.prefill else ())

    def agent_messages(self, state: PuppeteerState) -> tuple[Message, ...]:
        spec = self._spec(state.pending)
        user = f"Problem: {state.task.question.strip()}"
        if state.history:
            shown = state.history[-SHOWN:]
            work = "\n\n".join(f"[{w.agent}]\n{w.text.strip()[:EXCERPT]}" for w in shown)
            user += f"\n\nWork so far:\n{work}"
        return (Message("system", spec.system_prompt(self.files)), Message("user", user))

    def _spec(self, name: str) -> AgentSpec:
        return next(s for s in self.specs if s.name == name)

    # -- transitions
    def advance(self, state: PuppeteerState, step: Step, reply: Reply) -> Transition:
        if state.pending is not None:
            return self._agent_answered(state, reply)
        text = ("<agent>" + reply.text) if self.prefill and reply.response_ids is not None else reply.text
        choice = parse_choice(text, self.actions)
        if choice is None or choice == TERMINATOR:
            r = self.terminal_reward(state)
            terms = {"correct": r, "steps": float(len(state.history)), "format_error": float(choice is None)}
            return Transition(state, choice, terms, reward=r, done=True)  # C_T = 0: the terminator does no work
        return Transition(replace(state, pending=choice), choice, {}, reward=0.0, done=False)

    def _agent_answered(self, state: PuppeteerState, reply: Reply) -> Transition:
        answer = self.task_family.extract_answer(reply.text)
        t = state.step
        f = (reply.tokens_in + reply.tokens_out) * self.per_token.get(state.pending, 1.0) / self.cost_unit
        cost = step_cost(f, t, self.depth)
        nxt = PuppeteerState(state.task, (*state.history, Work(state.pending, reply.text, answer)))
        if t >= self.depth:  # the depth limit: this agent's step is the last, R_T = r - lambda C_T
            r = self.terminal_reward(nxt)
            terms = {"correct": r, "steps": float(t), "format_error": 0.0, "cost": cost}
            return Transition(nxt, answer, terms, reward=r - self.lam * cost, done=True)
        return Transition(nxt, answer, {"cost": cost}, reward=-self.lam * cost, done=False)

    def terminal_reward(self, state: PuppeteerState) -> float:
        """r: 1 if the path's final answer (the last one stated) is correct."""
        a = state.answer
        return float(a is not None and self.task_family.score(state.task, a) > 0)

    # -- between steps
    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Topology and cost of this step's orchestrations, and the majority-vote accuracy."""
        metrics = topology_metrics(episodes)
        metrics["vote_accuracy"] = vote_accuracy(self.task_family, episodes)
        leaves = [leaf for ep in episodes for leaf in ep.leaves() if not leaf.failed]
        if leaves:
            metrics["terminated"] = sum(1.0 for c in leaves if c.action == TERMINATOR) / len(leaves)
            metrics["format_error"] = sum(c.rewards.get("format_error", 0.0) for c in leaves) / len(leaves)
        return metrics


def path_answer(episode: Episode, leaf) -> str | None:
    """The last answer an agent stated on the path to `leaf`."""
    answers = [c.action for c in episode.path(leaf) if c.role == "agent" and isinstance(c.action, str)]
    return answers[-1] if answers else None


def voted_answer(task: Task, episode: Episode) -> str | None:
    """Majority vote over the final answers of the episode's paths (ties: first path's answer)."""
    answers = [path_answer(episode, leaf) for leaf in episode.leaves() if not leaf.failed]

    def same(a: str, b: str) -> bool:
        return a.strip() == b.strip() or task.score(TaskItem("vote", "", a), b) > 0

    return majority_vote(answers, same)


def vote_accuracy(task: Task, episodes: Sequence[Episode]) -> float:
    if not episodes:
        return 0.0
    hits = 0
    for ep in episodes:
        a = voted_answer(task, ep)
        hits += int(a is not None and task.score(ep.task, a) > 0)
    return hits / len(episodes)


# ---------------------------------------------------------------- from config
def build_puppeteer(config, task: Task) -> Built:
    """The agent space over the configured pool's models, the tools, and the orchestrator policy."""
    p = config.system
    models = build_pool(p.pool, task)
    try:
        specs = agent_space(list(models), p.patterns, p.tools)
        tools = build_tools(p.tools, p.folder)
    except ValueError as exc:
        raise ConfigError(f"system: {exc}") from None
    files = tuple(list_files(resolve_folder(p.folder))) if p.folder else ()
    per_token: dict[str, float] = {}
    if p.cost == "flops":
        missing = sorted(set(models) - set(p.model_params))
        if missing:
            raise ConfigError(f"system.cost 'flops' needs system.model_params (billions) for {missing}")
        per_token = {s.name: 2.0 * p.model_params[s.model] for s in specs}  # GFLOPs per token
    frozen = space_agents(specs, models, tools)
    system = PuppeteerSystem(
        task, tuple(specs), depth=p.depth, lam=p.lam, cost_unit=p.cost_unit,
        prefill=p.prefill, files=files, per_token=per_token,
    )  # fmt: skip
    if p.policy == "llm":
        return Built(system, {ORCHESTRATOR: ORCHESTRATOR}, frozen=frozen, stop=("</agent>",))
    return Built(system, {}, frozen=frozen, heads={ORCHESTRATOR: build_head(config, system.actions)})


def build_head(config, actions: Sequence[str]) -> Head:
    p = config.system
    encode, dim = build_encoder(p.encoder, config.model.name)
    # a rollout by place embeds each state alone: which states share a padded batch follows arrival order
    encoder = BatchedEncoder(encode, alone=config.rollout.order == "place")  # shared by both agents
    head = scoring_head(dim, len(actions), p.head_hidden, seed=config.run.seed)
    sample = HeadAgent(ORCHESTRATOR, head, encoder, actions, config.rollout.temperature)
    greedy = HeadAgent(ORCHESTRATOR, head, encoder, actions, greedy=True)
    learner = HeadLearner(ORCHESTRATOR, head, lr=p.head_lr, max_grad_norm=config.trainer.max_grad_norm,
                          nonfinite=config.trainer.nonfinite)
    return Head(sample, greedy, learner)
