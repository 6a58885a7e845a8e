"""The budget-controllable controller, CoRL (paper: arXiv:2511.02755, sections 3-5, appendix A).

A trainable controller reads a math problem and the budget mode of the
request (low / medium / high, written into its prompt after the problem, sec. 3.3 eq. 8)
and, each round, either answers itself or sends a sub-query to one named
expert from a priced pool (sec. 3.1, eqs. 1-3). The expert's reply is appended
to the conversation and the controller goes on, for at most R rounds; the last
round must answer. Our protocol (own wording, parsed by rules like the paper's
`f_select` / `f_query`):

    <answer>ANSWER</answer>              final answer, ends the episode
    <call>EXPERT: sub-query</call>       ask EXPERT; no ": sub-query" sends the problem itself

The first complete tag wins. Anything else (no tag, an unknown expert, a call
in the last round) is a *format failure*: the episode ends unanswered, never
an exception.

`decide_first` is the same protocol with the decision made a tag choice, for
controllers too small to write the tags unprompted (SmolLM2-135M writes them
in under 1 sample in 10): each round's reply is prefilled with the mode and
`<call>` ("high budget: <call>") and names an expert or `none`; after `none`
(and in the last round) a second controller call, role "answer", is prefilled
with `<answer>`. With `numbered`
the options are numbers (`<call>0</call>` answers alone, `<call>k</call>` asks
the k-th cheapest expert): a 135M controller writes digits readily but almost
never an expert's full name, so with names it explores only the first-listed
expert.

Cost (sec. 3.3): every call is priced from a price table (dollars per 1k input
and output tokens) on the tokens the backend reported, and summed over the
episode's path. Rewards at the final controller call:

    r_perf = 1 if the answer is correct
    hard   = r_perf * [cost <= B_mode]                     (eq. 7, the paper's reward)
    soft   = r_perf - soft_penalty * cost / B_mode         (our variant: spend priced in budgets)

`system.reward` picks which one is trained on; both are logged. No format
reward by default (sec. 3.3 drops it); `format_weight` adds one for small models.

Modes: during training each task draws its mode from a hash of (seed, task
id), so the G samples of one task share it and GRPO compares like with like;
evaluation fixes one mode at a time (`with_mode`).

Expert tokens are never trained (eq. 4's mask I(y_t)): each controller round
is its own call whose response holds only the controller's tokens; the expert
replies live in the next round's prompt, which is context, never a target.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from masrl.systems.api import (
    Built, ConfigError, Episode, Message, Price, Reply, Step, Task, TaskItem, Transition, build_pool, match_agent,
    option_number,
)
from masrl.systems.budget.action import Action, ActionKind, LabelStyle
from masrl.systems.budget.experts import priced_pool
from masrl.systems.budget.rewards import RewardSettings, budget_reward, call_cost

CONTROLLER = "controller"
PAPER_BUDGETS = {"low": 0.001, "medium": 0.006, "high": 1000.0}  # dollars per query, appendix A

DECIDE_PROMPT = (
    "Decide who solves the math problem: {options}. none means you solve it yourself; the others are paid "
    "experts, cheapest first ({prices})."
)
DECIDE_NUMBERED_PROMPT = (
    "Decide who solves the math problem and reply with one number: {options}. Experts are paid; the higher "
    "the number, the stronger and pricier the expert."
)
ANSWER_NOW = "Now give the final answer as <answer>ANSWER</answer>."
ALONE = "none"  # decide_first: the controller answers itself
ANSWER = "answer"  # decide_first: the role of the answering call
SYSTEM_PROMPT = (
    "You coordinate paid experts to solve a math problem. Think briefly, then do one of two things: "
    "answer yourself as <answer>ANSWER</answer>, or ask one expert as <call>EXPERT: your question</call> "
    "and wait for the reply. Experts, cheapest first: {experts}."
)
# Each mode's instruction names the options it prefers by what the controller writes for them
# ({alone}, {cheapest}, {middle}, {strongest}: names, or numbers with budget.labels=numbers), like the paper's
# per-mode prompts (appendix B.2), which tell the controller which experts suit the mode; a 135M
# controller can copy an option it is shown but not map "the strongest expert" to it.
MODE_TEXT = {
    "low": "Budget mode: low (at most ${budget:g} per problem). Solve it yourself ({alone}) when you can; "
    "call only the cheapest expert ({cheapest}).",
    "medium": "Budget mode: medium (at most ${budget:g} per problem). Call a mid-priced expert ({middle}) when "
    "it helps; the most expensive one is over budget.",
    "high": "Budget mode: high (at most ${budget:g} per problem). Ask the strongest expert ({strongest}) "
    "whenever it helps.",
}
GENERIC_MODE_TEXT = "Budget mode: {name} (at most ${budget:g} per problem)."
# The problem, then the mode's line: the user turn ends with the mode, next to the decision. In a probe of
# the untrained SmolLM2-135M (docs/budget.md), its first decision depended on the mode only with the line
# here, not at the end of the system prompt, where the listed options lay between it and the decision.
PROBLEM = "Problem: {question}\n\n{mode}"
# decide_first: each decision is prefilled with the mode, the controller restating it before choosing.
DECIDE_PREFILL = "{mode} budget: <call>"
EXPERT_PROMPT = (
    "You are an expert problem solver. Show brief steps and end with the final answer as <answer>ANSWER</answer>."
)
EXPERT_QUERY = "Problem: {question}\n\nThe coordinator asks: {query}"
REPLY_NEXT = "Reply from {expert}:\n{reply}\n\nAnswer as <answer>ANSWER</answer>, or call another expert."
DECIDE_REPLY_NEXT = "Reply from {expert}:\n{reply}\n\nChoose again: <call>none</call> to answer now, or another expert."
DECIDE_NUMBERED_NEXT = "Reply from {expert}:\n{reply}\n\nChoose again: <call>0</call> to answer now, or an expert's number."
REPLY_LAST = "Reply from {expert}:\n{reply}\n\nNo more calls: answer now as <answer>ANSWER</answer>."


# ---------------------------------------------------------------- modes and prices
@dataclass(frozen=True)
class BudgetMode:
    name: str
    budget: float  # B: dollars per query

    def instruction(self, alone: str, cheapest: str, middle: str, strongest: str) -> str:
        """The mode's line of the prompt; the arguments are the labels of the options it names."""
        text = MODE_TEXT.get(self.name, GENERIC_MODE_TEXT)
        labels = dict(alone=alone, cheapest=cheapest, middle=middle, strongest=strongest)
        return text.format(name=self.name, budget=self.budget, **labels)


