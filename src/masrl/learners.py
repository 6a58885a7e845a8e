"""Learners: whatever a training step updates, behind one protocol.

A trainable call's reply names a policy (`Reply.policy`); the training loop
hands that policy's samples to the learner of the same name and never looks
inside. A learner owns its parameters and optimiser state, updates them on a
batch of samples, and writes and reads its own checkpoint files.

`PolicyLearner` is the language-model policy: one LoRA adapter (or the fully
fine-tuned model) of a `PolicyModel`, updated by the token-level clipped
surrogate in `masrl.update`. Other learners (a value model, a small scoring
head over agents) implement the same three methods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch

from masrl.agents.policy import PolicyModel
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

FileWriter = Callable[[Path], None]


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
