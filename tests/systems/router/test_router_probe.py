"""scripts/router_probe.py's separation measure, against hand-computed values."""

import pytest


@pytest.fixture(scope="module")
def separation(load_script):
    return load_script("router_probe").separation


def test_auc_counts_pairs_and_ties(separation):
    # right 0.9 beats both wrong; 0.8 beats 0.7, loses to 0.85: 3 of 4 pairs
    auc, _, _ = separation([0.9, 0.8], [0.7, 0.85])
    assert auc == pytest.approx(0.75)
    # a tie counts half: (1 + 0.5) / 2
    auc, _, _ = separation([0.6, 0.5], [0.5])
    assert auc == pytest.approx(0.75)


def test_best_threshold_maximises_the_smaller_rate(separation):
    # thresholds 0.7 / 0.8 / 0.85 / 0.9 give (TPR, TNR) (1, 0) / (1, 0.5) / (0.5, 0.5) / (0.5, 1):
    # the first with min 0.5 is kept
    _, tpr, tnr = separation([0.9, 0.8], [0.7, 0.85])
    assert (tpr, tnr) == (1.0, 0.5)
    # separable: every right draft above every wrong one
    assert separation([0.9, 0.8, 0.6], [0.1, 0.2]) == (1.0, 1.0, 1.0)
    # inverted: P(True) higher on the wrong drafts; no threshold gets both rates above 0, so the
    # answer is "always True"
    assert separation([0.1, 0.2], [0.8, 0.9]) == (0.0, 1.0, 0.0)
