"""The transformers adapter (masrl.hf_compat) on the installed release: the names it picks are the ones
that release has, and a forward continued from its returned cache equals one forward over the whole text.
`.ci/run` runs this file on the newest transformers and on the lowest pyproject.toml declares."""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version

from masrl.hf_compat import (
    activation_checkpointing,
    cache_kwargs,
    cache_name,
    enable_activation_checkpointing,
    output_cache,
)
from masrl.models import build_tiny_model


def test_the_cache_keyword_is_the_one_the_installed_release_has():
    # The rename landed in 5.24.0 (checked in the published wheels of 5.17.0 to 5.24.0).
    renamed = Version(transformers.__version__).release >= (5, 24)
    assert cache_name() == ("cache" if renamed else "past_key_values")


def test_a_forward_continued_from_the_returned_cache_equals_one_forward():
    model, _ = build_tiny_model(seed=3)
    model.eval()
    ids = torch.tensor([[5, 17, 42, 9, 33, 70, 12]])  # [1, 7]
    with torch.no_grad():
        whole = model(input_ids=ids, use_cache=False).logits  # [1, 7, V]
        first = model(input_ids=ids[:, :4], use_cache=True)
        rest = model(input_ids=ids[:, 4:], use_cache=True, **cache_kwargs(output_cache(first))).logits  # [1, 3, V]
    torch.testing.assert_close(rest, whole[:, 4:], atol=1e-5, rtol=1e-5)
    assert output_cache(first).get_seq_length() == 7  # the cache grew in place by the continued tokens


def test_activation_checkpointing_reads_the_models_switch():
    model, _ = build_tiny_model(seed=3)
    assert activation_checkpointing(model) is False
    enable_activation_checkpointing(model, use_reentrant=False)
    assert activation_checkpointing(model) is True
    assert activation_checkpointing(torch.nn.Linear(2, 2)) is False  # not an HF model: never checkpointing
