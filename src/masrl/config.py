"""One typed config: a YAML file plus dotted command-line overrides.

`load_config(path, overrides)` merges, validates and returns a frozen `Config`
before any model loads. Every mistake (unknown key, wrong type, value out of
range, missing file) becomes one `ConfigError` whose message names each bad
field; the CLI prints it and exits with code 2. The resolved config is saved in
the run directory, so `masrl train --resume RUN_DIR` and `masrl eval RUN_DIR`
need nothing else.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator


class ConfigError(ValueError):
    """A config that cannot run; the message is meant for the user as is."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunConfig(Section):
    dir: str = Field("runs/default", description="run directory (metrics, checkpoints, samples)")
    seed: int = Field(0, description="seed for sampling, data order and initialisation")


class ModelConfig(Section):
    name: str = Field("smollm2", description="'smollm2', 'tiny', a local HF directory, or a hub id")
    lora_rank: int = Field(16, ge=0, description="LoRA rank; 0 means full fine-tuning")
    lora_alpha: int = Field(32, gt=0)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    bases: dict[str, str] = Field(
        default_factory=dict, description="policy -> base model name (as model.name; 'NAME#TAG' is another copy of "
        "NAME); unlisted policies and the gae value model use model.name. Policies on one name share one base "
        "(one adapter each); each distinct name is its own base model, tokenizer and generation service"
    )


class TaskConfig(Section):
    kind: str = Field(
        "math", description="a task family: built in (`masrl systems` lists them), 'package.module:OBJECT', or an "
        "installed plugin's name"
    )
    dataset: str = Field("basic_arithmetic", description="reasoning-gym dataset name (kind=math)")
    difficulty: Literal["easy", "medium", "hard", "mixed"] = Field(
        "easy", description="mixed interleaves easy, medium and hard problems"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="the family's own options: raw reasoning-gym config overrides (math); "
        "constructor options of a turn-based task (sudoku: size, blanks; sokoban: size, boxes, inner_walls, ...; "
        "planpath: height, width, wall_density, min_distance; code: families, timeout); the corpus (search: pages, "
        "train_questions, eval_questions, synthetic)"
    )
    path: str | None = Field(
        None, description="JSONL question/answer file (kind=jsonl) or CHAMP pool file (kind=champ)"
    )
    seed: int = 1234


class SamplerConfig(Section):
    rule: Literal["parallel", "full_tree", "fork_on_first", "independent", "round_robin", "per_turn_greedy"] = Field(
        "parallel", description="fork_on_first, independent, round_robin: the search system's FoF, IS, RR; "
        "per_turn_greedy: AT-GRPO's K candidates per decision, the best-rewarded continues"
    )
    group_size: int = Field(8, ge=1, description="G: candidates drawn per decision (parallel: per task)")
    fork_probs: list[float] = Field(
        default_factory=lambda: [0.7, 0.1, 0.2],
        description="round_robin: probability of forking at each agent, in acting order; "
        "independent forks at each of these len(fork_probs) agents",
    )


