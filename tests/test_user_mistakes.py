"""Every mistake gets one line and loses nothing (issue 38, items 1-4), as a user meets them: the real CLI
in a subprocess on the tiny model, real signals, a real full disk.

1. a user's question/answer JSONL file with the default config (a simulated pool) trains; a config that
   cannot use it, or a broken line, is refused before the run directory is made, in one line;
2. SIGINT or SIGTERM at step 3 (of 20) with checkpoints every 5 checkpoints step 3 and exits 130 saying what
   `--resume` will do; `--resume` then logs every step exactly once, as an uninterrupted run does;
3. a full disk is one line on its own (not the progress bar's), exit 3, saying to free space and the
   exact command that resumes; once space is freed that command finishes the run;
4. the small ones: a config path that is a directory, an unknown algorithm name, `masrl eval` of a run
   that lost its config.yaml, `masrl eval RUN eval.size=3` (and another key refused), eval.json naming
   the step and checkpoint, no third-party warning on a default run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from cli_runs import ENV, trained_tiny
from cli_runs import cli as _cli
from cli_runs import messages as _messages
from cli_runs import run_cli as _run
from seeded import volatile
from smoke import tiny_run


def _rows(run: Path) -> list[dict]:
    """metrics.jsonl's lines, training steps and evaluations, without the process measurements."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not volatile(k)} for r in rows]  # timings differ between any two runs


def _logged(metrics: Path) -> list[dict]:
    """The whole lines of a metrics.jsonl being written (the last may be half written)."""
    rows = []
    for line in metrics.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    return rows


def _train_rows(run: Path) -> list[dict]:
    return [r for r in _rows(run) if r["kind"] == "train"]


def _qa_file(path: Path, n: int = 40) -> Path:
    path.write_text("".join(json.dumps({"question": f"What is {i} + {3 * i}?", "answer": str(4 * i)}) + "\n"
                            for i in range(n)))  # fmt: skip
    return path


# ---------------------------------------------------------------- 1. a user's JSONL file
@pytest.mark.parametrize("config", ["default", "router"])
def test_a_jsonl_file_trains_with_the_default_and_router_configs_and_no_warning(tmp_path, config):
    """The default config (the team) trains on the file, and so does the router, whose simulated pool finds
    the file's questions (it failed with `AgentError: sim-weak: simulated agent knows no task item`); a run
    prints no third-party warning."""
    qa, run = _qa_file(tmp_path / "qa.jsonl"), tmp_path / "run"
    done = _run("train", config, "task.kind=jsonl", f"task.path={qa}", f"run.dir={run}", *tiny_run(eval_size=3))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    rows = _train_rows(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["failed"] == 0 and r["trajectories"] > 0 for r in rows)  # every pool call found its item
    assert json.loads((run / "evals" / "step-000002.json").read_text())["per_item"]  # the system's evaluation ran


def test_a_config_that_cannot_use_a_jsonl_file_refuses_it_naming_those_that_can(tmp_path):
    qa, run = _qa_file(tmp_path / "qa.jsonl"), tmp_path / "run"
    done = _run("train", "turns-math", "task.kind=jsonl", f"task.path={qa}", f"run.dir={run}", "model.name=tiny")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (message,) = _messages(done.stderr)
    assert message.startswith("masrl: config error:")
    hint = re.search(r"task.kind 'jsonl' runs with the shipped configs (.*)$", done.stderr, re.M)
    assert hint, done.stderr
    assert {"default", "single-arithmetic", "budget-grpo"} <= set(hint.group(1).split(", "))
    assert not {"turns-math", "search-fof", "router-champ"} & set(hint.group(1).split(", "))
    assert not run.exists()  # refused before the run directory was made


@pytest.mark.parametrize(
    "text,needle",
    [
        ('{"question": "2+2", "answer": "4"}\n\n{"question": "1+1", "answer": "2"\n', ":3: not valid JSON"),
        ('{"question": "2+2", "answer": "4"}\n{"question": "1+1"}\n', ":2: missing required field 'answer'"),
        ("\n\n", ": no question/answer lines"),
    ],
)
def test_a_broken_jsonl_file_is_one_line_naming_file_and_line_and_leaves_no_run_directory(tmp_path, text, needle):
    """The file is read when the engine is built, after the run directory was made: the run takes it back."""
    qa, run = tmp_path / "qa.jsonl", tmp_path / "runs" / "mine"
    qa.write_text(text)
    done = _run("train", "task.kind=jsonl", f"task.path={qa}", f"run.dir={run}", "model.name=tiny")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (message,) = _messages(done.stderr)
    assert message.startswith(f"masrl: config error: task.path: {qa}{needle}"), message
    assert "task.config" not in message
    assert not (tmp_path / "runs").exists()  # not even the parent it made for the run


