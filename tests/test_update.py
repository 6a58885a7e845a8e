"""The policy update's plain pieces (masrl/update.py) by hand: a pass's forward tokens, length-sorted
micro-batches under a row and a token cap, advantages as a tensor, the behaviour weights' spread.
The update itself on the tiny model: tests/agents/test_policy.py and tests/agents/test_shared_prompt.py."""

from __future__ import annotations

import math

import pytest
import torch

from masrl.types import Sample
from masrl.update import advantage_tensor, forward_tokens, micro_batches, spread


def row(prompt: int, response: int, advantage=1.0, first: int = 0) -> Sample:
    """A sample with a `prompt`-token prompt (ids from `first`) and a `response`-token response."""
    return Sample("p", tuple(range(first, first + prompt)), tuple(range(response)), advantage)


def length_of(sample: Sample) -> int:
    return len(sample.prompt_ids) + len(sample.response_ids)


def test_forward_tokens_of_one_pass_and_of_shared_prompts():
    mb = [row(3, 2), row(3, 5), row(4, 1, first=10)]
    assert forward_tokens(mb) == 3 * (4 + 5)  # rows x (longest prompt + longest response)
    assert forward_tokens(mb, by_prompt=True) == 2 * 4 + 3 * 5  # distinct prompts x P + rows x R
    assert forward_tokens([row(2, 0)]) == 2 + 1  # an empty response still takes one position


def test_micro_batches_sort_by_length_and_stop_at_the_size():
    samples = [row(5, 5), row(1, 1), row(3, 3), row(2, 2), row(4, 4)]
    assert [[len(s.prompt_ids) for s in mb] for mb in micro_batches(samples, 2)] == [[1, 2], [3, 4], [5]]


def test_micro_batches_stop_at_the_token_cap_and_a_long_row_gets_its_own():
    samples = [row(1, 1), row(1, 2), row(2, 2), row(10, 10)]
    # [1+1, 1+2]: 2 x 3 = 6; adding 2+2 makes 3 x 4 = 12 > 10; [2+2] then 10+10 alone (over the cap, still a chunk)
    got = micro_batches(samples, 8, max_tokens=10)
    assert [[length_of(s) for s in mb] for mb in got] == [[2, 3], [4], [20]]


def test_advantages_are_one_per_row_or_zero_padded_per_token():
    torch.testing.assert_close(advantage_tensor([row(1, 2, 0.5), row(1, 3, -1)], 3, torch.float32),
                               torch.tensor([0.5, -1.0]))  # fmt: skip
    per_token = advantage_tensor([row(1, 2, (0.1, 0.2)), row(1, 3, 2.0)], 3, torch.float32)
    torch.testing.assert_close(per_token, torch.tensor([[0.1, 0.2, 0.0], [2.0, 2.0, 2.0]]))
    with pytest.raises(ValueError, match="1 advantages for 2 response tokens"):
        advantage_tensor([row(1, 2, (0.1,))], 2, torch.float32)


def test_spread_takes_the_std_out_of_the_mean_square_and_keeps_the_extremes():
    means = {"behavior_weight_mean": 1.0, "behavior_weight_sq_mean": 1.25}
    out = spread(means, {"behavior_weight_min": 0.5, "behavior_weight_max": 1.5})
    assert out["behavior_weight_std"] == pytest.approx(math.sqrt(1.25 - 1.0))
    assert out["behavior_weight_min"] == 0.5 and out["behavior_weight_max"] == 1.5
    assert "behavior_weight_sq_mean" not in means  # taken out: it is no metric of its own
    assert spread({"loss": 1.0}, {}) == {}
