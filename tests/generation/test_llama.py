"""The plain Llama-family decoder (masrl.generation.llama) on the tiny model.

- it computes HF's logits for left-padded shared prompts and every step after them, for Llama and for
  Qwen2 (q/k/v biases), with the rows grouped by prompt or scattered in groups of unequal size (its
  shared-prefix attention), through `step` and through the fixed-shape `step_static`;
- a static cache keeps every row;
- a bf16 matmul is the float32 product of the bfloat16-rounded operands, rounded to bfloat16.
"""

from __future__ import annotations

import pytest
import torch
from generation_cases import prompts
from transformers import Qwen2Config, Qwen2ForCausalLM

from masrl.generation.llama import Bf16Matmul, KVCache, LlamaDecoder, Matmul, bf16_supported, fused_weights, supported
from masrl.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")
needs_bf16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU lacks AVX-512 BF16")


def tiny_qwen2():
    """A random 2-layer Qwen2 (q/k/v projections with biases) on the tiny model's tokenizer."""
    tok = load_model("tiny").tokenizer
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float().eval()
    with torch.no_grad():  # biases start at 0: make them act
        for name, p in model.named_parameters():
            if name.endswith("proj.bias"):
                p.copy_(torch.randn(p.shape) * 0.5)
    return model, tok


def scattered(rows: list[list[int]]) -> list[list[int]]:
    """The rows of `prompts()` out of their prompt order and one row fewer: groups of 3, 3, 3 and 2 rows
    interleaved, so the decoder's shared-prefix attention places rows in its grid by index."""
    order = [0, 3, 6, 1, 9, 4, 2, 10, 7, 5, 8]
    return [rows[i] for i in order]


@pytest.mark.parametrize("stepping", ["step", "step_static"])
@pytest.mark.parametrize("layout", ["grouped", "scattered"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_plain_decoder_equals_hf_forward(arch, layout, stepping):
    """`step_static` (fixed shapes for a CUDA graph: the whole generated buffer, masked after the step
    index) computes what `step` computes."""
    model, tok = (load_model("tiny").model.eval(), None) if arch == "llama" else tiny_qwen2()
    assert supported(model)
    decoder = LlamaDecoder(model, fused_weights(model))
    rows = prompts()  # 4 distinct prompts of 3 to 12 tokens, 3 rows each
    if layout == "scattered":
        rows = scattered(rows)
    distinct = list(dict.fromkeys(tuple(p) for p in rows))
    owner = torch.tensor([distinct.index(tuple(p)) for p in rows])
    p_len, steps = max(map(len, distinct)), 5
    ids = torch.zeros(len(distinct), p_len, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(distinct):
        ids[i, p_len - len(p) :], mask[i, p_len - len(p) :] = torch.tensor(p), 1
    new = torch.randint(3, 250, (len(rows), steps), generator=torch.Generator().manual_seed(4))  # [B, steps]
    with torch.no_grad():
        static = stepping == "step_static"
        cache = KVCache(decoder, len(rows), p_len + steps, decoder.embed, static=static)
        got = [decoder.prefill(ids, mask, cache, owner)]
        assert (cache.slots is None) == (layout == "grouped")
        pos = mask.sum(-1)[owner]
        for j in range(steps):
            if static:  # the step index is a tensor; the buffer holds 2 positions more than are ever written
                got.append(decoder.step_static(new[:, j], pos + j, torch.tensor([j]), cache))
            else:
                got.append(decoder.step(new[:, j], pos + j, cache))
        full_ids = torch.cat([ids[owner], new], 1)
        full_mask = torch.cat([mask[owner], torch.ones_like(new)], 1)
        want = model(input_ids=full_ids, attention_mask=full_mask, position_ids=(full_mask.cumsum(-1) - 1).clamp(min=0)).logits
    for j, logits in enumerate(got):
        torch.testing.assert_close(logits, want[:, p_len - 1 + j], rtol=0, atol=1e-5)


def test_a_static_cache_keeps_every_row():
    model = load_model("tiny").model.eval()
    decoder = LlamaDecoder(model, fused_weights(model))
    cache = KVCache(decoder, 2, 4, decoder.embed, static=True)
    cache.start(torch.ones(1, 2, dtype=torch.long), torch.tensor([0, 0]))
    assert all(k.abs().sum() == 0 for k in cache.keys)  # masked positions must add 0, not garbage
    with pytest.raises(RuntimeError, match="keeps every row"):
        cache.keep(torch.tensor([0]))


@needs_bf16
def test_a_bf16_matmul_is_the_product_of_the_rounded_operands():
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(5, 64, generator=g), torch.randn(48, 64, generator=g), torch.randn(48, generator=g)
    out = Bf16Matmul(w, b)(x)
    rounded = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    expected = rounded(rounded(x) @ rounded(w).T + rounded(b))
    assert out.dtype == torch.float32 and out.shape == (5, 48)
    # Accumulation order may differ from the reference's by float32 rounding, which can move the final
    # bfloat16 rounding by one step: 2^-8 relative.
    torch.testing.assert_close(out, expected, rtol=2**-7, atol=1e-6)
    assert (out - Matmul(w, b)(x)).abs().max() > 1e-3  # not the float32 product