class RolloutConfig(Section):
    max_new_tokens: int = Field(64, gt=0)
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature during training")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_batch: int = Field(64, gt=0, description="largest generate() batch")
    order: Literal["arrival", "place"] = Field(
        "arrival", description="arrival: an episode lists its calls as they finish and agents draw in the order "
        "they are called; place: a training rollout depends only on each call's place in it (run seed, step, task "
        "slot, call id), not on the order remote agents answer in: calls in tree order, draws keyed by place "
        "(masrl/rollout/tree.py)",
    )  # fmt: skip
    engine: Literal["hf", "lean", "openai"] = Field(
        "hf", description="hf: HF generate with the trainer's own model, the reference (in process, or on "
        "rollout.workers Ray actors); lean: in process, merged adapter weights re-merged after every update, one "
        "prefill per distinct prompt, finished rows leave the batch, Llama-family models through its own decoder "
        "over a preallocated KV cache (masrl/rollout/decode.py); openai: the "
        "OpenAI-compatible inference servers in rollout.servers (`masrl serve --inference`, vLLM, SGLang), which "
        "load the trained LoRA adapters at runtime (docs/scale.md)"
    )
    workers: int = Field(
        0, ge=0, description="Ray actors that generate (each holds the base model and the current adapters); "
        "0 generates in the trainer's process"
    )
    worker_threads: int = Field(1, ge=1, description="torch CPU threads of each rollout worker")
    env_threads: int = Field(
        0, ge=0, description="run environment steps (a system's advance: sandboxed code, tools, retrieval) on this "
        "many threads, off the event loop; 0 runs them on the loop (bit-for-bit reproducible seeded runs)"
    )
    servers: list[str] = Field(default_factory=list, description="engine=openai: base URLs, e.g. http://h:8000/v1")
    server_key_env: str | None = Field(None, description="engine=openai: environment variable holding the API key")
    adapter_dir: str | None = Field(
        None, description="engine=openai: where published adapters are written for the servers to read (a path "
        "every server sees); default <run.dir>/adapters"
    )
    max_staleness: int = Field(
        0, ge=0, description="asynchronous rollouts: generate up to k steps ahead of the trainer, correcting stale "
        "samples with the decoupled PPO objective (algo.behavior_cap); 0 is the synchronous loop"
    )
    timeout_s: float = Field(600.0, gt=0, description="workers/servers: longest one generate batch may take")
    retries: int = Field(1, ge=0, description="workers/servers: how often a failed batch is sent to another one")
    max_batch_tokens: int | None = Field(
        32768, gt=0, description="also cut a generate() batch before rows x (longest prompt + max_new_tokens) exceeds "
        "this: bounds its KV cache and prefill activations when prompts are long; null: only max_batch counts"
    )


class RewardConfig(Section):
    weights: dict[str, float] = Field(
        default_factory=lambda: {"correct": 1.0, "format": 0.1},
        description="weight of each reward component (correct, format)",
    )


class AlgoConfig(Section):
    advantage: Literal["grpo", "grpo_mean", "rloo", "reinforce_baseline", "reinforce", "gae"] = Field(
        "grpo",
        description="group-normalised returns (grpo, grpo_mean, rloo, reinforce_baseline, reinforce), or gae: "
        "per-token GAE from a learned value model (PPO; the critic section)",
    )
    credit: Literal["tree_q", "descendant_mean", "immediate"] = Field(
        "tree_q", description="descendant_mean: MHGPO's backward propagation of the final reward; "
        "immediate: each call's own reward (AT-GRPO)"
    )
    grouping: Literal["task", "siblings", "independent", "round_robin", "agent_turn", "run"] = Field(
        "task", description="independent, round_robin: the search system's IS and RR groups; agent_turn: "
        "AT-GRPO's (environment, agent, turn) groups; run: all calls of a task's runs (one advantage per run) "
        "(masrl/algos/credit.py)"
    )
    aggregation: Literal["token_mean", "seq_mean"] = "token_mean"
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0)
    kl_coef: float = Field(0.0, ge=0.0, description="k3 KL to the reference; 0 skips the reference pass")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount: per turn in tree_q credit, per token in gae")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="gae: GAE lambda (1 = Monte-Carlo return minus V)")
    epochs: int = Field(1, ge=1, description="update epochs over each batch (1 = on-policy)")
    skip_zero_advantage: bool = Field(True, description="leave samples with advantage 0 out of the update")
    behavior_cap: float | None = Field(
        None, gt=0.0, description="rollout.max_staleness > 0: truncate the decoupled objective's pi_prox/pi_behav "
        "weight at this value (truncated importance sampling); None: the untruncated weight (AReaL eq. 5)"
    )
    sample_weight: Literal["none", "inverse_leaves", "per_agent"] = Field(
        "none", description="inverse_leaves: scale each tree's samples by 1/(its leaves), appendix E.2 of the "
        "critique-and-routing paper; per_agent: with seq_mean, MHGPO eq. 6 (mean over agents of each agent's mean)"
    )


class RayConfig(Section):
    address: str | None = Field(
        None, description="an existing Ray cluster to attach to ('auto', or HEAD:6379); None starts one on this "
        "machine for the run (rollout.workers > 0)"
    )
    worker_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves for each rollout worker")