# ---------------------------------------------------------------- 2. SIGINT and SIGTERM
# Replies of 96 tokens make a step take a good part of a second, long beside the test's polling and a loaded
# machine's scheduling, so a signal sent once step 2 is logged lands in step 3. An evaluation every 3 steps:
# the one after step 3, skipped to stop sooner, runs when the run is resumed.
STEPS = 20
SIGNALLED = ["single-arithmetic", *tiny_run(), f"trainer.steps={STEPS}", "trainer.checkpoint_every=5", "eval.every=3",
             "rollout.max_new_tokens=96", "eval.before=false", "trainer.threads=1"]  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("clean") / "run"
    done = _run("train", *SIGNALLED, f"run.dir={run}")
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def _signal_during_step(run: Path, step: int, signals: list[int], *extra: str,
                        group: bool = False) -> subprocess.CompletedProcess:  # fmt: skip
    """Start a training process and send it `signals` once step `step - 1` is logged (step `step` runs);
    with `group`, to its whole process group, as a terminal's Ctrl-C reaches every process of a command."""
    proc = subprocess.Popen(_cli("train", *SIGNALLED, *extra, f"run.dir={run}"), env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=group)  # fmt: skip
    metrics, deadline = run / "metrics.jsonl", time.time() + 300
    while not (metrics.exists() and any(r["kind"] == "train" and r["step"] == step - 1 for r in _logged(metrics))):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline
        time.sleep(0.005)
    time.sleep(0.01)  # past the logging of step `step - 1` (a signal there stops after that step): into `step`
    for sig in signals:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_step_3_checkpoints_it_and_resume_logs_every_step_once(tmp_path, uninterrupted, sig):
    run = tmp_path / "run"
    done = _signal_during_step(run, 3, [sig])
    assert done.returncode == 130, done.stderr[-3000:]  # ExitCode.INTERRUPTED
    assert "Traceback" not in done.stderr
    name = signal.Signals(sig).name
    assert _messages(done.stderr) == [
        f"masrl: {name}: stopping after the step in progress, which is then checkpointed; {name} again stops at once",
        f"masrl: interrupted ({name}) after step 3 of {STEPS}; checkpoint written; "
        f"masrl train --resume {run} continues from step 4",
    ]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000003"  # not every 5: the finished step

    resumed = _run("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = _rows(run)
    assert [r["step"] for r in rows if r["kind"] == "train"] == list(range(1, STEPS + 1))  # every step's, once
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [*range(3, STEPS, 3), STEPS]  # every evaluation, once
    assert rows == _rows(uninterrupted)  # and the very numbers, in the order, of a run never stopped


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_second_signal_stops_at_once_keeping_the_last_checkpoint(tmp_path):
    run = tmp_path / "run"
    # during step 8: step 7 ends with its metrics line alone (step 6 evaluates after its line, eval.every=3, so a
    # signal sent just after that line can still land in step 6 and stop cleanly after it)
    done = _signal_during_step(run, 8, [signal.SIGINT, signal.SIGINT])
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    *_, last = _messages(done.stderr)
    assert last == f"masrl: stopped at once during step 8 of {STEPS}; masrl train --resume {run} continues from step 6"
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_000005"
    resumed = _run("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _train_rows(run)] == list(range(1, STEPS + 1))


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_ctrl_c_of_a_two_process_run_checkpoints_its_last_step_and_resume_finishes(tmp_path):
    """trainer.processes=2: Ctrl-C reaches the launcher and both ranks; rank 0's signal decides for both, rank 0
    writes the checkpoint while rank 1 waits for it, and the launcher says what was kept."""
    run = tmp_path / "run"
    done = _signal_during_step(run, 3, [signal.SIGINT], "trainer.processes=2", group=True)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-3000:]
    messages = [m for m in _messages(done.stderr) if not m.startswith("masrl: 2 processes")]
    assert messages == [
        "masrl: SIGINT: stopping after the step in progress, which is then checkpointed; SIGINT again stops at once",
        f"masrl: interrupted (SIGINT) after step 3 of {STEPS}; checkpoint written; "
        f"masrl train --resume {run} continues from step 4",
    ]
    resumed = _run("train", "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _train_rows(run)] == list(range(1, STEPS + 1))


# ---------------------------------------------------------------- 3. a full disk
@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (test_input_paths covers a read-only disk)")
def test_a_full_disk_is_one_line_exit_3_and_resume_finishes_once_space_is_freed(tmp_path):
    """A 256 KiB tmpfs holds a checkpoint or two (~160 KB each, the older pruned after the next is written)
    and not all four: the run stops with one line on a line of its own, exit 3; remounted larger (space
    freed), the command it names finishes the run."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        run = disk / "run"
        # HF generate's replies from the tiny model fill the disk mid-run (the lean engine's happen to be shorter).
        done = _run("train", "single-arithmetic", *tiny_run(), "trainer.steps=4", "eval.before=false", "rollout.engine=hf",
                    f"run.dir={run}")
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-3000:]  # ExitCode.ENVIRONMENT
        (message,) = _messages(done.stderr)  # on its own line: the bar was closed first
        assert message.startswith(f"masrl: cannot write {run}") and "No space left on device" in message, message
        saved = int((run / "checkpoints" / "latest").read_text().strip().removeprefix("step_"))
        assert 1 <= saved < 4  # the disk filled up mid-run, after a checkpoint or two
        assert message.endswith(f"free space on that disk (the checkpoints written so far are whole), then "
                                f"masrl train --resume {run} continues from step {saved + 1}"), message  # fmt: skip

        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)  # space freed
        resumed = _run("train", "--resume", str(run))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert [r["step"] for r in _train_rows(run)] == [1, 2, 3, 4]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---------------------------------------------------------------- 4. the small ones
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return trained_tiny(tmp_path_factory.mktemp("trained") / "run", "eval.before=false")


def test_a_config_path_that_is_a_directory_is_one_line_exit_2(trained):
    done = _run("train", str(trained))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _messages(done.stderr) == [f"masrl: config error: {trained} is a directory, not a YAML config file; "
                                      f"to continue the run in it: masrl train --resume {trained}"]  # fmt: skip


def test_an_unknown_registered_name_is_one_line_naming_the_key_and_the_names_exit_2(tmp_path):
    """algo.credit is a plain string in the schema; its names are the registry's (masrl.choices)."""
    done = _run("train", "algo.credit=tree-q", f"run.dir={tmp_path / 'run'}", "model.name=tiny")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (message,) = _messages(done.stderr)
    assert message.startswith("masrl: config error:") and message.endswith(": 1 problem(s)"), message
    assert "  algo.credit: 'tree-q' is not a registered name; registered: tree_q, descendant_mean, immediate\n" in (
        done.stderr
    )
    assert not (tmp_path / "run").exists()


def test_eval_of_a_run_that_lost_its_config_says_the_run_directory_is_incomplete(trained, tmp_path):
    broken = tmp_path / "broken"
    (broken / "checkpoints").mkdir(parents=True)
    (broken / "metrics.jsonl").write_text((trained / "metrics.jsonl").read_text())
    for command in (["eval", str(broken)], ["train", "--resume", str(broken)]):
        done = _run(*command)
        assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-3000:]  # ExitCode.ENVIRONMENT
        (message,) = _messages(done.stderr)
        assert message.startswith(f"masrl: {broken} is an incomplete run directory: its config.yaml is missing")
        assert "shipped configs" not in message


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_eval_of_a_run_takes_eval_overrides_and_records_the_step_and_checkpoint(trained):
    out = trained / "eval-3.json"
    done = _run("eval", str(trained), "eval.size=3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr
    result = json.loads(out.read_text())
    assert result["items"] == 3 and len(result["per_item"][0]["ids"]) == 3  # the override applied
    assert result["step"] == 2 and result["checkpoint"] == "checkpoints/step_000002"

    refused = _run("eval", str(trained), "eval.size=3", "trainer.lr=1")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert _messages(refused.stderr) == ["masrl: config error: a run directory is evaluated with its saved config; "
                                         "only eval.* keys can be overridden, not trainer.lr=1"]  # fmt: skip


def test_resuming_a_finished_run_says_so_in_one_line(trained):
    before = (trained / "metrics.jsonl").read_text()
    done = _run("train", "--resume", str(trained))
    assert done.returncode == 0, done.stderr[-3000:]  # nothing is wrong: the run is complete
    assert _messages(done.stderr) == [f"masrl: {trained} finished at step 2 of 2; nothing to resume. To train "
                                      f"further, raise trainer.steps in {trained}/config.yaml and run masrl train "
                                      f"--resume {trained}"]  # fmt: skip
    assert (trained / "metrics.jsonl").read_text() == before


@pytest.mark.slow  # 10-30 s of processes on 2 cores: behind the marker so the default run stays near 10 minutes
def test_a_run_whose_checkpoints_are_all_damaged_is_one_line_exit_3(tmp_path):
    """A broken run directory: every checkpoint is set aside, and the line says how to start again."""
    run = tmp_path / "run"
    first = _run("train", "single-arithmetic", *tiny_run(), "eval.before=false", f"run.dir={run}")
    assert first.returncode == 0, first.stderr[-3000:]
    for weights in run.glob("checkpoints/step_*/policy/solver.safetensors"):
        weights.write_bytes(weights.read_bytes()[:100])  # half-written files
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("steps: 2", "steps: 3"))  # to train one more step
    done = _run("train", "--resume", str(run))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr[-3000:]  # ExitCode.ENVIRONMENT
    *set_aside, message = _messages(done.stderr)
    assert [line.split(" is unreadable")[0] for line in set_aside] == [
        "masrl: checkpoint step_000002", "masrl: checkpoint step_000001"]
    assert message == (f"masrl: no checkpoint of {run} reads back whole (each was set aside as broken-step_*); "
                       f"masrl train {run}/config.yaml run.dir=NEW_DIR starts the run again in a new directory")
    fresh = tmp_path / "again"
    again = _run("train", str(config), f"run.dir={fresh}")  # the command the line names
    assert again.returncode == 0, again.stderr[-3000:]
    assert [r["step"] for r in _train_rows(fresh)] == [1, 2, 3]
    assert [r["step"] for r in _train_rows(run)] == [1, 2]  # the broken run is left as it was
