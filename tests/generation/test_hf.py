"""HF generate through peft (masrl.generation.hf) and the row helpers every engine shares
(masrl.generation.sampling), on the tiny model."""

from __future__ import annotations

import string

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.generation.hf import HFEngine
from masrl.generation.sampling import SamplingParams, finish_row
from masrl.models import build_tiny_model, build_tiny_tokenizer, load_model
from masrl.types import Message

pytestmark = pytest.mark.usefixtures("one_thread")


def make_policy():
    torch.manual_seed(0)  # LoRA A init
    return PolicyModel(load_model("tiny", seed=0), ["red"], LoraSpec(rank=4, alpha=8))


def test_greedy_generate_equals_hf_generate():
    pm = make_policy()  # fresh adapter == base model
    hf, tok = build_tiny_model(seed=0)
    prompt = tok("What is 12 + 7?", add_special_tokens=False)["input_ids"]
    [gen] = HFEngine(pm).generate([prompt], SamplingParams(max_new_tokens=12, temperature=0.0), "red")
    out = hf.generate(
        input_ids=torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id
    )
    expected = out[0, len(prompt) :].tolist()
    assert list(gen.response_ids) == expected
    assert gen.text == tok.decode(expected, skip_special_tokens=True)
    assert gen.finish_reason == ("stop" if tok.eos_token_id in expected else "length")


def test_stop_string_cuts_batched_generation():
    """Sample freely, pick a stop string from the sample, resample with the same seed.

    The random tiny model emits random bytes when sampled; a stop string made of
    two printable ASCII tokens of row 0 must cut row 0 right after them, while
    row 1 (same RNG draws, stopping criteria draw none) runs on unchanged.
    """
    pm = make_policy()
    tok = pm.tokenizer
    prompts = [pm.encode_chat([Message("user", q)]) for q in ("What is 2+3?", "hi")]
    printable = set(string.ascii_letters + string.digits + string.punctuation)
    for seed in range(10):
        torch.manual_seed(seed)
        free = HFEngine(pm).generate(prompts, SamplingParams(max_new_tokens=16), "red")
        chars = [tok.decode([t]) for t in free[0].response_ids]
        pair = next((k for k in range(len(chars) - 1) if chars[k] in printable and chars[k + 1] in printable), None)
        if pair is not None:
            break
    assert pair is not None, "no printable pair in 10 samples"
    stop = chars[pair] + chars[pair + 1]

    torch.manual_seed(seed)
    stopped = HFEngine(pm).generate(prompts, SamplingParams(max_new_tokens=16, stop=(stop,)), "red")
    assert stopped[0].response_ids == free[0].response_ids[: pair + 2]  # no padding, no EOS appended
    assert stopped[0].finish_reason == "stop"
    assert stopped[0].text == tok.decode(free[0].response_ids[: pair + 2])
    if stop not in free[1].text:
        assert stopped[1] == free[1]


def test_finish_row_eos_stop_and_length():
    tok = build_tiny_tokenizer()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    params = SamplingParams(stop=("</answer>",))

    # A real EOS is part of the response; padding after it is not.
    g = finish_row(tok, enc("abc") + [eos, pad, pad], params)
    assert (g.response_ids, g.text, g.finish_reason) == (tuple(enc("abc") + [eos]), "abc", "stop")
    # A stop string ends the response; the padding generate() added is dropped.
    g = finish_row(tok, enc("<answer>4</answer>") + [pad, pad], params)
    assert (g.response_ids, g.text, g.finish_reason) == (tuple(enc("<answer>4</answer>")), "<answer>4</answer>", "stop")
    g = finish_row(tok, enc("x</answer>"), params)  # halted on the last token: no padding at all
    assert (g.response_ids, g.finish_reason) == (tuple(enc("x</answer>")), "stop")
    # Neither: the length limit cut it.
    g = finish_row(tok, enc("12 + 3"), params)
    assert (g.response_ids, g.text, g.finish_reason) == (tuple(enc("12 + 3")), "12 + 3", "length")
