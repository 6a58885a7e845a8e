"""A finished tiny run (2 steps, a checkpoint after each) that the run directory's tests copy and damage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_runs import trained_tiny


@pytest.fixture(scope="session")
def _finished(tmp_path_factory) -> Path:
    return trained_tiny(tmp_path_factory.mktemp("finished") / "run", "trainer.threads=1")


@pytest.fixture
def finished_run(_finished, tmp_path) -> Path:
    """A copy of the finished run, this test's own."""
    return Path(shutil.copytree(_finished, tmp_path / "run"))
