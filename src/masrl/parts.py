"""Build the parts a config names: model, policies, generation service, task, system, sampler.

`build_parts(config)` is the only place that makes config strings into
objects; the training loop and evaluation receive the assembled `Parts`.
The system's builder (its `SystemSpec`, found by `masrl.registry.resolve_system`) says which agents are
trainable and which policy each samples from; every policy becomes a LoRA
adapter on a base model and a `PolicyLearner`; a policy that is not a
language model (a scoring head, `Built.heads`) brings its own agents and learner. With `algo.advantage:
gae` one more adapter, `critic`, carries the `ValueLearner`'s value head.

Base models: every policy sits on `model.name` unless `model.bases` maps it
to another model name (issue 4, "policies per role": shared, per-role
adapters, or separate base models). Policies on one name share one
`PolicyModel` (one copy of the weights, one adapter each); each distinct
name is loaded once more, with its own tokenizer and `GenerationService`.
A policy's KL reference is its own base with the adapters disabled.

`trainer.device` and `trainer.precision` place every base (masrl.device):
bf16 weights and autocast on CUDA by default, float32 on CPU.

The parts keep the built system's spec (`parts.spec`) and the optional methods the system
has (`parts.hooks`, checked once here against masrl.rollout.hooks's Protocols). A system is a
user's code: before any model loads, the built system is checked (its methods, and that its first
step on a training item names an agent the builder serves, `check_system`), and `parts.errors`
says what a rollout does when its code raises (`rollout.on_system_error`; tracebacks go to
RUN_DIR/errors.log). A config's
`sandbox.limits_only` holds while its parts live (until `Parts.close`), not for the process.

"Engine" names only what generates tokens (`rollout.engine`: masrl.generation); a `Parts` holds
one generation service per base, each over such an engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from masrl import distributed
from masrl.agents.base import Agent
from masrl.agents.policy import LoraSpec, PolicyAgent, PolicyModel
from masrl.config import Config, ConfigError, SamplerConfig, TrainerConfig
from masrl.device import Placement, placement
from masrl.generation.engine import resolve_engine, sampler
from masrl.generation.ray import RayWorkers, WorkerSpec
from masrl.generation.remote import InferenceServers
from masrl.generation.sampling import SamplingParams
from masrl.generation.service import BusyClock, GenerationService
from masrl.learners import CRITIC, Learner, PolicyLearner, ValueLearner
from masrl.memory import keep_heap_small
from masrl.models import load_model
from masrl.registry import build_task, resolve_system
from masrl.rollout.hooks import SystemHooks, check_system
from masrl.rollout.rules import BRANCH_RULES
from masrl.rollout.system_errors import SystemErrors
from masrl.rollout.tree import BranchRule, EnvSteps, Planner, System
from masrl.run.files import RunDir
from masrl.sandbox import limits_only_chosen
from masrl.systems.api import Built, SystemSpec
from masrl.tasks.base import Task
from masrl.update import UpdateSettings


@dataclass
class Parts:
    """A config turned into objects: the models, task, system, sampler, agents, learners and generation."""

    config: Config
    models: Mapping[str, PolicyModel]  # policy (and CRITIC) -> the base carrying its adapter; one object per base
    task: Task
    system: System
    rule: BranchRule | Planner  # the sampler
    agents: Mapping[str, Agent]  # sampling agents (training)
    eval_agents: Mapping[str, Agent]  # greedy agents (evaluation)
    learners: dict[str, Learner]  # policy name -> what updates it
    frozen: Mapping[str, Agent]  # agents that are not trained (a pool, weak to strong; experts; tools)
    spec: SystemSpec  # the system's spec, as `system.kind` resolved when the parts were built
    hooks: SystemHooks  # the optional methods `system` has, found when it was built
    critic: ValueLearner | None = None  # the value model of algo.advantage=gae (also in learners)
    # Remote generation (rollout.workers Ray actors or rollout.engine openai servers): each engine
    # with the base whose adapters it must receive after every update (`publish`).
    remotes: list[tuple[Any, PolicyModel]] = field(default_factory=list)
    env: EnvSteps | None = None  # environment steps on threads (rollout.env_threads), None: on the event loop
    scope: ExitStack = field(default_factory=ExitStack)  # what holds while the parts live (sandbox.limits_only)
    errors: SystemErrors = SystemErrors()  # what a rollout does when the system's code raises (rollout.on_system_error)
    generation: BusyClock = field(default_factory=BusyClock)  # seconds inside generation calls, all services'

    def publish(self, version: int) -> None:
        """Send the current adapters, as `version`, to every remote engine (before it generates again)."""
        for remote, base in self.remotes:
            remote.publish(version, {p: base.state_dict(p) for p in base.policies})

    def remote_failures(self) -> int:
        """Generation requests the remote engines have failed so far (each retried or failed)."""
        return sum(remote.failures for remote, _ in self.remotes)

    def remote_rng_states(self) -> list | None:
        """The rollout workers' sampling generators (one list per remote engine), None without workers."""
        states = [remote.rng_states() for remote, _ in self.remotes if hasattr(remote, "rng_states")]
        return states or None

    def load_remote_rng_states(self, states: list) -> None:
        remotes = [remote for remote, _ in self.remotes if hasattr(remote, "load_rng_states")]
        for remote, state in zip(remotes, states):
            remote.load_rng_states(state)

    def close(self) -> None:
        for remote, _ in self.remotes:
            remote.close()
        if self.env is not None:
            self.env.close()
        self.scope.close()

    @property
    def bases(self) -> list[PolicyModel]:
        """The distinct base models, in the order of their first policy."""
        return list({id(m): m for m in self.models.values()}.values())

    @property
    def model(self) -> PolicyModel | None:
        """The one base model; None when every trainable policy is a head (Built.heads)."""
        bases = self.bases
        if len(bases) > 1:
            raise RuntimeError(f"these parts have {len(bases)} base models (model.bases): use parts.models[policy]")
        return bases[0] if bases else None


