"""`rollout.engine` in one place: whether a config's choice can run, what `auto` resolves to, and a base's generate.

`ENGINES` holds the names (masrl.loading refuses any other before
anything loads); this module gives them their meaning. `check_engine` runs with the config's
cross-checks (masrl.loading), before any model loads; `resolve_engine` turns
`auto` into the lean engine or HF generate for a placement; `sampler` is the
in-process generate of a resolved name, in the trainer's process and in each
Ray worker (masrl.generation.ray), refusing a `rollout.precision` the model or
the CPU cannot run (`precision_problem`). The remote engines, inference servers
for `openai` (masrl.generation.remote) and Ray workers for `rollout.workers`
(masrl.generation.ray, which calls `sampler` in each worker), are started by
masrl.parts.start_remote.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping

import torch

from masrl.agents.policy import PolicyModel
from masrl.config import ConfigError, RolloutConfig
from masrl.device import Placement
from masrl.generation.hf import HFEngine
from masrl.generation.lean import LeanEngine
from masrl.generation.llama import bf16_supported, supported
from masrl.generation.sampling import Generation

# rollout.engine's names: auto picks lean or hf (`resolve_engine`), `sampler` builds hf and lean, and
# masrl.parts.start_remote connects openai's servers.
ENGINES = ("auto", "hf", "lean", "openai")


def check_engine(rollout: RolloutConfig, *, lora_rank: int, bases: Mapping[str, str],
                 behavior_cap: float | None) -> None:  # fmt: skip
    """Raise ValueError where the rollout section's engine (`rollout.engine`, its workers or servers,
    `rollout.precision`, `rollout.max_staleness`) does not fit the model (`model.lora_rank`, `model.bases`)
    and the algorithm (`algo.behavior_cap`); masrl.loading calls it with the other cross-checks, before
    anything loads."""
    if rollout.engine == "openai" and rollout.workers:
        raise ValueError("rollout.workers are Ray actors of the hf engine; with rollout.engine 'openai' "
                         "the servers in rollout.servers generate: set rollout.workers=0")  # fmt: skip
    if rollout.engine == "openai" and not rollout.servers:
        raise ValueError("rollout.engine 'openai' needs rollout.servers (base URLs of inference servers)")
    if rollout.engine == "openai" and bases:
        raise ValueError("rollout.engine 'openai' serves one base model (model.name): model.bases is not supported")
    if rollout.engine == "openai" and lora_rank == 0:
        raise ValueError("rollout.engine 'openai' sends LoRA adapters to the servers: set model.lora_rank > 0")
    if rollout.workers and importlib.util.find_spec("ray") is None:
        raise ValueError("rollout.workers needs Ray: pip install 'masrl[scale]' (or 'ray[default]')")
    if rollout.precision != "float32":
        # The sampler's policy is then not the trainer's: only the truncated importance weight keeps the
        # update on the trainer's policy (Yao et al. 2025's TIS for vLLM-vs-trainer mismatch; AReaL eq. 5).
        if rollout.engine in ("hf", "openai"):
            raise ValueError(f"rollout.precision {rollout.precision!r} sets the lean engine's matmuls; "
                             f"rollout.engine {rollout.engine!r} samples in the model's own precision: "
                             "use rollout.engine lean or auto")  # fmt: skip
        if lora_rank == 0:
            raise ValueError(f"rollout.precision {rollout.precision!r} samples from the lean engine's merged copy "
                             "of the LoRA weights: set model.lora_rank > 0")  # fmt: skip
        if behavior_cap is None:
            raise ValueError(f"rollout.precision {rollout.precision!r} samples from a policy near the trainer's, and "
                             "the update corrects each token by pi_trainer / pi_sampler truncated at "
                             "algo.behavior_cap: set it (2.0 is usual)")  # fmt: skip
    if rollout.max_staleness and rollout.engine != "openai" and not rollout.workers:
        raise ValueError("rollout.max_staleness > 0 generates while the trainer updates: it needs "
                         "rollout.workers > 0 or rollout.engine 'openai'")  # fmt: skip


def resolve_engine(engine: str, place: Placement) -> str:
    """The engine that samples, in the trainer's process or in each Ray worker (which holds the trainer's
    placement): `rollout.engine`, with `auto` the lean one wherever its weights are the dtype it computes in:
    float32 on CPU (several times HF generate's tokens/s there: bench/generate_vs_hf.py) and bf16 or float32 on
    CUDA (CUDA graphs: 3x HF generate end to end on an H200 with the same learning, docs/gpu.md). HF generate
    samples only where the placement autocasts float32 weights to bf16 (trainer.precision=bf16 on CPU), which the
    lean engine's packed float32 weights do not run under."""
    if engine != "auto":
        return engine
    return "lean" if place.compute is None or place.compute == place.weights else "hf"


def sampler(model: PolicyModel, engine: str, precision: str = "float32") -> Callable[..., list[Generation]]:
    """`model`'s generate for a resolved engine name (`resolve_engine`): "lean" samples through a
    LeanEngine (its matmuls in `precision`), "hf" through HF generate (HFEngine)."""
    if engine == "lean":
        problem = precision_problem(model) if precision != "float32" else None
        if problem:
            raise ConfigError(f"rollout.precision {precision}: {problem}")
        return LeanEngine(model, precision=precision).generate
    if precision != "float32":
        raise ConfigError(f"rollout.precision {precision} sets the lean engine's matmuls; this base samples "
                          f"with {engine} (rollout.engine auto picks hf under trainer.precision bf16 on CPU)")  # fmt: skip
    return HFEngine(model).generate


def precision_problem(model: PolicyModel) -> str | None:
    """Why the lean engine cannot sample `model` in bf16 (`rollout.precision`), or None."""
    if model.lora is None:
        return "it samples from a merged copy of LoRA weights, and this model trains all its weights"
    place = model.placement
    if place.device.type != "cpu" or place.weights != torch.float32 or place.compute is not None:
        return (f"it runs float32 models on CPU; this one is {place.weights} on {place.device}"
                + (f" under {place.compute} autocast (trainer.precision)" if place.compute is not None else ""))
    if not supported(model.model.get_base_model()):
        return f"it runs the lean engine's Llama-family decoder, which {model.model.config.model_type} is not"
    if not bf16_supported():
        return "this CPU lacks AVX-512 BF16 (and AMX), so oneDNN would emulate bfloat16, slower than float32"
    return None
