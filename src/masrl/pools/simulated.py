"""A SIMULATED agent pool: calibrated stand-ins for LLM agents of graded strength.

Nothing here runs a language model. A `SimulatedAgent` answers a math item by
drawing its correctness from an item-response model and then writing a short
worked solution that ends in the item's gold answer (when the draw says
correct) or in a plausibly wrong number (when it says wrong). It exists so the
critique-and-routing controller (issue 3; paper `critique-routing-controller`
section 4) can be trained and tested on a CPU in minutes, with a pool whose
accuracies and prices have the shape of the paper's weak / medium / strong
agents. Results on this pool are results on a simulation, and are named so.

Item-response model (a two-parameter logistic, "2PL")::

    P(correct | agent, item) = sigmoid(DISCRIMINATION * (ability - difficulty(item)))

`difficulty(item)` = a score from the task generator's own difficulty
metadata, plus a latent per-item offset (below). The score, in order of
precedence:

- ``metadata["difficulty_score"]`` when the item carries one (any task can
  set it explicitly);
- reasoning-gym arithmetic (``basic_arithmetic``, ``chain_sum``: metadata has
  ``num_terms``, ``num_digits``, ``expression``)::

      0.5 * (num_terms - 2) + 0.5 * (num_digits - 1)
      + 1.0 * [the expression multiplies or divides] + 0.25 * [it has parentheses]

  so masrl's "easy" level scores 0-0.5, "medium" 0-2.25, "hard" 0-4.75;
- reasoning-gym ``gsm_symbolic`` (metadata ``answer_cot``, one line per
  reasoning step before ``####``): ``0.75 * (steps - 1)``;
- a numeric ``metadata["difficulty"]``, else 1.0.

The latent offset is Normal(0, ITEM_NOISE) drawn from a hash of the question
text alone: it is a property of the item, shared by every agent and every
seed, so the agents' errors are correlated the way real models' are (an item
the strong agent misses is one the weak agent likely misses too) and the
visible features predict difficulty well but not perfectly.

Draws are reproducible: correctness and the shape of a wrong answer come from
a SHA-256 of (seed, agent name, item id, question, attempt index, purpose),
never from global random state. The attempt index of a call is how many times
this agent has already answered that item (`reset()` restarts the count), so
repeated calls are independent draws and a re-run replays them exactly.
`reply_for(item, messages, attempt)` is the pure function behind a call.

Calibration (`simulated_pool("three")`): the abilities are fitted so the expected accuracy
over reasoning-gym ``basic_arithmetic`` (masrl's easy / medium / hard levels,
`calibration_items`) hits 0.35 / 0.60 / 0.85, with prices stepping by 10x between
neighbours; the fit and what it gives on other generators are in docs/pools.md.

The reply text (worked solutions, right and wrong, consistent or visible drafts) and the
hashed draws: masrl.pools.drafts.
"""

from __future__ import annotations

import copy
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from masrl.agents.base import approx_tokens
from masrl.pools.drafts import CONSISTENT, DraftStyle, consistent_draft, previous_answer, uniform, visible_draft
from masrl.tasks.math import LEVELS, MathTask, extract_math_answer, math_equal
from masrl.types import AgentError, Message, Price, Reply, TaskItem

DISCRIMINATION = 1.5  # the 2PL slope `a`
ITEM_NOISE = 0.5  # std of the latent per-item difficulty offset
DEFAULT_DIFFICULTY = 1.0  # an item with no usable difficulty metadata


# ---- difficulty and probability ---------------------------------------------


def difficulty_score(item: TaskItem) -> float:
    """The item's difficulty from its generator's metadata (module docstring), without the latent offset."""
    meta = item.metadata
    explicit = meta.get("difficulty_score")
    if isinstance(explicit, (int, float)) and not isinstance(explicit, bool):
        return float(explicit)
    if "num_terms" in meta and "num_digits" in meta:
        expression = str(meta.get("expression", ""))
        return (
            0.5 * (int(meta["num_terms"]) - 2)
            + 0.5 * (int(meta["num_digits"]) - 1)
            + 1.0 * bool(re.search(r"[*/]", expression))
            + 0.25 * ("(" in expression)
        )
    cot = meta.get("answer_cot")
    if isinstance(cot, str):
        steps = [line for line in cot.split("####")[0].splitlines() if line.strip()]
        return 0.75 * max(0, len(steps) - 1)
    level = meta.get("difficulty")
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        return float(level)
    return DEFAULT_DIFFICULTY


def latent_offset(item: TaskItem, noise: float = ITEM_NOISE) -> float:
    """The item's hidden extra difficulty: Normal(0, noise) from a hash of its question (no seed)."""
    if noise == 0.0:
        return 0.0
    u1, u2 = uniform("latent", item.question, 1), uniform("latent", item.question, 2)
    return noise * math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(2.0 * math.pi * u2)  # Box-Muller


