"""Puppeteer's returns (eq. 6): the step cost C_t = F log(1 + t/phi) and R_t = gamma R_(t+1) - lambda C_t, by hand."""

from __future__ import annotations

import math

import pytest

from masrl.systems.puppeteer.returns import path_returns, step_cost, step_costs

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- eq. 6
def test_step_cost_is_f_times_log_one_plus_t_over_phi():
    assert step_cost(0.2, 1, 4) == pytest.approx(0.2 * math.log(1.25))
    assert step_costs([0.2, 0.1, 0.3], 4) == pytest.approx([0.04462871, 0.04054651, 0.16788474], abs=1e-8)
    assert step_cost(0.0, 3, 4) == 0.0  # the terminator does no work


def test_returns_recursion_by_hand():
    # R3 = 1 - 0.5*3 = -0.5; R2 = 0.5*(-0.5) - 0.5*2 = -1.25; R1 = 0.5*(-1.25) - 0.5*1 = -1.125
    assert path_returns(1.0, [1.0, 2.0, 3.0], lam=0.5, gamma=0.5) == [-1.125, -1.25, -0.5]  # [R1, R2, R3]
    # the paper's defaults, lambda 0.1 and gamma 0.99, on the costs above:
    # R3 = 1 - 0.016788474; R2 = 0.99 R3 - 0.004054651; R1 = 0.99 R2 - 0.004462871
    got = path_returns(1.0, [0.04462871, 0.04054651, 0.16788474], lam=0.1, gamma=0.99)
    assert got == pytest.approx([0.955168641, 0.969324760, 0.983211526], abs=1e-8)
    assert path_returns(0.0, [0.0], lam=0.1, gamma=0.99) == [0.0]


@pytest.mark.parametrize(
    "call",
    [lambda: step_cost(1.0, 0, 4), lambda: step_cost(1.0, 1, 0), lambda: step_cost(-1.0, 1, 4),
     lambda: path_returns(1.0, [], 0.1, 0.99), lambda: path_returns(1.0, [1.0], 0.1, 0.0)],
)  # fmt: skip
def test_bad_inputs_are_refused(call):
    with pytest.raises(ValueError):
        call()
