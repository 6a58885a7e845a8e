"""The transformers calls whose names differ between the releases masrl supports.

masrl supports transformers from the lowest release pyproject.toml declares (the one `.ci/run`'s floor
job installs) up to the newest. Two renames between them touch masrl:

- The KV cache a model's forward takes and returns was `past_key_values` and became `cache` in
  transformers 5.24 (which keeps `past_key_values` as a deprecated alias that warns; 5.17 to 5.23
  know only `past_key_values`). masrl passes a cache by hand in the shared-prompt log-probs
  (masrl.agents.policy) and the lean engine's HF forward (masrl.generation.forwards).
- Whether a model recomputes activations in its backward was `is_gradient_checkpointing` and became
  `is_activation_checkpointing` in 5.23 (the old name warns there), and the switch that turns it on,
  `gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)`, became
  `activation_checkpointing_enable(activation_checkpointing_kwargs=...)` (the old one warns). The
  shared-prompt layout needs the KV cache, which checkpointing turns off, so the policy asks before
  it shares; `trainer.gradient_checkpointing` turns it on.

(Checked in the published wheels of 5.17.0, 5.20.2, 5.21.0, 5.22.2, 5.23.0 and 5.24.0.) Each name is
read once from the library itself (the fields of its causal-LM output, the properties of its model
class), not from its version number, so a backport or a patched build is judged by what it does.
Callers use the functions below and never ask the library which name it has.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any


@functools.cache
def cache_name() -> str:
    """`cache` on transformers releases that renamed it, else `past_key_values`."""
    from transformers.modeling_outputs import CausalLMOutputWithPast  # lazy: transformers (~1 s), only for models

    fields = {f.name for f in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in fields else "past_key_values"


def cache_kwargs(cache: Any) -> dict[str, Any]:
    """The keyword argument that hands `cache` (an HF `Cache`) to a model's forward: `model(..., **cache_kwargs(c))`."""
    return {cache_name(): cache}


def output_cache(output: Any) -> Any:
    """The KV cache a forward with `use_cache=True` returned."""
    return getattr(output, cache_name())


@functools.cache
def _checkpointing_name() -> str:
    from transformers import PreTrainedModel  # lazy: transformers (~1 s), only for models

    new = "is_activation_checkpointing"
    return new if isinstance(getattr(PreTrainedModel, new, None), property) else "is_gradient_checkpointing"


def activation_checkpointing(model: Any) -> bool:
    """Whether `model` (an HF model, or peft's wrapper of one, which forwards the property) recomputes
    activations in its backward; False for a model that is neither."""
    return bool(getattr(model, _checkpointing_name(), False))


def enable_activation_checkpointing(model: Any, **kwargs: Any) -> None:
    """Turn on activation checkpointing of an HF model, with the keyword arguments of
    `torch.utils.checkpoint.checkpoint` (e.g. `use_reentrant=False`), under whichever name it has."""
    if _checkpointing_name() == "is_activation_checkpointing":
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
