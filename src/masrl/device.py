"""Where the models run and in which precision: `trainer.device` and `trainer.precision`.

CPU runs in float32 (bf16 matmuls are many times slower on a CPU without
AMX). On CUDA the default is bf16: the frozen base weights are stored in
bf16 (half the memory), the LoRA adapters and value heads stay float32
(peft keeps adapter weights in float32 over a bf16 base), and forward passes
run under `torch.autocast(bfloat16)`, so the optimiser updates float32
weights with float32 gradients. Nothing here touches CUDA unless the device
is CUDA (`torch.cuda.is_available()` only for `auto`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

DEVICES = ("auto", "cpu", "cuda")  # trainer.device: `placement` chooses; auto is cuda when torch sees a GPU
PRECISIONS = ("auto", "float32", "bf16")  # trainer.precision: `placement` chooses; auto is bf16 on cuda


class DeviceError(ValueError):
    """A device or precision this machine cannot give."""


@dataclass(frozen=True)
class Placement:
    device: torch.device = torch.device("cpu")
    weights: torch.dtype = torch.float32  # dtype of the frozen base weights
    compute: torch.dtype | None = None  # autocast dtype of forward passes; None = the weights' own

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.compute is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute)

    @property
    def precision(self) -> str:
        return "bf16" if torch.bfloat16 in (self.weights, self.compute) else "float32"


CPU = Placement()


def placement(device: str = "auto", precision: str = "auto", local_rank: int | None = None) -> Placement:
    """The placement a config asks for; `local_rank` (default: $LOCAL_RANK) picks this rank's GPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        if precision == "bf16":
            return Placement(torch.device("cpu"), torch.float32, torch.bfloat16)
        return CPU
    if device != "cuda":
        raise DeviceError(f"trainer.device must be one of {', '.join(DEVICES)}, got {device!r}")
    if not torch.cuda.is_available():
        raise DeviceError("trainer.device is cuda but torch sees no CUDA device (torch.cuda.is_available() is False)")
    index = int(os.environ.get("LOCAL_RANK", "0")) if local_rank is None else local_rank
    if index >= torch.cuda.device_count():
        raise DeviceError(f"local rank {index} has no GPU: this machine has {torch.cuda.device_count()}")
    if precision == "float32":
        return Placement(torch.device("cuda", index), torch.float32, None)
    return Placement(torch.device("cuda", index), torch.bfloat16, torch.bfloat16)
