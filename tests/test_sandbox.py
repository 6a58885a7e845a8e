"""The sandbox contains hostile code and reports it, and the test process is unharmed.

Each hostile program (infinite loop, fork bomb, 4 GB allocation, network
connection, writing outside its directory, reading the project, printing
100 MB) must come back as a status, and after every test the `unharmed`
fixture checks that this process leaked no file descriptor or temp directory
and can still fork, allocate and run code.  Where this machine gives the
sandbox its OS boundaries (root: namespaces and a dropped uid), the attacks
are repeated with the audit hook turned off, to show that those boundaries
hold on their own.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

from masrl.sandbox import Isolation, SandboxResult, _classify, _run, isolation, run_code

REPO = Path(__file__).resolve().parents[1]
OS_BOUNDARIES = isolation().namespaces and isolation().drop_privileges
needs_root = pytest.mark.skipif(
    not OS_BOUNDARIES, reason="namespaces and the uid drop need root"
)


def _sandbox_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("masrl-sbx-*")}


def _uid_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    except (FileNotFoundError, ProcessLookupError, StopIteration):
        return None


def _pids_of(uid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _uid_of(p) == uid]


def _open_fds() -> set[str]:
    """This process's open fds, sockets left out.

    The sandbox's parent side opens pipes, pidfds, an epoll fd and O_PATH
    directory handles, never a socket. Earlier tests in the same pytest process
    leave threads behind (HTTP servers, Ray's runtime) that open and close
    sockets on their own schedule; counting those made this check fail now and
    then under load, for fds the sandbox never touched."""
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                fds.add(fd)
        except FileNotFoundError:  # the fd listdir itself used, closed again
            pass
    return fds


@pytest.fixture(autouse=True)
def unharmed():
    """After each test: no leaked fd, thread or temp dir; this process still works."""
    fds = _open_fds()
    threads = threading.active_count()
    dirs = _sandbox_dirs()
    yield
    assert _open_fds() <= fds
    assert threading.active_count() == threads
    assert _sandbox_dirs() <= dirs
    assert len(bytearray(50 << 20)) == 50 << 20
    assert subprocess.run(["true"], check=False).returncode == 0
    assert run_code("print('alive')").stdout == "alive\n"


# --- normal behaviour ------------------------------------------------------


def test_stdout_and_stdin_roundtrip():
    r = run_code(
        "n = int(input())\nprint(sum(map(int, input().split())) * n)",
        stdin="2\n1 2 3\n",
    )
    assert r == SandboxResult("ok", "12\n", "", 0, r.wall_seconds, False)


def test_exception_is_error_with_traceback():
    r = run_code("def f():\n    return 1 / 0\nf()")
    assert (r.status, r.returncode, r.stdout) == ("error", 1, "")
    assert r.stderr.startswith("Traceback (most recent call last):")
    assert (
        'File "<sandbox>", line 2, in f' in r.stderr
    )  # the code's own lines, not the bootstrap's
    assert r.stderr.strip().endswith("ZeroDivisionError: division by zero")


def test_syntax_error_and_exit_code():
    r = run_code("x = (")
    assert r.status == "error" and "SyntaxError" in r.stderr
    r = run_code("print('bye')\nexit(3)")
    assert (r.status, r.returncode, r.stdout) == ("error", 3, "bye\n")


def test_files_mapping_runs_a_unit_test_harness():
    files = {
        "solution.py": "def add(a, b):\n    return a + b\n",
        "tests/test_solution.py": "from solution import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    }
    code = (
        "import runpy\n"
        "ns = runpy.run_path('tests/test_solution.py')\n"
        "ns['test_add']()\n"
        "print(open('solution.py').read().count('def'), 'passed')\n"
    )
    r = run_code(code, files=files)
    assert (r.status, r.stdout) == ("ok", "1 passed\n")
    with pytest.raises(ValueError):
        run_code("pass", files={"../evil.py": ""})


def test_temp_dir_is_removed_after_normal_exit_and_timeout():
    r = run_code(
        "import os\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd(), flush=True)"
    )
    assert r.status == "ok"
    assert not os.path.exists(r.stdout.strip())
    r = run_code(
        "import os, time\nprint(os.getcwd(), flush=True)\ntime.sleep(60)", timeout=0.5
    )
    assert r.status == "timeout"
    assert not os.path.exists(r.stdout.strip())


def test_stdlib_works_and_project_packages_are_absent():
    code = (
        "import json, asyncio, fractions, multiprocessing, tempfile\n"
        "with multiprocessing.Pool(2) as pool:\n"
        "    print(pool.map(abs, [-1, -2]), asyncio.run(asyncio.sleep(0, 'x')))\n"
        "import masrl\n"
    )
    r = run_code(code)
    assert r.stdout == "[1, 2] x\n"
    assert r.stderr.strip().endswith("ModuleNotFoundError: No module named 'masrl'")


# --- hostile programs ------------------------------------------------------


def test_infinite_loop_times_out():
    r = run_code("print('started')\nwhile True:\n    pass", timeout=1.0)
    assert (r.status, r.returncode, r.stdout) == ("timeout", None, "started\n")
    assert r.wall_seconds >= 1.0  # it ran until the timeout; the status and returncode None say the timeout ended it


def test_cpu_limit_stops_a_busy_loop():
    r = run_code("while True:\n    pass", timeout=30, cpu_seconds=1)
    assert (r.status, r.returncode) == ("timeout", -signal.SIGXCPU)  # SIGXCPU: the CPU limit, not the 30 s wall timeout


class _ProcessSampler(threading.Thread):
    """Counts, every few milliseconds, the processes of each sandbox uid."""

    def __init__(self):
        super().__init__(daemon=True)
        self.most: dict[int, int] = {}
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            counts: dict[int, int] = {}
            for p in os.listdir("/proc"):
                if (
                    p.isdigit()
                    and (uid := _uid_of(p)) is not None
                    and uid >= 1_700_000_000
                ):
                    counts[uid] = counts.get(uid, 0) + 1
            for uid, n in counts.items():
                self.most[uid] = max(self.most.get(uid, 0), n)
            time.sleep(0.005)


@pytest.mark.parametrize(
    "bomb",
    [
        "while True:\n    os.fork()",
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ],
    ids=["plain", "persistent"],
)
def test_fork_bomb_is_contained(bomb):
    sampler = _ProcessSampler()
    sampler.start()
    try:
        r = run_code(
            f"import os\nprint(os.getuid(), flush=True)\n{bomb}",
            timeout=1.5,
            max_processes=16,
        )
    finally:
        sampler.done.set()
        sampler.join()
    assert r.status in (
        "timeout",
        "error",
    )  # "error": the first process to see EAGAIN ends the run
    uid = int(r.stdout.split()[0])
    if OS_BOUNDARIES:
        assert uid >= 1_700_000_000  # a fresh unprivileged uid
        assert (
            2 <= sampler.most.get(uid, 0) <= 16
        )  # the bomb ran, never past max_processes at once
        assert _pids_of(uid) == []  # nothing of the sandbox user is left
    # (without root the uid is this process's own; the group kill reaped the bomb)


def test_allocating_4gb_is_a_memory_error_quickly():
    r = run_code("block = bytearray(4 * 2**30)\nprint(len(block))")
    assert (r.status, r.stdout) == ("memory", "")
    assert r.stderr.strip().endswith("MemoryError")  # not "timeout": refused before the 5 s limit
    r = run_code(
        "hoard = []\nwhile True:\n    hoard.append(bytearray(2**20))", memory_mb=256
    )
    assert r.status == "memory"


@pytest.fixture
def listener():
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    yield server
    server.close()


def _assert_no_connection(server):
    with pytest.raises(BlockingIOError):
        server.accept()


@pytest.mark.parametrize(
    "hook",
    [True, pytest.param(False, marks=needs_root)],
    ids=["hook", "namespace-only"],
)
def test_network_connection_fails(listener, hook):
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "s.sendall(b'hello')\n"
        "print('connected')\n"
    )
    r = run_code(code, audit_hook=hook)
    assert r.status == "error" and "connected" not in r.stdout
    if OS_BOUNDARIES:
        assert (
            "Network is unreachable" in r.stderr
        )  # the namespace has no usable interface
    _assert_no_connection(listener)


def test_network_fallback_without_namespaces_is_the_audit_hook(listener):
    # What a machine without root gets (run here with trusted code only).
    port = listener.getsockname()[1]
    for code in (
        f"import socket\nsocket.socket().connect(('127.0.0.1', {port}))",
        "import socket\nsocket.getaddrinfo('localhost', 80)",
    ):
        r = _run(code, iso=Isolation(drop_privileges=False, namespaces=False))
        assert r.status == "error" and "PermissionError: sandbox:" in r.stderr
    _assert_no_connection(listener)


@pytest.mark.parametrize(
    "hook", [True, pytest.param(False, marks=needs_root)], ids=["hook", "os-only"]
)
def test_writing_outside_its_directory_leaves_no_trace(hook):
    targets = [
        f"/tmp/escape-{uuid.uuid4().hex}",
        str(REPO / f"escape-{uuid.uuid4().hex}"),
    ]
    code = "import os\n" + "".join(
        f"try:\n    open({t!r}, 'w').write('x')\nexcept OSError as e:\n    print(type(e).__name__)\n"
        for t in targets
    )
    code += (
        "try:\n    os.chdir('..')\nexcept OSError as e:\n    print(type(e).__name__)\n"
    )
    r = run_code(code, audit_hook=hook)
    assert r.status == "ok"
    for t in targets:
        assert not os.path.exists(t)
    if hook:
        assert r.stdout.split() == ["PermissionError"] * 3


@pytest.mark.parametrize(
    "hook", [True, pytest.param(False, marks=needs_root)], ids=["hook", "os-only"]
)
def test_reading_the_projects_files_fails(hook):
    code = f"print(open({str(REPO / 'pyproject.toml')!r}).read())"
    r = run_code(code, audit_hook=hook)
    assert r.status == "error" and "[project]" not in r.stdout
    if hook:
        assert "PermissionError" in r.stderr
    else:
        assert (
            "FileNotFoundError" in r.stderr
        )  # the mount namespace covers the project's directory
    r = run_code(f"import os\nprint(os.listdir({str(REPO)!r}))", audit_hook=hook)
    assert r.status == "error" and "pyproject.toml" not in r.stdout


def test_printing_100mb_hits_the_output_limit_and_stays_out_of_memory():
    tracemalloc.start()
    try:
        r = run_code(
            "import sys\nsys.stdout.write('x' * 100_000_000)", max_output=64_000
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (r.status, r.truncated, r.returncode) == ("output_limit", True, None)
    assert r.stdout == "x" * 64_000
    assert peak < 4 << 20  # this process never held more than a few chunks
    r = run_code(
        "import sys\nwhile True:\n    sys.stderr.write('y' * 1000)", max_output=5_000
    )
    assert (r.status, r.truncated, len(r.stderr)) == ("output_limit", True, 5_000)


def test_subprocesses_are_refused_by_the_hook():
    for code in (
        "import subprocess\nsubprocess.run(['cat', '/etc/hostname'])",
        "import os\nos.system('true')",
        "import ctypes",
    ):
        r = run_code(code)
        assert r.status == "error" and "PermissionError: sandbox:" in r.stderr


# --- status mapping (pure) -------------------------------------------------


@pytest.mark.parametrize(
    "returncode, reason, stderr, status",
    [
        (0, None, "", "ok"),
        (1, None, "Traceback ...\nValueError: x\n", "error"),
        (1, None, "Traceback ...\nMemoryError\n", "memory"),
        (1, None, "OSError: [Errno 12] Cannot allocate memory\n", "memory"),
        (-signal.SIGXCPU, None, "", "timeout"),
        (-signal.SIGKILL, None, "", "killed"),
        (-signal.SIGSEGV, None, "", "killed"),
        (None, "timeout", "", "timeout"),
        (None, "output_limit", "MemoryError\n", "output_limit"),
    ],
)
def test_classify(returncode, reason, stderr, status):
    assert _classify(returncode, reason, stderr) == status


def test_isolation_matches_privileges():
    iso = isolation()
    if os.geteuid() == 0:
        assert iso.drop_privileges  # as root run_code refuses to run without it
    else:
        assert iso == Isolation(drop_privileges=False, namespaces=False)
    assert isolation() is iso  # probed once