def base_plan(
    policies: Sequence[str], bases: Mapping[str, str], default: str, extra: Sequence[str] = ()
) -> dict[str, list[str]]:
    """Base model name -> the adapters it carries, bases and adapters in first-mention order.

    A policy goes on `bases[policy]`, else on `default` (model.name); the `extra`
    adapters (the gae value model) always go on `default`.
    """
    unknown = sorted(set(bases) - set(policies))
    if unknown:
        raise ConfigError(f"model.bases names {unknown}, which are not policies of this system; its policies are "
                          f"{list(policies)}" + (f" ({CRITIC!r}, the value model, stays on model.name)"
                                                 if CRITIC in unknown else ""))  # fmt: skip
    plan: dict[str, list[str]] = {}
    for adapter in [*policies, *extra]:
        name = bases.get(adapter, default) if adapter in policies else default
        plan.setdefault(name, []).append(adapter)
    return plan


def check_one_tokenizer(models: Mapping[str, PolicyModel], reader: str) -> None:
    """The value model (`reader`) scores every policy's token ids, so their bases must share its vocabulary."""
    vocab = models[reader].tokenizer.get_vocab()
    other = [p for p, base in models.items() if base is not models[reader] and base.tokenizer.get_vocab() != vocab]
    if other:
        raise ConfigError(f"algo.advantage 'gae' scores every policy's tokens with model.name's tokenizer; "
                          f"the bases of {other} (model.bases) have another vocabulary")  # fmt: skip


def update_settings(config: Config) -> UpdateSettings:
    a, t = config.algo, config.trainer
    return UpdateSettings(
        micro_batch=t.micro_batch,
        epochs=a.epochs,
        kl_coef=a.kl_coef,
        aggregation=a.aggregation,
        clip_low=a.clip_low,
        clip_high=a.clip_high,
        max_grad_norm=t.max_grad_norm,
        temperature=config.rollout.temperature,
        decoupled=config.rollout.max_staleness > 0 or config.rollout.precision != "float32",
        behavior_cap=a.behavior_cap,
        share_prompts=t.share_prompts,
        micro_batch_tokens=t.micro_batch_tokens,
        nonfinite=t.nonfinite,
    )


