"""Learners: whatever a training step updates, behind one protocol.

A trainable call's reply names a policy (`Reply.policy`); the training loop
hands that policy's samples to the learner of the same name and never looks
inside. A learner owns its parameters and optimiser state, updates them on a
batch of samples, and writes and reads its own checkpoint files.

`PolicyLearner` is the language-model policy: one LoRA adapter (or the fully
fine-tuned model) of a `PolicyModel`, updated by the token-level clipped
surrogate in `masrl.update`. `ValueLearner` is a critic for PPO with GAE: a
value head (Linear hidden -> 1) on its own LoRA adapter of the same
`PolicyModel` (one copy of the base weights), scoring the state before every
response token and trained by PPO's clipped value loss. Other learners (a
small scoring head over agents) implement the same three methods.

Several processes (`trainer.processes`, masrl.distributed): a learner with
`data_parallel = True` updates on its rank's slice of the batch
(`masrl.distributed.shard`), with the loss normalised by the whole batch, and
sums gradients and metric sums over ranks before its step. A learner without
it updates on the whole batch on every rank: the same step, computed N times.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load_file, save_file

from masrl.agents.policy import PolicyModel
from masrl.algos.losses import value_loss
from masrl.distributed import all_reduce_grads, shard, sum_metrics
from masrl.types import Sample
from masrl.update import UpdateSettings, length, micro_batches, optimizer_step, update_policy

FileWriter = Callable[[Path], None]
CRITIC = "critic"  # the value learner's adapter and learner name (algo.advantage: gae)


class Learner(Protocol):
    name: str

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        """One optimiser step on `samples`; returns metrics (prefixed by the loop with the name)."""
        ...

    def checkpoint_files(self) -> Mapping[str, FileWriter]:
        """Relative path inside a checkpoint -> writer that puts the file there."""
        ...

    def load(self, checkpoint: Path, weights_only: bool = False) -> None:
        """Read back what `checkpoint_files` wrote; `weights_only` skips optimiser state (eval, serve)."""
        ...


class PolicyLearner:
    """One named policy of a `PolicyModel` and its AdamW state."""

    data_parallel = True  # masrl.update shards the batch and all-reduces the gradient

    def __init__(self, model: PolicyModel, policy: str, settings: UpdateSettings, lr: float, weight_decay: float = 0.0):
        self.name = policy
        self.model = model
        self.settings = settings
        self.optimizer = torch.optim.AdamW(model.parameters(policy), lr=lr, weight_decay=weight_decay)

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        return update_policy(self.model, self.name, samples, self.optimizer, self.settings)

    def checkpoint_files(self) -> dict[str, FileWriter]:
        return {
            f"policy/{self.name}.safetensors": lambda path: self.model.save(self.name, path),
            f"optimizer/{self.name}.pt": lambda path: torch.save(self.optimizer.state_dict(), path),
        }

    def load(self, checkpoint: Path, weights_only: bool = False) -> None:
        self.model.load(self.name, checkpoint / "policy" / f"{self.name}.safetensors")
        if not weights_only:
            state = torch.load(checkpoint / "optimizer" / f"{self.name}.pt", weights_only=False)
            self.optimizer.load_state_dict(state)


class ValueLearner:
    """V(s_t) for every response token: a value head on the adapter `name` of a shared `PolicyModel`.

    `values(prompts, responses)` gives the per-token values of calls (no grad,
    in micro-batches); `update(samples)` takes samples whose `returns` and
    `values` hold, per response token, the GAE value target and the value
    predicted at scoring time, and takes `epochs` AdamW steps on the clipped
    value loss (token mean over the batch; micro-batch gradients sum to the
    full batch's). Only the adapter and the head train; the base stays frozen.
    """

    data_parallel = True

    def __init__(
        self,
        model: PolicyModel,
        name: str,
        lr: float,
        clip: float | None = 0.2,
        micro_batch: int = 8,
        epochs: int = 1,
        max_grad_norm: float = 1.0,
        weight_decay: float = 0.0,
        nonfinite: str = "skip",
    ):
        self.name = name
        self.nonfinite = nonfinite
        self.model = model
        self.clip = clip
        self.micro_batch = micro_batch
        self.epochs = epochs
        self.max_grad_norm = max_grad_norm
        # Zero-initialised: every state starts at value 0, so the first advantages are
        # plain returns-to-go instead of the noise of a random projection.
        self.head = torch.nn.Linear(model.hidden_size, 1, device=model.placement.device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=weight_decay)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [*self.model.parameters(self.name), *self.head.parameters()]

    def forward(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]):
        """Values and mask, both [B, R]; grad flows when called under grad mode."""
        hidden, mask = self.model.response_hidden(prompts, responses, self.name)  # [B, R, H], [B, R]
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1), mask  # bf16 hidden -> the float32 head

    @torch.no_grad()
    def values(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> list[list[float]]:
        """Per-token values of each (prompt, response), in micro-batches."""
        out: list[list[float]] = [[] for _ in prompts]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]) + len(responses[i]))
        for k in range(0, len(order), self.micro_batch):
            idx = order[k : k + self.micro_batch]
            v, _ = self.forward([prompts[i] for i in idx], [responses[i] for i in idx])
            for row, i in zip(v.tolist(), idx):
                out[i] = row[: len(responses[i])]
        return out

    def update(self, samples: Sequence[Sample]) -> dict[str, float]:
        if not samples:
            return {}
        for s in samples:
            if len(s.returns) != len(s.response_ids) or len(s.values) != len(s.response_ids):
                raise ValueError("value samples need one return and one old value per response token")
        params = self.parameters()
        batches = micro_batches(shard(samples, key=length), self.micro_batch)  # this rank's slice
        normalizer = float(sum(len(s.response_ids) for s in samples))
        sums: dict[str, float] = defaultdict(float)
        skipped = 0
        self.model.model.train()
        try:
            for _ in range(self.epochs):
                self.optimizer.zero_grad(set_to_none=True)
                for mb in batches:
                    v, mask = self.forward([s.prompt_ids for s in mb], [s.response_ids for s in mb])  # [B, R]
                    returns = _padded([s.returns for s in mb], v.shape[1]).to(v.device)
                    old = _padded([s.values for s in mb], v.shape[1]).to(v.device)
                    loss, metrics = value_loss(v, old, returns, mask, self.clip, normalizer)
                    loss.backward()
                    share = float(mask.sum()) / normalizer  # token-weighted, like the loss
                    for k, x in metrics.items():
                        sums[k] += x if k == "value_loss" else x * share
                all_reduce_grads(params)  # the other ranks' slices
                grad_norm, stepped = optimizer_step(params, self.optimizer, self.max_grad_norm, self.nonfinite, self.name)
                skipped += not stepped
        finally:
            self.model.model.eval()
            self.optimizer.zero_grad(set_to_none=True)
        out = {k: x / self.epochs for k, x in sum_metrics(sums).items()}
        if skipped:  # as masrl.update's: only then
            out["skipped_updates"] = float(skipped)
        out.update(grad_norm=float(grad_norm), samples=float(len(samples)), response_tokens=normalizer)
        return out

    def checkpoint_files(self) -> dict[str, FileWriter]:
        return {
            f"policy/{self.name}.safetensors": lambda path: self.model.save(self.name, path),
            f"value_head/{self.name}.safetensors": lambda path: save_file(
                {k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, str(path)
            ),
            f"optimizer/{self.name}.pt": lambda path: torch.save(self.optimizer.state_dict(), path),
        }

    def load(self, checkpoint: Path, weights_only: bool = False) -> None:
        self.model.load(self.name, checkpoint / "policy" / f"{self.name}.safetensors")
        self.head.load_state_dict(load_file(str(checkpoint / "value_head" / f"{self.name}.safetensors")))
        if not weights_only:
            state = torch.load(checkpoint / "optimizer" / f"{self.name}.pt", weights_only=False)
            self.optimizer.load_state_dict(state)


def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """[B, width] float32, zero after each row's end."""
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row), dtype=out.dtype)
    return out
