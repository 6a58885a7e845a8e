"""masrl.cli's `main`: a signal at start-up is one line and exit code 130; the argument mistakes and a
closed pipe that used to end in a traceback or the wrong code (issue 50). The real command in a subprocess."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from processes import ENV, finish, loads_torch, masrl, messages, wait_until
from smoke import tiny_run


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_start_up_is_one_line_exit_130_and_leaves_nothing(tmp_path, sig):
    """Sent while the command is still importing torch (seconds, before any config is read): `main` has
    its handlers by then. It used to be a KeyboardInterrupt traceback (SIGINT) or a silent 143 (SIGTERM)."""
    run = tmp_path / "run"
    proc = masrl("train", "single-arithmetic", *tiny_run(), f"run.dir={run}")
    wait_until(lambda: loads_torch(proc.pid), proc)
    proc.send_signal(sig)
    done = finish(proc)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = messages(done.stderr)
    assert line.startswith(f"masrl: interrupted ({signal.Signals(sig).name})"), line
    assert not run.exists()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "masrl.cli", *args], env=ENV, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.mark.parametrize("command", ["compare", "report", "view"])
def test_a_results_command_on_a_directory_that_is_no_run_exits_2(tmp_path, command):
    done = _cli(command, str(tmp_path), *(["--no-open"] if command == "view" else []))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]  # an argument mistake
    (line,) = messages(done.stderr)
    assert str(tmp_path) in line, line


def test_serve_refuses_a_port_that_is_no_tcp_port_before_loading_anything(tmp_path):
    done = _cli("serve", str(tmp_path / "no-run"), "--port", "70000")  # the port is checked first
    assert done.returncode == 2, done.stderr[-3000:]
    assert messages(done.stderr) == ["masrl: config error: --port 70000 is not a TCP port (0 to 65535)"]


def test_output_to_a_reader_that_went_away_ends_quietly():
    """`masrl models | head -1`: the reader closes the pipe; no BrokenPipeError traceback, exit 141 (as a
    Unix tool that SIGPIPE ends). The reader here closes it before the first line: with `head -1`'s timing
    the whole listing may fit in the pipe before the close, and the command ends 0, as it should."""
    proc = subprocess.Popen([sys.executable, "-m", "masrl.cli", "models"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # the reader is gone before a line is written (the command takes seconds to start)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141, err
    assert err == "", err