def config_placement(trainer: TrainerConfig) -> Placement:
    """Where this process's models go: `trainer.device`/`precision`, the GPU of $LOCAL_RANK on CUDA."""
    try:
        return placement(trainer.device, trainer.precision)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def build_parts(config: Config, model: Any = None) -> Parts:
    """The parts `config` names; `model`, a loaded model object, stands in for `model.name`'s."""
    if config.trainer.threads:
        torch.set_num_threads(config.trainer.threads)
    if config.trainer.low_memory:
        keep_heap_small()
    torch.manual_seed(config.run.seed)
    scope = ExitStack()  # what holds while the parts live (until Parts.close)
    # sandbox.limits_only, chosen by the user for this run: masrl.sandbox warns on every call
    scope.enter_context(limits_only_chosen(config.sandbox.limits_only))
    try:
        return _assemble(config, model, scope)
    except BaseException:
        scope.close()
        raise


def system_errors(config: Config) -> SystemErrors:
    """What a rollout does when the system's own code raises, and where its tracebacks go."""
    r = config.rollout
    return SystemErrors(config.system.kind, r.on_system_error, r.max_dropped, RunDir(config.run.dir).errors,
                        r.hook_timeout_s)  # fmt: skip


def _assemble(config: Config, model: Any, scope: ExitStack) -> Parts:
    task = build_task(config.task)
    spec = resolve_system(config.system.kind)
    built = spec.build(config, task)
    if callable(getattr(built.system, "close", None)):  # what it holds (the program system's zygote) ends with us
        scope.callback(built.system.close)
    errors = system_errors(config)
    served = [*built.policies, *built.frozen, *built.heads]
    check_system(built.system, next(iter(task.items("train", 0, 1)), None), served, errors)  # before any model loads
    gae = config.algo.advantage == "gae"
    if gae and CRITIC in built.policies.values():
        raise ConfigError(f"policy name {CRITIC!r} is taken by the value model of algo.advantage=gae")
    models, names = load_bases(config, built.policy_names, model)
    if gae:
        check_one_tokenizer(models, CRITIC)
    learners, critic = build_learners(config, models, built)
    rule = build_rule(config.sampler, config.run.seed)
    # Generation services last: remote workers start from the trainer's sampling generator as it is
    # now, after every initialisation above has drawn from it (masrl.generation.ray).
    env = EnvSteps(config.rollout.env_threads) if config.rollout.env_threads else None
    clock = BusyClock()  # one for every service: a step's generation seconds (masrl.step_metrics)
    services, remotes = build_services(config, models, names, model is not None, env, clock)
    r = config.rollout
    train_params = SamplingParams(r.max_new_tokens, r.temperature, r.top_p, built.stop)
    eval_params = SamplingParams(config.eval.max_new_tokens, 0.0, 1.0, built.stop)

    def trainable(params: SamplingParams) -> dict[str, Agent]:
        return {name: PolicyAgent(name, p, services[p], models[p], params) for name, p in built.policies.items()}

    return Parts(
        config, models, task, built.system, rule,
        agents={**built.frozen, **trainable(train_params), **{n: h.agent for n, h in built.heads.items()}},
        eval_agents={**built.frozen, **trainable(eval_params), **{n: h.eval_agent for n, h in built.heads.items()}},
        learners=learners,
        frozen=built.frozen,
        spec=spec,
        hooks=SystemHooks.of(built.system, errors),
        critic=critic,
        remotes=remotes,
        env=env,
        scope=scope,
        errors=errors,
        generation=clock,
    )  # fmt: skip


def load_bases(
    config: Config, policies: Sequence[str], model: Any = None
) -> tuple[dict[str, PolicyModel], dict[str, str]]:
    """Each adapter's base model (loaded once per name, `model` for model.name when given) and that base's name."""
    m = config.model
    lora = LoraSpec(rank=m.lora_rank, alpha=m.lora_alpha, dropout=m.lora_dropout) if m.lora_rank > 0 else None
    plan = base_plan(policies, m.bases, m.name, extra=[CRITIC] if config.algo.advantage == "gae" else [])
    models: dict[str, PolicyModel] = {}  # adapter -> its base
    names: dict[str, str] = {}  # adapter -> its base's model name
    place = config_placement(config.trainer)
    for name, adapters in plan.items():  # a system trained only through heads (built.heads) loads no base
        loaded = (
            model if model is not None and name == m.name else load_model(name, seed=config.run.seed, dtype=place.weights)
        )
        base = PolicyModel(loaded, adapters, lora, keep_reference=config.algo.kl_coef > 0, placement=place,
                           gradient_checkpointing=config.trainer.gradient_checkpointing)  # fmt: skip
        models.update(dict.fromkeys(adapters, base))
        names.update(dict.fromkeys(adapters, name))
    return models, names


