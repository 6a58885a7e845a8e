"""masrl.components: a model cache that is a file is one line, exit code 2, for `masrl models` (which used
to call the models "ready") and for a run that needs the cache (a traceback once the model converted)."""

from __future__ import annotations

import subprocess
import sys

from processes import ENV, messages


def test_a_model_cache_that_is_a_file_is_one_line(tmp_path):
    cache = tmp_path / "cache"
    cache.write_text("not a directory\n")
    env = {**ENV, "MASRL_CACHE": str(cache)}
    for argv in (["models"], ["train", "single-arithmetic", f"run.dir={tmp_path / 'run'}"]):
        done = subprocess.run([sys.executable, "-m", "masrl.cli", *argv], env=env, capture_output=True, text=True,
                              timeout=600)  # fmt: skip
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert messages(done.stderr) == [f"masrl: config error: the model cache {cache} is a file, not a directory; "
                                         "point MASRL_CACHE at a directory (masrl keeps converted models there)"]
        assert "ready" not in done.stdout
    assert not (tmp_path / "run").exists()
