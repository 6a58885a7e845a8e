"""The transformers calls whose names differ between the releases masrl supports.

masrl supports transformers from the lowest release pyproject.toml declares (the one `.ci/run`'s floor
job installs) up to the newest. One change between them touches masrl: the KV cache that a model's
forward takes and returns was `past_key_values` and became `cache` in transformers 5.24 (which keeps
`past_key_values` as a deprecated alias that warns; 5.17 to 5.23 know only `past_key_values`). masrl passes a cache by hand in two places,
the shared-prompt log-probs (masrl.agents.policy) and the lean engine's HF forward (masrl.rollout.decode);
both go through the two functions here, so no caller asks the library which name it has.

The name is read once from the library itself (the fields of its causal-LM output), not from its
version number, so a backport or a patched build is judged by what it does.
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
