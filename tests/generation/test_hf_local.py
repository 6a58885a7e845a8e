"""A frozen local HF model as an agent (masrl.generation.hf_local), on the tiny model."""

import asyncio

import pytest
import torch

from masrl.agents.base import Agent
from masrl.agents.policy import encode_chat
from masrl.generation.hf_local import HFLocalAgent
from masrl.generation.sampling import SamplingParams
from masrl.models import LoadedModel, build_tiny_model
from masrl.types import Message, Price

PRICE = Price(input_per_1k=2.0, output_per_1k=10.0)
GREEDY = SamplingParams(max_new_tokens=8, temperature=0.0)


def user(text, system="Be brief."):
    return (Message("system", system), Message("user", text))


@pytest.fixture(scope="module")
def local():
    model, tok = build_tiny_model(seed=0)
    return HFLocalAgent("frozen", LoadedModel(model, tok, "tiny"), GREEDY, price=PRICE)


def test_hf_local_is_frozen_agent(local):
    assert isinstance(local, Agent)
    assert not local.model.training
    assert not any(p.requires_grad for p in local.model.parameters())


def test_hf_local_greedy_matches_direct_generate(local):
    messages = user("hello there")
    reply = asyncio.run(local(messages))

    prompt = encode_chat(local.tokenizer, messages)
    with torch.no_grad():
        out = local.model.generate(
            input_ids=torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=GREEDY.max_new_tokens,
            do_sample=False,
            pad_token_id=local.tokenizer.pad_token_id,
            eos_token_id=local.tokenizer.eos_token_id,
        )
    new = out[0, len(prompt) :].tolist()
    eos = local.tokenizer.eos_token_id
    body = new[: new.index(eos)] if eos in new else new
    assert reply.text == local.tokenizer.decode(body, skip_special_tokens=True)
    assert reply.tokens_in == len(prompt)
    assert reply.tokens_out == len(new[: new.index(eos) + 1] if eos in new else new)
    assert reply.cost == pytest.approx(PRICE.cost(reply.tokens_in, reply.tokens_out))
    assert not reply.trainable


def test_hf_local_batches_concurrent_calls(local):
    before = local.service.stats.batches

    async def main():
        return await asyncio.gather(*(local(user(f"question {i}")) for i in range(8)))

    replies = asyncio.run(main())
    assert len(replies) == 8
    assert local.service.stats.batches == before + 1
    assert local.service.stats.batch_sizes[-1] == 8
    # The same agent works in a later event loop (one asyncio.run per training step).
    again = asyncio.run(local(user("question 3")))
    assert again.text == replies[3].text
