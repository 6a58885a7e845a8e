"""What both engines share (masrl/generation/sampling.py): greedy is temperature 0, prompts are left
padded, and a row is cut at its first EOS (kept) or a stop string, else it ran out of length."""

from __future__ import annotations

import torch

from masrl.generation.sampling import SamplingParams, finish_row, left_pad


class Letters:
    """A tokenizer of one letter per id (a=1, b=2, ...), EOS 0."""

    eos_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(ord("a") + i - 1) for i in ids if i != self.eos_token_id)


def test_greedy_is_temperature_zero():
    assert SamplingParams(temperature=0.0).greedy and not SamplingParams().greedy


def test_prompts_are_left_padded_with_their_mask():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]] and ids.dtype == torch.long


def test_a_row_ends_at_its_eos_a_stop_string_or_its_length():
    params = SamplingParams(stop=("cd",))
    assert finish_row(Letters(), [1, 2, 0, 0], SamplingParams()) == finish_row(Letters(), [1, 2, 0, 5], SamplingParams())
    eos = finish_row(Letters(), [1, 2, 0, 0], SamplingParams())
    assert (eos.response_ids, eos.text, eos.finish_reason) == ((1, 2, 0), "ab", "stop")  # the EOS was chosen: kept
    stop = finish_row(Letters(), [1, 3, 4, 0], params)  # "acd" holds the stop string: no EOS added
    assert (stop.response_ids, stop.text, stop.finish_reason) == ((1, 3, 4), "acd", "stop")
    cut = finish_row(Letters(), [1, 2, 3], SamplingParams())
    assert (cut.response_ids, cut.text, cut.finish_reason) == ((1, 2, 3), "abc", "length")
