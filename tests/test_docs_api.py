"""docs/api.md's complete example runs as written: its code block is a system found by a dotted path."""

from __future__ import annotations

import json
import re
from pathlib import Path

from masrl.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def example_code() -> str:
    text = DOC.read_text()
    section = text.split("## A complete example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_documented_example_trains_two_steps(tmp_path, monkeypatch, one_thread):
    (tmp_path / "two_tries.py").write_text(example_code())
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    argv = ["train", "single-arithmetic", "system.kind=two_tries:SYSTEM", "system.retry_note=Not quite.",
            "model.name=tiny", "model.lora_rank=4", "trainer.steps=2", "trainer.batch_size=2",
            "sampler.group_size=2", "rollout.max_new_tokens=6", "eval.max_new_tokens=6", "eval.size=2",
            f"run.dir={run}"]  # fmt: skip
    assert main(argv) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    # The tiny model never answers right, so every episode takes both tries: 2 tasks x 2 paths x 2 calls.
    assert [r["calls"] for r in train] == [8.0, 8.0]
    saved = (run / "config.yaml").read_text()
    assert "kind: two_tries:SYSTEM" in saved and "retry_note: Not quite." in saved


def test_the_example_imports_only_the_public_api():
    imports = re.findall(r"^from (masrl[\w.]*) import", example_code(), re.MULTILINE)
    assert imports == ["masrl.systems.api"]
