"""Every shipped config logs the same seeded metrics on the tiny model as it did before the
systems moved into packages (issue 17: no behaviour changes). See tests/seeded.py."""

from __future__ import annotations

import json

import pytest

from seeded import CASES, DATA, run_case

RECORDED = json.loads(DATA.read_text())


def test_every_shipped_config_has_recorded_metrics():
    from masrl.config import PACKAGED

    assert set(RECORDED) == set(CASES) == {p.stem for p in PACKAGED.glob("*.yaml")}


@pytest.mark.parametrize("config", sorted(CASES))
def test_seeded_metrics_are_unchanged(config, tmp_path, one_thread):
    got = run_case(config, tmp_path)
    want = RECORDED[config]
    assert [(r["step"], r["kind"]) for r in got] == [(r["step"], r["kind"]) for r in want]
    for g, w in zip(got, want):
        assert set(g) == set(w), f"step {w['step']} {w['kind']}: keys differ {set(g) ^ set(w)}"
        for key, value in w.items():
            expected = pytest.approx(value, rel=1e-6, abs=1e-9) if isinstance(value, float) else value
            assert g[key] == expected, f"step {w['step']} {w['kind']} {key}"