class CriticConfig(Section):
    """The value model of algo.advantage=gae: a value head on its own LoRA adapter of the policy's base model."""

    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate of the value adapter and head")
    weight_decay: float = Field(0.0, ge=0.0)
    value_clip: float | None = Field(
        0.2, gt=0.0, description="PPO value clipping: a value moves at most this far from its scoring-time "
        "prediction per update; null switches clipping off"
    )
    micro_batch: int = Field(8, ge=1, description="sequences per value forward/backward (scoring and update)")
    epochs: int = Field(1, ge=1, description="value-loss steps per batch")
    whiten_advantages: bool = Field(
        True, description="normalise GAE advantages over the batch's tokens to mean 0, std 1 (as verl does)"
    )


class TrainerConfig(Section):
    steps: int = Field(40, ge=1)
    batch_size: int = Field(8, ge=1, description="tasks per step")
    lr: float = Field(2e-4, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    micro_batch: int = Field(8, ge=1, description="sequences per forward/backward")
    max_grad_norm: float = Field(1.0, gt=0.0)
    checkpoint_every: int = Field(10, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    log_episodes: int = Field(2, ge=0, description="episodes per step written to samples.jsonl (the batch's first N)")
    log_episodes_every: int = Field(
        1, ge=1, description="write samples.jsonl trees at step 1 and every N-th step (keeps long runs' files small)"
    )
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default")
    low_memory: bool = Field(
        False, description="fix glibc's mmap threshold: about half the peak RSS, slower updates; for runs without "
        "jemalloc, which `masrl train` restarts under when the system has it (masrl/memory.py)"
    )
    max_minutes: float | None = Field(
        None,
        gt=0.0,
        description="stop before a step that would end past this much training time (checkpoints counted, "
        "evaluations not; per process: a resumed run gets its own allowance); null = run all steps",
    )
    processes: int = Field(
        1, ge=1, description="data-parallel trainer processes started on this machine (gloo on CPU, nccl on CUDA; "
        "masrl/distributed.py); under torchrun leave it 1: torchrun starts the processes"
    )
    timeout_minutes: float = Field(
        30.0, gt=0.0, description="how long a process waits for the others at a collective (rank 0's evaluation "
        "included) before the run stops"
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when torch sees a GPU, else cpu")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 on cuda (bf16 base weights, float32 adapters, bf16 autocast), fp32 on cpu"
    )
    gradient_checkpointing: bool = Field(
        False, description="recompute activations in the backward pass: less memory for long prompts, more compute"
    )
    micro_batch_tokens: int | None = Field(
        1536, ge=1, description="also cut a micro-batch before its forward pass exceeds this many token positions "
        "(padding included, a shared prompt counted once): bounds the activations a long-prompt batch keeps for "
        "the backward pass; null: only micro_batch counts"
    )
    share_prompts: bool = Field(
        True, description="in the update, run each distinct prompt of a micro-batch once and its responses against "
        "its cached keys and values (a GRPO group's G rows share one prompt); false: one pass per row"
    )


class EvalConfig(Section):
    size: int = Field(100, ge=1, description="held-out items")
    before: bool = Field(True, description="evaluate the untrained policy before step 1")
    every: int = Field(0, ge=0, description="evaluate every N steps; 0 = only at the end")
    max_new_tokens: int = Field(64, gt=0)


class SandboxConfig(Section):
    """Where agent code runs (masrl.sandbox). Without root, isolation comes from unprivileged user
    namespaces; a machine without them refuses to run agent code unless `limits_only` is true,
    which runs it under rlimits and the audit hook only and warns on every call."""

    limits_only: bool = False


class SystemSection(Section):
    """The `system` section: `kind` names the system; the rest of the section is that system's own
    config model (a subclass, declared by the system's `SystemSpec`, masrl.systems.api)."""

    kind: str = Field("single", description="a built-in system, 'package.module:OBJECT', or an installed plugin's name")


class Config(Section):
    """The engine's sections plus one `system` section, typed by the chosen system (`config_model`)."""

    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    system: SystemSection = SystemSection()
    sampler: SamplerConfig = SamplerConfig()
    rollout: RolloutConfig = RolloutConfig()
    reward: RewardConfig = RewardConfig()
    algo: AlgoConfig = AlgoConfig()
    critic: CriticConfig = CriticConfig()
    ray: RayConfig = RayConfig()
    trainer: TrainerConfig = TrainerConfig()
    eval: EvalConfig = EvalConfig()
    sandbox: SandboxConfig = SandboxConfig()

    @model_validator(mode="after")
    def _cross_checks(self) -> "Config":
        from masrl.systems import resolve_system
        from masrl.tasks import resolve_task

        spec = resolve_system(self.system.kind)
        family = resolve_task(self.task.kind)
        if family.needs_path and not self.task.path:
            raise ValueError(f"task.path is required when task.kind is {self.task.kind!r}")
        if family.system is not None and family.system != spec.kind:
            raise ValueError(f"task.kind {self.task.kind!r} is made for system.kind {family.system!r}; "
                             f"system.kind is {self.system.kind!r}")  # fmt: skip
        if spec.own_tasks and family.system != spec.kind:
            raise ValueError(f"system.kind {self.system.kind!r} runs only task families made for it "
                             f"(TaskFamily(system={spec.kind!r})); task.kind {self.task.kind!r} is not one")  # fmt: skip
        if self.sampler.rule not in spec.rules:
            raise ValueError(f"sampler.rule {self.sampler.rule!r} does not fit system.kind {self.system.kind!r}; "
                             f"its rules: {', '.join(spec.rules)}")  # fmt: skip
        if any(p < 0 for p in self.sampler.fork_probs) or sum(self.sampler.fork_probs) <= 0:
            raise ValueError(f"sampler.fork_probs must be >= 0 and not all 0, got {self.sampler.fork_probs}")
        r = self.rollout
        if r.engine == "openai" and r.workers:
            raise ValueError("rollout.workers are Ray actors of the hf engine; with rollout.engine 'openai' "
                             "the servers in rollout.servers generate: set rollout.workers=0")
        if r.engine == "openai" and not r.servers:
            raise ValueError("rollout.engine 'openai' needs rollout.servers (base URLs of inference servers)")
        if r.engine == "openai" and self.model.bases:
            raise ValueError("rollout.engine 'openai' serves one base model (model.name): model.bases is not supported")
        if r.engine == "openai" and self.model.lora_rank == 0:
            raise ValueError("rollout.engine 'openai' sends LoRA adapters to the servers: set model.lora_rank > 0")
        if r.workers and importlib.util.find_spec("ray") is None:
            raise ValueError("rollout.workers needs Ray: pip install 'masrl[scale]' (or 'ray[default]')")
        if r.engine == "lean" and r.workers:
            raise ValueError("rollout.engine 'lean' generates in the trainer's process; rollout.workers generate with "
                             "HF generate (engine 'hf'): set one of them")
        if r.max_staleness and r.engine != "openai" and not r.workers:
            raise ValueError("rollout.max_staleness > 0 generates while the trainer updates: it needs "
                             "rollout.workers > 0 or rollout.engine 'openai'")
        if self.algo.advantage == "gae" and self.model.lora_rank == 0:
            raise ValueError("algo.advantage 'gae' puts the value head on its own LoRA adapter: set model.lora_rank > 0")
        unknown = set(self.reward.weights) - {"correct", "format"}
        if unknown:
            raise ValueError(f"reward.weights has unknown components {sorted(unknown)}; known: correct, format")
        if spec.check is not None:
            spec.check(self)
        return self


@functools.cache
def config_model(section: type[SystemSection]) -> type[Config]:
    """`Config` with its `system` section typed as `section` (one class per system, made once)."""
    return create_model(f"Config[{section.__name__}]", __base__=Config, system=(section, ...))


PACKAGED = Path(__file__).parent / "configs"
DEFAULT_CONFIG = PACKAGED / "default.yaml"


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read YAML (or the packaged default), apply `a.b=value` overrides, validate."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.exists() and (PACKAGED / f"{path}.yaml").exists():
        path = PACKAGED / f"{path}.yaml"  # a shipped config by name: `masrl train single-arithmetic`
    if not path.exists():
        shipped = ", ".join(sorted(p.stem for p in PACKAGED.glob("*.yaml")))
        raise ConfigError(f"config file {path} does not exist (shipped configs: {shipped})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    for item in overrides:
        apply_override(data, item)
    for note in migrate(data):
        print(f"masrl: note: {path}: {note}", file=sys.stderr)
    return validate(data, source=str(path))


def apply_override(data: dict, item: str) -> None:
    """`trainer.lr=1e-5`: the value is parsed as YAML (numbers, lists, booleans)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like section.key=value")
    key, raw = item.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, (dict, list)) and not raw.strip().startswith(("{", "[")):
        value = raw  # "Format: <answer>N</answer>" is a string with a colon, not a mapping
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {part} is not a section")
    node[parts[-1]] = value


def validate(data: dict, source: str = "config") -> Config:
    """The typed config of `data`: its `system` section checked against the chosen system's own model."""
    from masrl.systems import resolve_system

    system = data.get("system") or {}
    if not isinstance(system, dict):
        raise ConfigError(f"{source}: system must be a section (kind: ..., and the system's keys)")
    spec = resolve_system(str(system.get("kind", SystemSection().kind)))
    model = config_model(spec.config)
    try:
        config = model.model_validate({**data, "system": {**system, "kind": system.get("kind", spec.kind)}})
    except ValidationError as exc:
        raise ConfigError(_explain(exc, source, model)) from None
    problems = _check_files(config)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


def migrate(data: dict) -> list[str]:
    """Move a config written before systems became packages into the current layout, in place.

    Then each system had a top-level section of its own, named after it, beside a `system`
    section of a few keys of several systems (`Legacy.system_keys`) and a shared pool section;
    now all of it is the one `system` section. Each built-in system says which old sections are its own (`SystemSpec.legacy`); the
    sections of other systems (every old run directory saved all of them) are dropped. Returns one
    note per move, for the user: what moved where.
    """
    from masrl.systems import builtin_systems, resolve_system

    system = data.get("system")
    if system is not None and not isinstance(system, dict):
        return []  # validate() says what is wrong
    system = dict(system or {})
    notes = []
    kind = str(system.get("kind", SystemSection().kind))
    spec = resolve_system(kind)
    builtin = builtin_systems()
    if builtin.get(kind) is spec and spec.kind != kind:
        notes.append(f"system.kind {kind!r} is now {spec.kind!r}")
        system["kind"] = kind = spec.kind
    old_sections = {name for s in builtin.values() for name in s.legacy.sections}
    if not old_sections & set(data):
        if notes:
            data["system"] = system
        return notes
    legacy = spec.legacy
    for source, target in legacy.moves.items():
        value = _pop_path(data, source)
        if value is not _MISSING:
            _set_path(data, target, value)
            notes.append(f"{source} is now {target}")
    other_keys = {k for s in builtin.values() for k in s.legacy.system_keys} - set(legacy.system_keys)
    system = {k: v for k, v in system.items() if k not in other_keys}
    for section, target in legacy.sections.items():
        if section in data:
            values = data.pop(section)
            if target:
                system[target] = _merge(system.get(target) or {}, values or {})
            else:
                system = _merge(system, values or {})
            notes.append(f"the {section}: section is now system{'.' + target if target else ''}")
    dropped = sorted(old_sections & set(data))
    for section in dropped:
        del data[section]
    if dropped:
        notes.append(f"ignored the sections of other systems: {', '.join(dropped)}")
    data["system"] = system
    return notes


_MISSING = object()


def _pop_path(data: dict, dotted: str) -> Any:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    return node.pop(leaf, _MISSING) if isinstance(node, dict) else _MISSING


def _set_path(data: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


def _merge(base: dict, top: dict) -> dict:
    """`top` over `base`, merging nested mappings (an old `pool:` over a new `system.pool:`)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _check_files(config: Config) -> list[str]:
    from masrl.models import check_model_name

    problems = []
    if config.task.path and not Path(config.task.path).expanduser().exists():
        problems.append(f"task.path: file {config.task.path} does not exist")
    named = {"model.name": config.model.name, **{f"model.bases.{p}": n for p, n in config.model.bases.items()}}
    for key, name in named.items():
        model_problem = check_model_name(name)
        if model_problem:
            problems.append(f"{key}: {model_problem}")
    return problems


def _explain(exc: ValidationError, source: str, model: type[BaseModel] = Config) -> str:
    lines = [f"{source}: {exc.error_count()} problem(s)"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key{_did_you_mean(err['loc'], model)}")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"  {loc or 'config'}: {err['msg']}{shown}")
    return "\n".join(lines)


def _did_you_mean(loc: tuple, section: type[BaseModel] = Config) -> str:
    for part in loc[:-1]:
        field = section.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return ""
        section = field.annotation
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1)
    known = ", ".join(section.model_fields)
    return f"; did you mean '{close[0]}'?" if close else f"; known keys: {known}"


def dump_config(config: Config, path: Path) -> None:
    from masrl.checkpoint import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
