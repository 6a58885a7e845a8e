"""Fixtures of the pool tests: the calibration items and the three-agent simulated pool."""

import pytest

from masrl.pools.simulated import calibration_items, simulated_pool


@pytest.fixture(scope="module")
def items():
    """The 300-item calibration mix: 100 each of basic_arithmetic easy / medium / hard."""
    return calibration_items(100, seed=0)


@pytest.fixture(scope="module")
def pool():
    return simulated_pool("three", seed=0)