def difficulty(item: TaskItem, noise: float = ITEM_NOISE) -> float:
    return difficulty_score(item) + latent_offset(item, noise)


def correct_probability(agent: SimulatedAgent, item: TaskItem) -> float:
    """P(`agent` answers `item` correctly) under the item-response model."""
    return 1.0 / (1.0 + math.exp(-agent.discrimination * (agent.ability - difficulty(item, agent.item_noise))))


# ---- the agent ----------------------------------------------------------------


class ItemIndex:
    """Finds the task item a conversation is about, by its question text.

    Items come from a list given up front, from `add`, or from a task's
    `known_items()` (every item it has generated so far), read when a question
    is not yet known and the task's optional `known_count()` says it has new
    items. A task without `known_items` must have its items `add`-ed.
    """

    def __init__(self, source: Any = None):
        self._by_question: dict[str, TaskItem] = {}
        self._task = None
        self._seen_from_task = 0
        self._memo: dict[str, TaskItem] = {}  # prompt text -> item found inside it
        if isinstance(source, ItemIndex):
            raise TypeError("pass the ItemIndex itself, not wrapped")
        if isinstance(source, Iterable) and not isinstance(source, (str, Mapping)):
            self.add(source)
        elif source is not None:
            self._task = source

    def add(self, items: Iterable[TaskItem]) -> None:
        for item in items:
            self._by_question[item.question.strip()] = item
        self._memo.clear()

    def find(self, text: str) -> TaskItem | None:
        """The item whose question is `text`, or the longest known question inside `text`."""
        text = text.strip()
        if text in self._by_question:
            return self._by_question[text]
        if text in self._memo:
            return self._memo[text]
        self._pull_from_task()
        found = self._by_question.get(text)
        if found is None:
            inside = [q for q in self._by_question if q and q in text]
            found = self._by_question[max(inside, key=len)] if inside else None
        if found is not None:  # a miss is not remembered: the task may generate the item later
            if len(self._memo) >= 10_000:
                self._memo.clear()
            self._memo[text] = found
        return found

    def _pull_from_task(self) -> None:
        known = getattr(self._task, "known_items", None)
        if known is None:
            return
        count = getattr(self._task, "known_count", None)
        if count is not None and count() == self._seen_from_task:
            return  # nothing new: skip rebuilding the task's item list (a miss per prompt adds up)
        items = known()
        if len(items) != self._seen_from_task:
            self._seen_from_task = len(items)
            self.add(items)


class SimulatedAgent:
    """A simulated LLM agent: 2PL correctness draws, worked-solution text, priced tokens."""

    def __init__(
        self,
        name: str,
        ability: float,
        price: Price,
        seed: int = 0,
        task: Any = None,
        discrimination: float = DISCRIMINATION,
        item_noise: float = ITEM_NOISE,
        drafts: DraftStyle | None = None,
    ):
        self.name = name
        self.drafts = drafts or CONSISTENT
        self.ability = float(ability)
        self.price = price
        self.seed = seed
        self.discrimination = discrimination
        self.item_noise = item_noise
        self.items = task if isinstance(task, ItemIndex) else ItemIndex(task)
        self._attempts: dict[str, int] = defaultdict(int)

    def reset(self) -> None:
        """Start every item's attempt count again from 0 (an eval replays the same draws)."""
        self._attempts.clear()

    def fork(self) -> "SimulatedAgent":
        """The same agent for one independent episode: its attempt counts start again from 0 (a served
        request draws what a reset evaluation draws), sharing the item index, leaving this one's counts alone."""
        other = copy.copy(self)
        other._attempts = defaultdict(int)
        return other

    def state_dict(self) -> dict[str, dict[str, int]]:
        """The attempt counts, saved in checkpoints so a resumed run draws what it would have."""
        return {"attempts": dict(self._attempts)}

    def load_state_dict(self, state: Mapping[str, Mapping[str, int]]) -> None:
        self._attempts = defaultdict(int, {k: int(v) for k, v in state["attempts"].items()})

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        messages = tuple(messages)
        item = None
        for m in reversed(messages):
            if m.role == "user":
                item = self.items.find(m.content)
                if item is not None:
                    break
        if item is None:
            raise AgentError(f"{self.name}: simulated agent knows no task item whose question is in this conversation")
        attempt = self._attempts[item.id]
        self._attempts[item.id] += 1
        return self.reply_for(item, messages, attempt)

    def is_correct(self, item: TaskItem, attempt: int = 0) -> bool:
        return uniform(self.seed, self.name, item.id, item.question, attempt, "correct") < correct_probability(
            self, item
        )

    def reply_for(self, item: TaskItem, messages: Sequence[Message] = (), attempt: int = 0) -> Reply:
        """The reply to `messages` about `item` on the given attempt: pure and reproducible."""
        correct = self.is_correct(item, attempt)
        key = (self.seed, self.name, item.id, item.question, attempt)
        previous = previous_answer(messages)
        text = visible_draft(item, correct, key, self.drafts, previous) if self.drafts.visible_rate is not None else None
        if text is None:  # consistent drafts (or an item visible drafts cannot write out)
            text = consistent_draft(item, correct, key, previous)
        n_in = sum(approx_tokens(m.content) for m in messages) or approx_tokens(item.question)
        n_out = approx_tokens(text)
        return Reply(text=text, tokens_in=n_in, tokens_out=n_out, cost=self.price.cost(n_in, n_out))


