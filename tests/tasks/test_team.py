"""The team and local reward mix of the turn-based tasks (AT-GRPO), by hand."""

from __future__ import annotations

import pytest

from masrl.tasks.team import RewardDesign, RewardParts, mix_alpha, mix_lambda, mixed_reward


# ---------------------------------------------------------------- mixes
def test_mixes_by_hand():
    assert mix_alpha(0.5, 0.8, 0.0, alpha=2.0, lam=0.3) == pytest.approx(1.8)  # mask ignored in eq. 4
    assert mix_lambda(0.5, 0.8, 1.0, alpha=2.0, lam=0.3) == pytest.approx(0.3 * 0.5 + 0.7 * 0.8)
    assert mix_lambda(0.5, 0.8, 0.0, alpha=2.0, lam=0.3) == pytest.approx(0.15)  # masked local
    design = RewardDesign(0.7, {"reasoner": {"fmt": 0.2, "step": 0.8}})
    parts = RewardParts(1.0, {"fmt": 1.0, "step": 0.0})
    assert mixed_reward(design, "reasoner", parts, lam=0.5)[0] == pytest.approx(0.5 + 0.5 * 0.2)
    with pytest.raises(ValueError, match="sum to 1"):
        RewardDesign(0.5, {"x": {"a": 0.5}})
    with pytest.raises(ValueError, match="unknown reward mix"):
        mixed_reward(design, "reasoner", parts, mix="product")
    with pytest.raises(ValueError, match="needs component scores"):
        mixed_reward(design, "reasoner", RewardParts(1.0, {"fmt": 1.0}))
