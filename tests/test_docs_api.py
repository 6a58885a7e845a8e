"""docs/api.md's complete example runs as written: its code block is a system and a task family found by
dotted paths, trained by the command the page gives (on the tiny model, with smaller sizes appended)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from masrl.cli import main
from masrl.config import ConfigError, TaskConfig
from masrl.registry import build_task

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
SMALL = ["model.lora_rank=4", "trainer.batch_size=2", "sampler.group_size=2", "rollout.max_new_tokens=6",
         "eval.max_new_tokens=6", "eval.size=2"]  # fmt: skip


def section() -> str:
    text = DOC.read_text()
    return text.split("## A complete example", 1)[1].split("\n## ", 1)[0]


def example_code() -> str:
    return re.search(r"```python\n(.*?)```", section(), re.DOTALL).group(1)


def example_command() -> list[str]:
    """The command the section gives, `PYTHONPATH=. masrl train ...`, as argv for masrl.cli.main."""
    span = re.search(r"`(PYTHONPATH=\. masrl train [^`]+)`", section()).group(1)
    words = shlex.split(" ".join(span.split()))
    assert words[:2] == ["PYTHONPATH=.", "masrl"]
    return words[2:]


@pytest.fixture
def two_tries(tmp_path, monkeypatch):
    """The example saved as two_tries.py in a fresh folder on the path (the command's PYTHONPATH=.)."""
    (tmp_path / "two_tries.py").write_text(example_code())
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_documented_example_trains_as_the_page_says(two_tries, one_thread):
    run = two_tries / "run"
    argv = example_command()
    assert argv[:2] == ["train", "single-arithmetic"] and "task.kind=two_tries:TABLES" in argv
    assert main([*argv, *SMALL, f"run.dir={run}"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    # The tiny model never answers right, so every episode takes both tries: 2 tasks x 2 paths x 2 calls.
    assert [r["calls"] for r in train] == [8.0, 8.0]
    saved = (run / "config.yaml").read_text()
    assert "kind: two_tries:SYSTEM" in saved and "kind: two_tries:TABLES" in saved
    assert "retry_note: Not quite; check your arithmetic." in saved
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert re.fullmatch(r"What is \d+ x \d+\?", samples[0]["task"]["question"])


def test_the_task_family_keeps_its_promises(two_tries):
    tables = build_task(TaskConfig(kind="two_tries:TABLES", seed=3))
    train, held = tables.items("train", 0, 50), tables.items("eval", 0, 50)
    assert tables.items("train", 10, 5) == train[10:15]  # item i is item i, however it is asked for
    assert not {i.question for i in train} & {i.question for i in held}  # no eval question is ever trained on
    a, b = map(int, re.findall(r"\d+", train[0].question))
    assert train[0].answer == str(a * b) and 2 <= min(a, b) and max(a, b) <= 19
    assert tables.extract_answer("so <answer> 84 </answer>") == "84" and tables.extract_answer("84") is None
    assert tables.score(train[0], train[0].answer) == 1.0 and tables.score(train[0], "-1") == 0.0
    small = build_task(TaskConfig(kind="two_tries:TABLES", config={"largest": 3}))
    assert {i.question for i in small.items("train", 0, 20)} <= {f"What is {a} x {b}?" for a in (2, 3) for b in (2, 3)}
    with pytest.raises(ConfigError, match=r"task.config for two_tries:TABLES: unknown options \['size'\]"):
        build_task(TaskConfig(kind="two_tries:TABLES", config={"size": 3}))


def test_the_example_imports_only_the_public_api():
    imports = re.findall(r"^from (masrl[\w.]*) import", example_code(), re.MULTILINE)
    assert imports == ["masrl.systems.api"]
