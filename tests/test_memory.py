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
