"""OpenAI-compatible inference servers as an engine (masrl/generation/remote.py): a completions choice
read as a Generation, and the name an adapter version is served under."""

from __future__ import annotations

import pytest

from masrl.generation.remote import lora_name, parse_choice


def test_an_adapter_version_has_its_own_served_name():
    assert lora_name("red", 3) == "red-v3"


def test_token_ids_come_from_the_choice_or_from_its_logprob_tokens():
    choice = {"text": "hi", "token_ids": [5, 6], "finish_reason": "stop", "logprobs": {"token_logprobs": [-0.5, -1.0]}}
    got = parse_choice(choice, version=2, want_logprobs=True)
    assert (got.response_ids, got.text, got.finish_reason, got.logprobs, got.version) == ((5, 6), "hi", "stop",
                                                                                         (-0.5, -1.0), 2)  # fmt: skip
    old = parse_choice({"text": "x", "logprobs": {"tokens": ["token_id:7"]}, "finish_reason": "length"}, 0, False)
    assert (old.response_ids, old.finish_reason, old.logprobs) == ((7,), "length", None)
    assert parse_choice({"token_ids": [1], "finish_reason": None}, 0, False).finish_reason == "length"


def test_a_choice_without_ids_or_with_too_few_logprobs_is_refused():
    with pytest.raises(ValueError, match="no token ids"):
        parse_choice({"text": "x", "logprobs": {"tokens": ["x"]}}, 0, False)
    with pytest.raises(ValueError, match="1 log-probs for 2 tokens"):
        parse_choice({"token_ids": [1, 2], "logprobs": {"token_logprobs": [-1.0]}}, 0, True)
