"""Shared fixtures: the tiny-model config every engine test runs with, and a run dir.

The tiny model is a random 2-layer Llama (masrl.models.build_tiny_model); it
never writes a correct answer, so every reward would be 0 and every GRPO
advantage 0. Tests that need the update to do work use `parity_reward`, which
grades a response by the parity of its bytes: about half the samples score 1.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from masrl.config import Config
from masrl.loading import load_config

# Small enough that a training step takes well under a second on one CPU core;
# pins every setting the tests' expected values depend on.
SINGLE = "single-arithmetic"  # a shipped config, by name
TINY = (
    "model.name=tiny",
    "algo.advantage=grpo",
    "algo.epochs=1",
    "eval.before=true",
    "eval.every=0",
    "trainer.keep_checkpoints=2",
    "model.lora_rank=4",
    "model.lora_alpha=8",
    "trainer.batch_size=2",
    "sampler.group_size=4",
    "rollout.max_new_tokens=6",
    "trainer.micro_batch=4",
    "trainer.lr=1e-2",
    "eval.size=2",
    "eval.max_new_tokens=6",
    "trainer.log_episodes=1",
)


def _load_script(name: str):
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script():
    """load_script(name): a module from scripts/ (not a package), loaded by path, to test its functions directly."""
    return _load_script


@pytest.fixture
def one_thread():
    """Run torch on one CPU thread for the test, then restore the setting.

    The tiny model gains nothing from intra-op threads, and on a shared 2-core
    machine a second spinning thread slows a test down tenfold.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def run_dir(tmp_path):
    """A run directory that does not exist yet (train() creates it)."""
    return tmp_path / "run"


@pytest.fixture
def tiny_overrides(run_dir) -> list[str]:
    # The single-agent config: these engine tests pin its shapes (the router has its own tests).
    return [SINGLE, *TINY, f"run.dir={run_dir}"]


@pytest.fixture
def tiny_config(tiny_overrides):
    """`tiny_config("trainer.steps=2", ...)`: the tiny config with more overrides."""

    def make(*extra: str) -> Config:
        return load_config(tiny_overrides[0], [*tiny_overrides[1:], *extra])

    return make


def parity_terms(task, item, text: str) -> dict[str, float]:
    return {"correct": float(sum(text.encode()) % 2), "format": 0.0}


@pytest.fixture
def parity_reward(monkeypatch):
    """Replace the single-agent system's grader with a byte-parity reward."""
    monkeypatch.setattr("masrl.systems.single.reward_terms", parity_terms)


@pytest.fixture(scope="module")
def champ(tmp_path_factory):
    """The recorded CHAMP pool built once per module (tests/pools/test_champ.py, tests/tasks/test_champ.py):
    its summary, tasks, agents and the file's rows by id."""
    pytest.importorskip("champ_dataset")
    from masrl.pools.champ import build_champ_pool, load_champ_pool

    path = tmp_path_factory.mktemp("champ") / "champ_pool.jsonl"
    summary = build_champ_pool(path)  # about 3 s: the 72 MB JSON, then grading 1,080 summaries
    tasks, agents = load_champ_pool(path)
    rows = {row["id"]: row for row in map(json.loads, path.read_text(encoding="utf-8").splitlines())}
    return summary, tasks, agents, rows
