"""`masrl serve`'s command (masrl/cli/serving.py): what it refuses before any model loads, each a ConfigError
(one line, exit code 2), in the order it checks. Serving itself, over real HTTP: tests/test_serve.py."""

from __future__ import annotations

from argparse import Namespace

import pytest

from masrl.cli.serving import serve
from masrl.config import ConfigError


def _args(**given) -> Namespace:
    defaults = {"run_dir": None, "inference": None, "policy": None, "name": None, "host": "127.0.0.1", "port": 0,
                "api_key": None, "max_body_bytes": 1 << 20, "max_concurrency": 4, "max_adapters": 2,
                "adapter_root": None, "threads": 1, "seed": 0}  # fmt: skip
    return Namespace(**{**defaults, **given})


@pytest.mark.parametrize("given,message", [
    ({"port": 70000}, "--port 70000 is not a TCP port (0 to 65535)"),
    ({"port": -1}, "--port -1 is not a TCP port (0 to 65535)"),
    ({"max_concurrency": 0}, "--max-concurrency and --max-body-bytes must be at least 1"),
    ({"api_key": "  "}, "--api-key (or MASRL_API_KEY) is empty"),
    ({}, "masrl serve needs a run directory (or --inference MODEL)"),
    ({"run_dir": "nowhere"}, "nowhere is not a run directory (no config.yaml)"),
    ({"inference": "tiny", "policy": "solver"}, "--inference serves a base model, not a run"),
    ({"inference": "tiny", "max_adapters": 0}, "--max-adapters must be at least 1"),
], ids=["port too high", "negative port", "no concurrency", "empty key", "no run", "not a run", "run and model",
        "no adapters"])  # fmt: skip
def test_what_serve_refuses_before_a_model_loads(given, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as refused:
        serve(_args(**given))
    assert str(refused.value).startswith(message)