def build_learners(
    config: Config, models: Mapping[str, PolicyModel], built: Built
) -> tuple[dict[str, Learner], ValueLearner | None]:
    """A `PolicyLearner` per LoRA policy, each head's own learner, and with gae the value model's."""
    settings = update_settings(config)
    t = config.trainer
    learners: dict[str, Learner] = {
        p: PolicyLearner(models[p], p, settings, lr=t.lr, weight_decay=t.weight_decay) for p in built.policy_names
    }
    learners.update({name: head.learner for name, head in built.heads.items()})
    if config.algo.advantage != "gae":
        return learners, None
    c = config.critic
    critic = ValueLearner(
        models[CRITIC], CRITIC, lr=c.lr, clip=c.value_clip, micro_batch=c.micro_batch, epochs=c.epochs,
        max_grad_norm=t.max_grad_norm, weight_decay=c.weight_decay, nonfinite=t.nonfinite,
    )  # fmt: skip
    learners[CRITIC] = critic
    return learners, critic


def build_rule(sampler: SamplerConfig, seed: int) -> BranchRule | Planner:
    """The sampler (`sampler.rule`) with its options; `seed` is run.seed."""
    options = {
        "round_robin": {"probs": tuple(sampler.fork_probs), "seed": seed},
        "independent": {"agents": len(sampler.fork_probs)},
    }
    return BRANCH_RULES[sampler.rule](sampler.group_size, **options.get(sampler.rule, {}))


def build_services(
    config: Config, models: Mapping[str, PolicyModel], names: Mapping[str, str], given_model: bool,
    env: EnvSteps | None = None, clock: BusyClock | None = None,
) -> tuple[dict[str, GenerationService], list[tuple[Any, PolicyModel]]]:
    """One generation service per base: in process (`rollout.workers: 0`), Ray workers, or inference servers."""
    r = config.rollout
    services: dict[str, GenerationService] = {}
    remotes: list[tuple[Any, PolicyModel]] = []
    # Only rank 0 samples (masrl.distributed): the other ranks of a data-parallel run start no workers.
    for base in {id(m): m for m in models.values()}.values():
        adapters = [p for p, m in models.items() if m is base]
        remote = start_remote(config, base, names[adapters[0]], given_model) if distributed.is_main() else None
        if remote is None:
            generate = sampler(base, resolve_engine(r.engine, base.placement), r.precision)  # the in-process engines
            local = GenerationService(generate, max_batch=r.max_batch, env=env, max_tokens=r.max_batch_tokens,
                                      clock=clock)  # fmt: skip
            services.update(dict.fromkeys(adapters, local))
            continue
        remote.publish(0, {p: base.state_dict(p) for p in base.policies})  # the initial adapters are version 0
        remotes.append((remote, base))
        service = GenerationService(remote.generate, max_batch=r.max_batch, slots=remote.slots, env=env,
                                    max_tokens=r.max_batch_tokens, clock=clock)  # fmt: skip
        services.update(dict.fromkeys(adapters, service))
    return services, remotes


def start_remote(config: Config, base: PolicyModel, model_name: str, given_model: bool) -> Any:
    """The remote engine that generates for `base`'s adapters: inference servers, Ray workers, or None (in process)."""
    r = config.rollout
    if r.engine == "openai":
        return InferenceServers(r, config.run.dir, model_name, base)
    if not r.workers:
        return None
    if given_model:
        raise ConfigError("rollout.workers load the model themselves: name it in model.name "
                          "(a model object cannot be sent to them)")  # fmt: skip
    spec = WorkerSpec(model_name, base.policies, base.lora, config.run.seed,
                      str(base.placement.weights).removeprefix("torch."), r.worker_threads,
                      logprobs=r.max_staleness > 0, engine=resolve_engine(r.engine, base.placement),
                      precision=r.precision)  # fmt: skip
    return RayWorkers(spec, r.workers, address=config.ray.address, cpus=config.ray.worker_cpus,
                      timeout_s=r.timeout_s, retries=r.retries, rng_state=torch.get_rng_state())  # fmt: skip
