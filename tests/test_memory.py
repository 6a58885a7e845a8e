"""masrl.memory: glibc's mmap threshold is fixed once, and a user's setting wins."""

import os
import subprocess
import sys

CODE = "from masrl.memory import keep_heap_small as k; print(k(), k())"


def _run(env):
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_set_once_per_process():
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    assert _run(env) == ["True", "False"]


def test_user_setting_wins():
    assert _run({**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}) == ["False", "False"]


# ---- jemalloc by default (masrl.memory.jemalloc_env, cli re-execution) ----
LIB = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def test_jemalloc_env_preloads_the_library_once():
    from masrl.memory import jemalloc_env

    env = jemalloc_env({"PATH": "/bin"}, LIB)
    assert env == {"PATH": "/bin", "LD_PRELOAD": LIB}
    assert jemalloc_env(env, LIB) is None  # already preloaded: no second re-execution
    assert jemalloc_env({"LD_PRELOAD": "/x/libfoo.so"}, LIB) == {"LD_PRELOAD": f"{LIB}:/x/libfoo.so"}


def test_jemalloc_env_respects_the_opt_out_and_a_missing_library():
    from masrl.memory import jemalloc_env

    assert jemalloc_env({"MASRL_ALLOCATOR": "system"}, LIB) is None
    assert jemalloc_env({"MASRL_ALLOCATOR": "System"}, LIB) is None
    assert jemalloc_env({}, None) is None


def test_find_jemalloc_looks_in_the_given_directories(tmp_path):
    from masrl.memory import find_jemalloc

    assert find_jemalloc([str(tmp_path)]) is None
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    assert find_jemalloc(["/nonexistent", str(tmp_path)]) == str(tmp_path / "libjemalloc.so.2")


def _restart(env) -> tuple[str, str]:
    """Call the CLI's re-execution in a fresh interpreter, asking for `masrl models` afterwards: (stdout, stderr)."""
    code = "from masrl.memory import reexec_with_jemalloc; reexec_with_jemalloc(['models'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout, out.stderr


def test_the_cli_restarts_under_jemalloc_when_present_and_not_when_opted_out():
    from masrl.memory import find_jemalloc

    if find_jemalloc() is None:
        import pytest

        pytest.skip("no libjemalloc2 on this machine (scripts/setup.sh installs it)")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MASRL_ALLOCATOR")}
    # `masrl models` after the restart: it prints the model table, and stderr says which allocator runs.
    out, err = _restart(env)
    assert "memory allocator jemalloc" in err and "smollm2" in out
    out, err = _restart({**env, "MASRL_ALLOCATOR": "system"})
    assert "jemalloc" not in err and out == ""  # no restart: the snippet itself prints nothing