def measure_accuracy(agent: SimulatedAgent, items: Sequence[TaskItem], attempt: int = 0) -> float:
    """Share of `items` the agent answers correctly on `attempt`, graded from its reply text
    the way a task grades a real model (extract_math_answer, then math_equal)."""
    if not items:
        return 0.0
    right = 0
    for item in items:
        reply = agent.reply_for(item, (Message("user", item.question),), attempt)
        answer = extract_math_answer(reply.text)
        right += answer is not None and math_equal(item.answer, answer)
    return right / len(items)


def expected_accuracy(agent: SimulatedAgent, items: Sequence[TaskItem]) -> float:
    """Mean `correct_probability` over `items` (what `measure_accuracy` estimates)."""
    return sum(correct_probability(agent, item) for item in items) / max(1, len(items))


def calibration_items(per_level: int = 100, seed: int = 0, dataset: str = "basic_arithmetic") -> list[TaskItem]:
    """`per_level` train items at each of masrl's easy / medium / hard levels: the calibration mix."""
    items: list[TaskItem] = []
    for level in LEVELS:
        task = MathTask(dataset, seed=seed, difficulty=level, chunk_size=max(50, per_level + per_level // 4))
        items += [
            TaskItem(f"{level}/{it.id}", it.question, it.answer, it.metadata)
            for it in task.items("train", 0, per_level)
        ]
    return items


# ---- pools ----------------------------------------------------------------------

# (name, ability, price): fitted by `fit_ability` on calibration_items(1000) (docstring table).
THREE = (
    ("sim-weak", 0.50, Price(input_per_1k=0.00002, output_per_1k=0.00006)),
    ("sim-medium", 1.62, Price(input_per_1k=0.0002, output_per_1k=0.0006)),
    ("sim-strong", 3.21, Price(input_per_1k=0.002, output_per_1k=0.006)),
)


def fit_ability(target: float, items: Sequence[TaskItem], discrimination: float = DISCRIMINATION) -> float:
    """The ability whose expected accuracy on `items` is `target` (bisection; accuracy rises with ability)."""
    probe = SimulatedAgent("fit", 0.0, Price(), discrimination=discrimination)
    lo, hi = -10.0, 10.0
    for _ in range(60):
        probe.ability = (lo + hi) / 2
        lo, hi = (probe.ability, hi) if expected_accuracy(probe, items) < target else (lo, probe.ability)
    return (lo + hi) / 2


def _pool(spec: Sequence[tuple[str, float, Price]], seed: int, task: Any, drafts: DraftStyle) -> dict[str, SimulatedAgent]:
    index = task if isinstance(task, ItemIndex) else ItemIndex(task)  # one index shared by the pool
    return {name: SimulatedAgent(name, ability, price, seed, index, drafts=drafts) for name, ability, price in spec}


def three_pool(seed: int = 0, task: Any = None, drafts: DraftStyle = CONSISTENT) -> dict[str, SimulatedAgent]:
    return _pool(THREE, seed, task, drafts)


def two_pool(seed: int = 0, task: Any = None, drafts: DraftStyle = CONSISTENT) -> dict[str, SimulatedAgent]:
    return _pool((THREE[0], THREE[2]), seed, task, drafts)


def simulated_pool(
    kind: str = "three", seed: int = 0, task: Any = None, drafts: DraftStyle = CONSISTENT
) -> dict[str, SimulatedAgent]:
    """A simulated pool, agents ordered weak to strong (dict order).

    `task` is where the agents find the item a conversation asks about: a
    `MathTask` (its generated items are found as it makes them), a list of
    `TaskItem`s, an `ItemIndex`, or None (then `add` items to
    ``next(iter(pool.values())).items``, which the pool's agents share).
    """
    if kind not in POOLS:
        raise ValueError(f"unknown simulated pool {kind!r}; valid kinds: {', '.join(sorted(POOLS))}")
    return POOLS[kind](seed=seed, task=task, drafts=drafts)


POOLS = {"three": three_pool, "two": two_pool}
