"""peft's LoRA linear layer with the adapter's product added into the base output in place.

peft computes `base(x) + lora_B(lora_A(x)) * scaling`: the adapter's [tokens,
out] product, its scaled copy and the sum are three fresh output-sized
tensors per layer, and the backward scales the incoming gradient once more.
In a torch.profiler trace of one `bench/update_vs_trl.py` step (SmolLM2,
seven adapted projections per layer, 1 thread, machine shared) the scaling
multiply alone took 2.9 s of 46 s, ~6 ms per [512, 1536] tensor that takes
0.2 ms on reused memory: mostly first touches of freshly allocated pages.

Here the product goes straight into the base layer's output:
`out.addmm_(lora_A(x), B^T, alpha=scaling)`. The math is the same (the sum
is formed in a different order, so results agree to float rounding:
tests/agents/test_lora_linear.py); the backward of one addmm gives the gradients of
A, B and x with the scaling folded into its matrix products.

Only plain LoRA takes the fused path: one active adapter, no dropout, no
DoRA or other variant, not merged, no autocast, matching dtypes. Everything
else is peft's own forward, unchanged. The layer is registered through
peft's custom-module hook (`LoraConfig._register_custom_module`), so the
adapters, their state dicts and `set_adapter` / `disable_adapter` are
peft's.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners.lora.layer import Linear as PeftLoraLinear


class FusedLoraLinear(PeftLoraLinear):
    """A peft `lora.Linear` whose plain-LoRA forward is one in-place addmm on the base output."""

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        name = self._plain_adapter(x, args, kwargs)
        if name is None:
            return super().forward(x, *args, **kwargs)
        a, b = self.lora_A[name].weight, self.lora_B[name].weight  # [r, in], [out, r]
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])  # [N, in]: 2-D, so the in-place add is not on a view
        out = self.base_layer(x2)  # [N, out]
        out.addmm_(x2 @ a.t(), b.t(), alpha=self.scaling[name])  # + scaling * (x A^T) B^T
        return out.view(*lead, out.shape[-1])

    def _plain_adapter(self, x: torch.Tensor, args: tuple, kwargs: dict) -> str | None:
        """The one active adapter when the fused path computes exactly what peft would; else None."""
        if args or kwargs or self.disable_adapters or self.merged or len(self.active_adapters) != 1:
            return None
        name = self.active_adapters[0]
        if name not in self.lora_A or name in self.lora_variant:
            return None
        if not isinstance(self.lora_dropout[name], torch.nn.Identity):
            return None
        base = self.base_layer
        if not isinstance(base, torch.nn.Linear) or torch.is_autocast_enabled(x.device.type):
            return None
        if not (x.dtype == base.weight.dtype == self.lora_A[name].weight.dtype == self.lora_B[name].weight.dtype):
            return None
        return name
