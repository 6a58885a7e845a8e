"""A run's state in a checkpoint (masrl/run/resume.py) on the tiny model: what it saves, that restoring
gives back the saved adapters, and that the newest checkpoint that reads back whole is the one loaded,
a damaged one set aside. (A killed run resumed end to end: tests/test_kill_resume.py.)"""

from __future__ import annotations

import pytest
import torch

from masrl.checkpoint import read_meta
from masrl.parts import build_parts
from masrl.run.files import RunDir
from masrl.run.resume import checkpoint, restore, restore_newest, rng_state
from masrl.types import EnvironmentProblem


def adapters(engine):
    return {p: {k: v.clone() for k, v in m.state_dict(p).items()} for p, m in engine.models.items()}


def nudge(engine):
    with torch.no_grad():
        for policy, model in engine.models.items():
            for p in model.parameters(policy):
                p.add_(0.5)


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[p][k], b[p][k]) for p in a for k in a[p])


def test_a_checkpoint_restores_the_adapters_rng_and_data_position(tiny_config, tmp_path, one_thread):
    config = tiny_config("trainer.batch_size=2")
    engine, run = build_parts(config), RunDir(tmp_path)
    saved = adapters(engine)
    checkpoint(engine, run, 3)
    ckpt = run.latest_checkpoint()
    assert read_meta(ckpt)["data_position"] == 6 and (ckpt / "rng.pt").exists()
    drawn = torch.rand(3)
    nudge(engine)
    assert not same(adapters(engine), saved)
    assert restore_newest(engine, run) == ckpt
    assert same(adapters(engine), saved) and torch.equal(torch.rand(3), drawn)  # the RNG is where it was saved
    assert rng_state(ckpt, rank=1)["torch"].equal(rng_state(ckpt, rank=0)["torch"])  # one rank saved: its state
    nudge(engine)
    restore(engine, ckpt, weights_only=True)
    assert same(adapters(engine), saved)


def test_a_damaged_newest_checkpoint_is_set_aside_for_the_one_before(tiny_config, tmp_path, capsys, one_thread):
    engine, run = build_parts(tiny_config()), RunDir(tmp_path)
    checkpoint(engine, run, 1)
    saved = adapters(engine)
    nudge(engine)
    checkpoint(engine, run, 2)
    for f in (run.latest_checkpoint() / "policy").iterdir():
        f.write_bytes(b"garbage")
    first = run.complete_checkpoints()[-1]
    assert restore_newest(engine, run) == first and same(adapters(engine), saved)
    err = capsys.readouterr().err
    assert err.startswith("masrl: checkpoint step_000002 is unreadable (SafetensorError") and "set aside as broken-step_000002" in err
    assert [p.name for p in run.complete_checkpoints()] == [first.name]
    for f in (first / "policy").iterdir():
        f.write_bytes(b"garbage")
    with pytest.raises(EnvironmentProblem, match="no checkpoint of .* reads back whole"):
        restore_newest(engine, run)
