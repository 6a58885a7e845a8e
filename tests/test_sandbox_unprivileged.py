"""The hostile-input suite as an ordinary user: masrl.sandbox isolates through unprivileged user
namespaces, with the audit hook off so only the OS boundaries are tested.

Run as root, the test drops to `nobody` with setpriv for the whole driver (sandbox.py is
stdlib-only, so a copy of it and the system interpreter are all the driver needs); run as an
ordinary user, it runs the driver directly. It skips, saying why, where the machine allows
neither (no setpriv as root, or no unprivileged user namespaces)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import masrl.sandbox

DRIVER = r"""
import json, os, socket, sys, time
from sandbox import isolation, run_code, SandboxError

PY = sys.executable
project, marker_dir = sys.argv[1], sys.argv[2]
os.environ["MASRL_TEST_SECRET"] = "s3cret-token"
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
port = listener.getsockname()[1]
out = {"uid": os.getuid(), "mode": isolation(PY).mode}

def run(name, code, **kw):
    r = run_code(code, python=PY, audit_hook=False, timeout=kw.pop("timeout", 5.0), **kw)
    out[name] = {"status": r.status, "stdout": r.stdout[-2000:], "stderr": r.stderr[-500:], "truncated": r.truncated,
                 "wall": r.wall_seconds}

# the process cap is the code's own, whatever else this user runs (20 idle processes here)
import subprocess
idle = [subprocess.Popen(["/bin/sleep", "30"]) for _ in range(20)]
run("process_cap", "import os, time\nn = 0\ntry:\n    while n < 200:\n        if os.fork() == 0:\n"
    "            time.sleep(3)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)")
for p in idle:
    p.kill()
    p.wait()
