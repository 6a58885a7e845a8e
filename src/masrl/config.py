"""The config's schema: one typed, frozen section per part of the engine, and `ConfigError`.

This module only describes a config (field types, ranges, defaults, what each key means); it
imports nothing of masrl. Reading one is `masrl.loading.load_config(path, overrides)`: YAML,
dotted overrides, old layouts moved (masrl.migration), every field validated here (a section whose
keys must fit each other checks them in its `check`, so a section with bad values is never built)
and then the cross-checks between sections and against the chosen system and task family, all
before any model loads (docs/architecture.md: the schema sits at the bottom, loading above the registry).
A key that names a registered function or engine (algo.advantage, rollout.engine, ...) is a plain
string here: its names are the tables where each is chosen (masrl.choices), which loading checks.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator


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
    lora_alpha: int = Field(32, gt=0, description="LoRA scale: the adapter's update is multiplied by alpha / rank")
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the LoRA adapters' input; only with "
                                 "algo.epochs 1 and rollout.max_staleness 0, where the loss compares one forward pass with itself")
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
    dataset: str = Field(
        "basic_arithmetic", description="the reasoning-gym dataset of task.kind math (and of math_turns): "
        "basic_arithmetic, chain_sum and gsm_symbolic have easy, medium and hard levels of their own "
        "(masrl/tasks/math.py); any other reasoning-gym dataset (gcd, lcm, decimal_arithmetic, "
        "fraction_simplification, simple_equations, prime_factorization, ...) runs at its own defaults at every "
        "level; a name reasoning-gym does not have is refused with the list of all"
    )
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
        None, description="JSONL question/answer file, plain or .gz (kind=jsonl), or CHAMP pool file (kind=champ)"
    )
    seed: int = Field(1234, description="seed of the task family's items and of its train / held-out split")


class SamplerConfig(Section):
    rule: str = Field(
        "parallel", description="fork_on_first, independent, round_robin: the search system's FoF, IS, RR; "
        "per_turn_greedy: AT-GRPO's K candidates per decision, the best-rewarded continues"
    )
    group_size: int = Field(8, ge=1, description="G: candidates drawn per decision (parallel: per task)")
    fork_probs: list[float] = Field(
        default_factory=lambda: [0.7, 0.1, 0.2],
        description="round_robin: probability of forking at each agent, in acting order; "
        "independent forks at each of these len(fork_probs) agents",
    )

    @model_validator(mode="after")
    def check(self) -> "SamplerConfig":
        if any(p < 0 for p in self.fork_probs) or sum(self.fork_probs) <= 0:
            raise ValueError(f"sampler.fork_probs must be >= 0 and not all 0, got {self.fork_probs}")
        return self


class RolloutConfig(Section):
    max_new_tokens: int = Field(64, gt=0, description="longest reply of one call during training")
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature during training")
    top_p: float = Field(
        1.0, gt=0.0, le=1.0, description="nucleus sampling during training: draw from the smallest set of tokens "
        "whose probabilities sum to top_p; 1 draws from all"
    )
    max_batch: int = Field(64, gt=0, description="largest generate() batch")
    order: Literal["arrival", "place"] = Field(
        "arrival", description="arrival: an episode lists its calls as they finish and agents draw in the order "
        "they are called; place: a training rollout depends only on each call's place in it (run seed, step, task "
        "slot, call id), not on the order remote agents answer in: calls in tree order, draws keyed by place "
        "(masrl/rollout/tree.py)",
    )  # fmt: skip
    engine: str = Field(
        "auto", description="auto: lean on CPU in float32 and on CUDA (3x HF generate end to end on an H200, "
        "learning alike, docs/gpu.md), hf under trainer.precision bf16 on CPU, in the trainer's process or on "
        "each of rollout.workers' Ray actors; hf: HF "
        "generate, the reference; lean: merged "
        "adapter weights re-merged after every update, one prefill per distinct prompt, finished rows leave "
        "the batch (on CUDA each call's decoding step is replayed as a CUDA graph and finished rows stay), "
        "Llama-family models through its own decoder over a preallocated KV cache "
        "(masrl/generation/lean.py); openai: the OpenAI-compatible inference servers in rollout.servers "
        "(`masrl serve --inference`, vLLM, SGLang), which load the trained LoRA adapters at runtime "
        "(docs/scale.md)"
    )
    precision: str = Field(
        "float32", description="the lean engine's matmuls in training rollouts: bf16 rounds weights and "
        "activations to bfloat16 and accumulates in float32 (oneDNN's AVX-512 BF16 kernels; a CPU without them "
        "is refused), 3.9-4.0x HF generate's tokens/s against 2.6-3.05x in float32 (bench/generate_vs_hf.py); the "
        "trainer stays float32, so the update weighs each token by pi_trainer / pi_bf16 truncated at "
        "algo.behavior_cap (required). Greedy calls (evaluation, serving) stay float32 (docs/scale.md)"
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
        0, ge=0, description="asynchronous rollouts: generate up to k steps ahead of the trainer, each step with "
        "the adapters exactly k updates behind (fewer in the first k steps), correcting stale samples with the "
        "decoupled PPO objective (algo.behavior_cap); 0 is the synchronous loop"
    )
    timeout_s: float = Field(600.0, gt=0, description="workers/servers: longest one generate batch may take")
    retries: int = Field(1, ge=0, description="workers/servers: how often a failed batch is sent to another one")
    max_batch_tokens: int | None = Field(
        32768, gt=0, description="also cut a generate() batch before rows x (longest prompt + max_new_tokens) exceeds "
        "this: bounds its KV cache and prefill activations when prompts are long; null: only max_batch counts"
    )
    on_system_error: Literal["stop", "drop"] = Field(
        "stop", description="when the system's own code raises (start, next_step, advance, expand): stop: the run "
        "stops with one line naming the system, the hook, the file and line and the exception (exit code 4); drop: "
        "the episode it raised in is dropped and counted failed (metrics: failed, dropped), as an episode whose "
        "agent call failed is; either way the traceback goes to <run.dir>/errors.log"
    )
    max_dropped: float = Field(
        0.5, ge=0.0, le=1.0, description="on_system_error=drop: a rollout (a training step, an evaluation) that drops "
        "more than this share of its episodes stops the run as on_system_error=stop does"
    )
    hook_timeout_s: float | None = Field(
        300.0, gt=0.0, description="the longest one call of the system's own code (start, next_step, advance, "
        "observe, eval_metrics) may run: one still running then is stopped where it is and handled as one that "
        "raised (on_system_error; the line names the file and line it hung at). Enforced on the main thread "
        "(SIGALRM), so not for rollout.env_threads > 0 or rollout.max_staleness > 0; null: no limit"
    )


class RewardConfig(Section):
    weights: dict[str, float] = Field(
        default_factory=lambda: {"correct": 1.0, "format": 0.1},
        description="the reward of system.kind single (single-arithmetic, router-solver) and chain (correct "
        "weighs the chain's final answer, format each call's own reply): the sum of weight x "
        "component over the task's two components, correct (1 when the task scores the extracted answer right, "
        "else 0) and format (1 for one non-empty <answer>...</answer> with nothing after it, 0.5 for a pair that "
        "breaks one of these, 0 for none; masrl/tasks/rewards.py); a component left out weighs 0. Every other "
        "system (router, budget, search, turns, puppeteer, program, a plugin) gives each call its own scalar "
        "reward (Transition.reward), used as it is: these weights do not touch it. The components a system "
        "reports are logged as reward/<name> either way",
    )

    @model_validator(mode="after")
    def check(self) -> "RewardConfig":
        unknown = set(self.weights) - {"correct", "format"}
        if unknown:
            raise ValueError(f"reward.weights has unknown components {sorted(unknown)}; known: correct, format")
        return self


class AlgoConfig(Section):
    advantage: str = Field(
        "grpo",
        description="group-normalised returns (masrl/algos/advantages.py), or gae: "
        "per-token GAE from a learned value model (PPO; the critic section)",
    )
    credit: str = Field(
        "tree_q", description="descendant_mean: MHGPO's backward propagation of the final reward; "
        "immediate: each call's own reward (AT-GRPO)"
    )
    grouping: str = Field(
        "task", description="independent, round_robin: the search system's IS and RR groups; agent_turn: "
        "AT-GRPO's (environment, agent, turn) groups; run: all calls of a task's runs (one advantage per run) "
        "(masrl/algos/credit.py)"
    )
    aggregation: str = Field(
        "token_mean", description="token_mean: the loss averaged over all tokens of the batch; seq_mean: each "
        "sequence over its tokens, then over sequences (masrl/algos/losses.py)"
    )
    clip_low: float = Field(
        0.2, ge=0.0, lt=1.0, description="PPO ratio clipping below 1: the ratio is clipped at 1 - clip_low"
    )
    clip_high: float = Field(0.2, ge=0.0, description="PPO ratio clipping above 1: the ratio is clipped at 1 + clip_high")
    kl_coef: float = Field(0.0, ge=0.0, description="k3 KL to the reference; 0 skips the reference pass")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount: per turn in tree_q credit, per token in gae")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="gae: GAE lambda (1 = Monte-Carlo return minus V)")
    epochs: int = Field(1, ge=1, description="update epochs over each batch (1 = on-policy)")
    skip_zero_advantage: bool = Field(True, description="leave samples with advantage 0 out of the update")
    mean_over: Literal["trained", "batch"] = Field(
        "trained", description="what the loss's mean (aggregation) runs over. trained: the samples the update "
        "trains on, so with skip_zero_advantage each weighs more as fewer groups disagree (the update's size "
        "grows as the policy's entropy collapses); batch: every trainable call of the step, those "
        "skip_zero_advantage leaves out counted with loss 0: the gradient of skip_zero_advantage=false "
        "(with kl_coef 0: their KL terms stay out), without its passes over them (docs/scale.md, learning curves). "
        "Set batch with rollout.max_staleness > 0: the default team at k=1 ended 0.150 below synchronous with "
        "trained and level with batch (docs/scale.md)"
    )
    behavior_cap: float | None = Field(
        None, gt=0.0, description="rollout.max_staleness > 0 or rollout.precision bf16: truncate the decoupled "
        "objective's pi_prox/pi_behav weight at this value (truncated importance sampling); None: the untruncated "
        "weight (AReaL eq. 5). Set it "
        "with max_staleness >= 2: k=2 on single-arithmetic fell 0.082 below synchronous at 24 steps without it, and "
        "with 2.0 was level at 24 and 30 steps and 0.027 below at 36 (docs/scale.md)"
    )
    sample_weight: str = Field(
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
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay of the value adapter and head")
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
    steps: int = Field(40, ge=1, description="training steps")
    batch_size: int = Field(8, ge=1, description="tasks per step")
    lr: float = Field(
        2e-4, gt=0.0, description="AdamW learning rate of each policy's adapter (or of all weights with "
        "model.lora_rank 0)"
    )
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    micro_batch: int = Field(8, ge=1, description="sequences per forward/backward")
    max_grad_norm: float = Field(1.0, gt=0.0, description="gradient clipping: the global norm of each policy's gradient")
    nonfinite: Literal["skip", "stop"] = Field(
        "skip", description="an update whose gradient is not finite (a NaN or inf in a loss or a gradient): skip: "
        "that optimiser step is not taken and is counted (metrics: <policy>/skipped_updates, present when not 0); "
        "stop: the run stops with one line (exit code 1). Weights that an update leaves non-finite stop the run "
        "either way, so no checkpoint holds a NaN"
    )
    checkpoint_every: int = Field(10, ge=1, description="write a checkpoint every N steps (and at the end)")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept, the newest")
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
    max_sampled_tokens: int | None = Field(
        None,
        ge=1,
        description="stop before a step that would end past this many sampled tokens: the tokens generated by "
        "every call of the training rollouts, summed over steps (per process, as max_minutes); `masrl baseline` "
        "sets it for an equal-token single agent; null = no limit",
    )
    processes: int = Field(
        1, ge=1, description="data-parallel trainer processes started on this machine (gloo on CPU, nccl on CUDA; "
        "masrl/distributed.py); under torchrun leave it 1: torchrun starts the processes"
    )
    timeout_minutes: float = Field(
        30.0, gt=0.0, description="how long a process waits for the others at a collective (rank 0's evaluation "
        "included) before the run stops"
    )
    device: str = Field("auto", description="auto: cuda when torch sees a GPU, else cpu")
    precision: str = Field(
        "auto", description="auto: bf16 on cuda (bf16 base weights, float32 adapters, bf16 autocast), float32 on cpu"
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
    max_new_tokens: int = Field(64, gt=0, description="longest reply of one call during evaluation")


class SandboxConfig(Section):
    """Where agent code runs (masrl.sandbox). Without root, isolation comes from unprivileged user
    namespaces; a machine without them refuses to run agent code unless `limits_only` is true,
    which runs it under rlimits and the audit hook only and warns on every call."""

    limits_only: bool = Field(
        False, description="true: run agent code under rlimits and the audit hook only, warning on every call "
        "(machines without user namespaces)"
    )


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


@functools.cache
def config_model(section: type[SystemSection]) -> type[Config]:
    """`Config` with its `system` section typed as `section` (one class per system, made once)."""
    return create_model(f"Config[{section.__name__}]", __base__=Config, system=(section, ...))


PACKAGED = Path(__file__).parent / "configs"
DEFAULT_CONFIG = PACKAGED / "default.yaml"
