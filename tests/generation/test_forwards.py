"""How the lean loop runs a model (masrl/generation/forwards.py) on the tiny model: the three forwards
give the logits of one full forward of each row for the prefill and every step after it, the two that
drop rows keep the ones asked for, and the fixed-shape one refuses to drop any."""

from __future__ import annotations

import pytest
import torch

from masrl.generation.forwards import GraphForward, HFForward, PlainForward
from masrl.generation.llama import LlamaDecoder, fused_weights
from masrl.generation.sampling import left_pad
from masrl.models import load_model

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPTS = [[5, 6, 7, 8], [9, 10]]  # two prompts of unequal length, each owning one row
STEPS = [[11, 12], [13, 14], [15, 16]]  # the token fed to each row at each step


@pytest.fixture(scope="module")
def model():
    return load_model("tiny").model.eval()


def forwards(model):
    decoder = LlamaDecoder(model, fused_weights(model))
    return {"hf": HFForward(model), "plain": PlainForward(decoder), "graph": GraphForward(decoder, graphs=False)}


def reference(model, row: int, upto: int) -> torch.Tensor:
    """The last logits of one unpadded forward of prompt `row` and its first `upto` step tokens."""
    ids = torch.tensor([PROMPTS[row] + [s[row] for s in STEPS[:upto]]])
    return model(input_ids=ids).logits[0, -1]


@pytest.mark.parametrize("name", ["hf", "plain", "graph"])
@torch.no_grad()
def test_prefill_and_steps_equal_a_full_forward_of_each_row(model, name):
    fwd = forwards(model)[name]
    ids, mask = left_pad(PROMPTS, pad_id=0, device="cpu")
    logits = fwd.prefill(ids, mask, torch.tensor([0, 1]), max_new=len(STEPS) + 1)
    for row in (0, 1):
        torch.testing.assert_close(logits[row], reference(model, row, 0), rtol=1e-4, atol=1e-4)
    for t, tokens in enumerate(STEPS):
        pos = torch.tensor([len(PROMPTS[0]) + t, len(PROMPTS[1]) + t])
        logits = fwd.step(torch.tensor(tokens), pos)
        for row in (0, 1):
            torch.testing.assert_close(logits[row], reference(model, row, t + 1), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_dropping_a_finished_row_keeps_the_other_on_its_course(model):
    for name, fwd in forwards(model).items():
        ids, mask = left_pad(PROMPTS, pad_id=0, device="cpu")
        fwd.prefill(ids, mask, torch.tensor([0, 1]), max_new=3)
        fwd.step(torch.tensor(STEPS[0]), torch.tensor([4, 2]))
        if not fwd.drops_rows:
            with pytest.raises(RuntimeError, match="keeps every row"):
                fwd.keep(torch.tensor([1]))
            continue
        fwd.keep(torch.tensor([1]))  # row 0 finished
        logits = fwd.step(torch.tensor([STEPS[1][1]]), torch.tensor([3]))
        torch.testing.assert_close(logits[0], reference(model, 1, 2), rtol=1e-4, atol=1e-4, msg=name)