run("infinite_loop", "while True: pass", timeout=2.0, cpu_seconds=1.0)
run("fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout=3.0)
run("alloc_4gb", "x = bytearray(4 << 30)\nprint('allocated')")
run("network_loopback", f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')")
run("write_outside", f"open({marker_dir!r} + '/escaped', 'w').write('x')\nprint('wrote')")
run("read_project", f"print(sorted(__import__('os').listdir({project!r})))\nprint(open({project!r} + '/pyproject.toml').read()[:40])")
run("read_home", "import os\nprint(os.listdir(os.path.expanduser('~')))\nprint(os.listdir('/root'))")
run("flood_100mb", "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * (1 << 20))")
run("kill_parent", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint('still here')")
token = "masrl-orphan-" + str(os.getpid())
run("double_fork", f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    f"        open('/dev/null').close()\n        os.execv('/bin/sleep', ['/bin/sleep', '30', '{token}'])\n    os._exit(0)\n"
    "time.sleep(0.2)\nprint('left one behind')")
time.sleep(0.3)
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if token in open(f"/proc/{pid}/cmdline").read():
            left.append(pid)
    except OSError:
        pass
out["double_fork"]["left"] = left
run("environment", "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ').read())")
out["escaped"] = os.path.exists(marker_dir + "/escaped")
# a machine with no isolation: refused, unless limits_only says to run anyway (with a warning each call)
import sandbox, warnings
sandbox.isolation = lambda python=None: sandbox.Isolation(False, False)
try:
    run_code("print(1)", python=PY)
    out["refused"] = ""
except SandboxError as e:
    out["refused"] = str(e)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ran = [run_code("print(1)", python=PY, limits_only=True).stdout for _ in range(2)]
out["limits_only"] = {"stdout": ran, "warnings": [str(w.message) for w in caught if w.category is sandbox.SandboxWarning]}
out["driver_alive"] = True
print(json.dumps(out))
"""


def _can_use_user_namespaces(prefix: list[str]) -> bool:
    probe = [*prefix, "unshare", "--user", "--map-root-user", "--pid", "--fork", "--net", "--mount", "true"]
    return shutil.which("unshare") is not None and subprocess.run(probe, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def hostile():
    root = os.geteuid() == 0
    if root and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot become an ordinary user for this test")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if root else []
    if not _can_use_user_namespaces(prefix):
        pytest.skip("this machine gives ordinary users no user namespaces (kernel.unprivileged_userns_clone)")
    # pytest's own temp root is private to its user: the ordinary user needs a directory it can read
    with tempfile.TemporaryDirectory(prefix="masrl-unprivileged-", dir="/tmp") as tmp:
        return _drive(Path(tmp), prefix, root)


def _drive(work: Path, prefix: list[str], root: bool) -> dict:
    shutil.copy(masrl.sandbox.__file__, work / "sandbox.py")
    (work / "driver.py").write_text(DRIVER)
    markers = work / "markers"
    markers.mkdir()
    for path in (work, markers):
        path.chmod(0o777)
    os.chmod(work / "sandbox.py", 0o644)
    os.chmod(work / "driver.py", 0o644)
    python = "/usr/bin/python3" if root and os.access("/usr/bin/python3", os.X_OK) else sys.executable
    if subprocess.run([*prefix, python, "-c", "pass"], capture_output=True, cwd="/").returncode != 0:
        pytest.skip(f"the ordinary user cannot run {python} (a Python 3.11 it can execute is needed)")
    project = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        [*prefix, python, str(work / "driver.py"), project, str(markers)],
        cwd=work, capture_output=True, text=True, timeout=240, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_runs_as_an_ordinary_user_in_user_namespaces(hostile):
    assert hostile["uid"] != 0
    assert hostile["mode"] == "user namespaces"
    assert hostile["driver_alive"]


@pytest.mark.parametrize(
    "case,statuses",
    [
        ("infinite_loop", {"timeout"}),
        ("alloc_4gb", {"memory"}),
        ("network_loopback", {"error"}),
        ("write_outside", {"error", "ok"}),  # ok: it wrote into a private tmpfs that vanished
        ("read_project", {"error", "ok"}),
        ("flood_100mb", {"output_limit"}),
    ],
)
def test_hostile_case_is_contained(hostile, case, statuses):
    assert hostile[case]["status"] in statuses, hostile[case]


def test_contents_stay_hidden(hostile):
    assert "connected" not in hostile["network_loopback"]["stdout"]
    assert "Network is unreachable" in hostile["network_loopback"]["stderr"]
    assert "allocated" not in hostile["alloc_4gb"]["stdout"]
    assert hostile["escaped"] is False
    assert "[project]" not in hostile["read_project"]["stdout"] and "pyproject.toml" not in hostile["read_project"]["stdout"]
    assert "tests" not in hostile["read_project"]["stdout"]
    assert hostile["flood_100mb"]["truncated"] and len(hostile["flood_100mb"]["stdout"]) <= 64_000


def test_process_cap_is_the_codes_own(hostile):
    # max_processes=16 counts the code itself: 15 children, with 20 other processes of the user running
    assert hostile["process_cap"]["stdout"] == "15\n", hostile["process_cap"]


def test_fork_bomb_and_orphans_die_with_the_sandbox(hostile):
    assert hostile["fork_bomb"]["status"] in {"timeout", "killed", "error"}
    assert hostile["double_fork"]["status"] == "ok" and "left one behind" in hostile["double_fork"]["stdout"]
    assert hostile["double_fork"]["left"] == []  # the PID namespace took the grandchild down


def test_cannot_kill_its_parent_and_sees_no_secrets(hostile):
    assert "still here" in hostile["kill_parent"]["stdout"]  # PID 1 of its namespace ignores its SIGKILL
    env = hostile["environment"]["stdout"]
    assert "MASRL_TEST_SECRET" not in env and "s3cret-token" not in env
    assert hostile["environment"]["status"] in {"ok", "error"}


def test_no_isolation_is_an_error_unless_limits_only_is_chosen(hostile):
    assert "no isolation" in hostile["refused"] and "limits_only" in hostile["refused"]
    assert hostile["limits_only"]["stdout"] == ["1\n", "1\n"]
    assert len(hostile["limits_only"]["warnings"]) == 2 and "limits only" in hostile["limits_only"]["warnings"][0]