def draw_mode(seed: int, task_id: str, modes: Sequence[BudgetMode], probs: Sequence[float]) -> BudgetMode:
    """The mode of one training task: a reproducible draw from `probs` keyed by (seed, task id)."""
    if len(modes) != len(probs) or not modes:
        raise ValueError("draw_mode needs one probability per mode")
    total = sum(probs)
    digest = hashlib.sha256(f"{seed}\x1fmode\x1f{task_id}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64 * total
    acc = 0.0
    for mode, p in zip(modes, probs):
        acc += p
        if u < acc:
            return mode
    return modes[-1]


def option_order(seed: int, task_id: str, n: int) -> list[int]:
    """The order the n options are listed in for one task: a permutation keyed by (seed, task id).

    Why: a 135M controller mostly copies the first- or second-listed option, so with a fixed order it
    never tries the last ones (the strong expert) and RL cannot learn when they pay. Drawing the
    order per task spreads that bias over every option while each option keeps its number, which
    is what the policy learns to write."""
    keys = [hashlib.sha256(f"{seed}\x1forder\x1f{task_id}\x1f{i}".encode()).digest() for i in range(n)]
    return sorted(range(n), key=lambda i: keys[i])


# ---------------------------------------------------------------- the action
_TAG = re.compile(r"<(answer|call)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)


def parse_action(
    text: str, experts: Sequence[str], can_call: bool, alone: str | None = None, numbered: bool = False
) -> Action:
    """The controller's decision in `text`; never raises. The first complete tag decides.

    With `alone` set (decide_first), `<call>ALONE</call>` is the choice to answer itself: kind ALONE.
    With `numbered`, a call names a number instead: 0 answers alone, k the k-th expert of `experts`."""
    found = _TAG.search(text)
    if found is None:
        return Action(ActionKind.FORMAT_ERROR, reason="no <answer> or <call> tag")
    tag, body = found.group(1).lower(), found.group(2).strip()
    if tag == "answer":
        if not body:
            return Action(ActionKind.FORMAT_ERROR, reason="empty <answer>")
        return Action(ActionKind.ANSWER, answer=body)
    name, _, query = body.partition(":")
    if alone is not None and name.strip().strip("\"'`").strip().lower() == alone:
        return Action(ActionKind.ALONE)
    if numbered:
        number = name.strip()
        k = option_number(number)
        if k is None or k > len(experts):
            return Action(ActionKind.FORMAT_ERROR, reason=f"not an option number: {number[:40]!r}")
        if k == 0:
            return Action(ActionKind.ALONE)
        name = experts[k - 1]
    expert = match_agent(name, experts)
    if expert is None:
        return Action(ActionKind.FORMAT_ERROR, reason=f"unknown expert {name.strip()[:40]!r}")
    if not can_call:
        return Action(ActionKind.FORMAT_ERROR, agent=expert, reason="a call in the last round")
    return Action(ActionKind.CALL, agent=expert, query=query.strip())


# ---------------------------------------------------------------- the system
@dataclass(frozen=True)
class Consultation:
    controller: str  # the controller's full text of the round that made the call
    expert: str
    reply: str


@dataclass(frozen=True)
class BudgetState:
    task: TaskItem
    mode: BudgetMode
    round: int = 1  # the controller round about to happen (or the pending expert's)
    cost: float = 0.0  # dollars spent so far on this path
    history: tuple[Consultation, ...] = ()
    pending: Action | None = None  # a call waiting for its expert
    pending_text: str = ""
    answering: str | None = None  # decide_first: the round's decision text, when it chose to answer alone


@dataclass(frozen=True)
class BudgetSystem:
    task_family: Task
    experts: tuple[str, ...]  # cheapest first, as shown in the prompt
    prices: Mapping[str, Price]
    modes: tuple[BudgetMode, ...]
    mode_probs: tuple[float, ...]
    rewards: RewardSettings = RewardSettings()
    max_rounds: int = 3
    prefill: str = ""  # text the controller's reply starts with (part of its prompt)
    seed: int = 0
    fixed_mode: str | None = None  # evaluation: every task in this mode
    decide_first: bool = False  # the decision as a prefilled <call> choice (module docstring)
    numbered: bool = False  # decide_first: options are numbers, 0 = answer alone
    shuffled: bool = False  # numbered: options listed in an order drawn per task (option_order)
    policy: str = CONTROLLER

    def __post_init__(self):
        if self.max_rounds < 1:
            raise ValueError("max_rounds must be >= 1")
        if not self.experts:
            raise ValueError("the budget system needs at least one expert")
        if self.numbered and not self.decide_first:
            raise ValueError("numbered options need decide_first")
        if self.shuffled and not self.numbered:
            raise ValueError("shuffled options need numbered options")
        if self.fixed_mode is not None and self.fixed_mode not in self.mode_names:
            raise ValueError(f"unknown budget mode {self.fixed_mode!r}; modes: {list(self.mode_names)}")

    def label(self, option: str) -> str:
        """What the controller writes in `<call>` for `option` (an expert, or ALONE): the name, or with
        numbered options its number (0 = alone, k = the k-th expert)."""
        if not self.numbered:
            return option
        return "0" if option == ALONE else str(self.experts.index(option) + 1)

    @property
    def mode_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modes)

    def with_mode(self, mode: str | None) -> "BudgetSystem":
        """The same system with every task in `mode` (None: draw per task again)."""
        return replace(self, fixed_mode=mode)

    def mode_for(self, task: TaskItem) -> BudgetMode:
        if self.fixed_mode is not None:
            return next(m for m in self.modes if m.name == self.fixed_mode)
        return draw_mode(self.seed, task.id, self.modes, self.mode_probs)

    def start(self, task: TaskItem) -> BudgetState:
        return BudgetState(task, self.mode_for(task))

    # -- prompts
    def next_step(self, state: BudgetState) -> Step:
        if state.pending is not None:
            return Step(state.pending.agent, "expert", state.round, self.expert_messages(state), branch=False)
        role = ANSWER if self._answering(state) else CONTROLLER
        return Step(self.policy, role, state.round, self.controller_messages(state))

    def _answering(self, state: BudgetState) -> bool:
        """decide_first: this controller call must answer (it chose to, or no calls are left)."""
        return self.decide_first and (state.answering is not None or state.round >= self.max_rounds)

    def _prefill(self, state: BudgetState) -> str:
        if not self.decide_first:
            return self.prefill
        return "<answer>" if self._answering(state) else DECIDE_PREFILL.format(mode=state.mode.name)

    def controller_messages(self, state: BudgetState) -> tuple[Message, ...]:
        """System (protocol, priced experts), the problem and the mode, then each earlier round and its expert reply."""
        alone = self.label(ALONE) if self.decide_first else "<answer>"
        ex = self.experts
        mode = state.mode.instruction(alone, self.label(ex[0]), self.label(ex[len(ex) // 2]), self.label(ex[-1]))
        priced = {e: f"{e} (${self.prices[e].output_per_1k:g}/1k out)" if e in self.prices else e for e in ex}
        if self.numbered:  # numbered tags to copy: digits come easily to a small model
            listed = [f"<call>{self.label(ALONE)}</call> you answer yourself"]
            listed += [f"<call>{self.label(e)}</call> {priced[e]}" for e in ex]
            if self.shuffled:
                listed = [listed[i] for i in option_order(self.seed, state.task.id, len(listed))]
            system = DECIDE_NUMBERED_PROMPT.format(options="; ".join(listed))
        elif self.decide_first:  # the options written as the tags to copy, as a small model needs them
            options = ", ".join(f"<call>{name}</call>" for name in (ALONE, *ex))
            prices = ", ".join(f"${self.prices[e].output_per_1k:g}/1k out" for e in ex if e in self.prices)
            system = DECIDE_PROMPT.format(options=options, prices=prices)
        else:
            system = SYSTEM_PROMPT.format(experts=", ".join(priced.values()))
        user = PROBLEM.format(question=state.task.question.strip(), mode=mode)
        messages = [Message("system", system), Message("user", user)]
        next_template = DECIDE_NUMBERED_NEXT if self.numbered else DECIDE_REPLY_NEXT if self.decide_first else REPLY_NEXT
        for i, past in enumerate(state.history, start=2):
            template = REPLY_LAST if i >= self.max_rounds else next_template
            reply = template.format(expert=past.expert, reply=past.reply)
            messages += [Message("assistant", past.controller), Message("user", reply)]
        if state.answering is not None:
            messages += [Message("assistant", state.answering), Message("user", ANSWER_NOW)]
        prefill = self._prefill(state)
        if prefill:
            messages.append(Message("assistant", prefill))
        return tuple(messages)

    def expert_messages(self, state: BudgetState) -> tuple[Message, ...]:
        """The expert sees the problem and the sub-query (a simulated expert finds its item by the problem)."""
        q = state.task.question.strip()
        query = state.pending.query or q
        user = q if query == q else EXPERT_QUERY.format(question=q, query=query)
        return (Message("system", EXPERT_PROMPT), Message("user", user))

    # -- transitions
    def advance(self, state: BudgetState, step: Step, reply: Reply) -> Transition:
        spent = call_cost(self.prices, step.agent, reply.tokens_in, reply.tokens_out)
        if state.pending is not None:  # the expert answered: append its reply, next round
            past = Consultation(state.pending_text, state.pending.agent, reply.text.strip())
            nxt = replace(state, round=state.round + 1, cost=state.cost + spent, history=state.history + (past,),
                          pending=None, pending_text="")  # fmt: skip
            return Transition(nxt, None, {"call_cost": spent}, 0.0, done=False)
        text = self._prefill(state) + reply.text
        alone = ALONE if self.decide_first else None
        action = parse_action(
            text, self.experts, can_call=state.round < self.max_rounds, alone=alone, numbered=self.numbered
        )
        if self._answering(state) and action.kind == ActionKind.CALL:
            action = Action(ActionKind.FORMAT_ERROR, agent=action.agent, reason="a call where an answer is due")
        cost = state.cost + spent
        if action.kind == ActionKind.CALL:
            nxt = replace(state, cost=cost, pending=action, pending_text=text)
            return Transition(nxt, action, {}, 0.0, done=False)
        if action.kind == ActionKind.ALONE:
            return Transition(replace(state, cost=cost, answering=text), action, {}, 0.0, done=False)
        answered = action.kind == ActionKind.ANSWER
        correct = answered and self.task_family.score(state.task, self._answer(action.answer)) > 0
        terms = budget_reward(correct, cost, state.mode.budget, action.kind != ActionKind.FORMAT_ERROR, self.rewards)
        reward = terms.pop("reward")
        terms["expert_calls"] = float(len(state.history))
        terms["answered_alone"] = float(action.kind == ActionKind.ANSWER and not state.history)
        return Transition(replace(state, cost=cost), action, terms, reward, done=True)

    def _answer(self, body: str) -> str:
        """The task's reading of the <answer> body ("x = 42" -> "x = 42", "$42" -> "42"), else the body."""
        return self.task_family.extract_answer(f"<answer>{body}</answer>") or body

    # -- between steps
    def observe(self, episodes: Sequence[Episode]) -> dict[str, float]:
        """Per-mode means over this step's finished trajectories: cost, correctness, hard reward, expert calls."""
        sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for ep in episodes:
            mode = self.mode_for(ep.task).name
            failed = ep.failed_ids()
            for leaf in ep.leaves():
                if leaf.id in failed or not leaf.done:
                    continue
                s = sums[mode]
                s["n"] += 1
                for k in ("cost", "correct", "hard", "soft", "expert_calls", "within_budget"):
                    s[k] += leaf.rewards.get(k, 0.0)
        return {f"mode/{m}/{k}": v / s["n"] for m, s in sums.items() for k, v in s.items() if k != "n"} | {
            f"mode/{m}/trajectories": s["n"] for m, s in sums.items()
        }


# ---------------------------------------------------------------- from config
def build_budget(config, task: Task) -> Built:
    """The controller over a priced expert pool, with the configured modes, prices and reward."""
    b = config.system
    if b.experts == "simulated":
        pool = priced_pool(seed=b.pool.seed, task=task)
    else:
        pool = build_pool(b.pool, task)
    prices = {name: agent.price for name, agent in pool.items() if isinstance(getattr(agent, "price", None), Price)}
    prices.update({name: Price(p.input_per_1k, p.output_per_1k) for name, p in b.prices.items()})
    unknown = set(b.prices) - set(pool) - {CONTROLLER}
    if unknown:
        raise ConfigError(
            f"system.prices names agents that are neither experts nor the controller: {sorted(unknown)}; "
            f"experts: {list(pool)}"
        )
    unpriced = [name for name in pool if name not in prices]
    if unpriced:
        raise ConfigError(f"experts without a price: {unpriced}; set system.prices.<name>.input_per_1k / output_per_1k")
    modes = tuple(BudgetMode(name, float(B)) for name, B in b.modes.items())
    probs = tuple(float(b.mode_probs.get(m.name, 1.0)) for m in modes)
    rewards = RewardSettings(b.reward, b.soft_penalty, b.format_weight)
    system = BudgetSystem(
        task, tuple(pool), prices, modes, probs, rewards, b.max_rounds, b.prefill, config.run.seed,
        decide_first=b.protocol == "decide", numbered=b.labels == LabelStyle.NUMBERS, shuffled=b.shuffle_options,
    )  # fmt: skip
    return Built(system, {CONTROLLER: CONTROLLER}, frozen=pool, stop=("</call>", "</answer>"))
