"""How a run stops: on a signal, at its time allowance, or when one of its processes fails.

A first SIGINT or SIGTERM (`Signals`) asks the loop to stop after the step in
progress, which is then checkpointed; a second stops at once. `out_of_time`
stops before a step that would overrun `trainer.max_minutes`. With
`trainer.processes=N` (`launch_ranks`) this process starts N ranks, waits for
them and stops them all when one fails (masrl.distributed.launch); a signal
reaches the ranks too, and the launcher says what they kept. A run a signal
stopped raises `Interrupted` (exit code 130), whose message says what was kept
and the command that goes on (`interrupted_message`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping

import torch

from masrl import distributed
from masrl.config import ConfigError, TrainerConfig
from masrl.parts import config_placement
from masrl.run.files import RunDir
from masrl.run.lock import hold
from masrl.run.prepare import next_command, prepare_run_dir
from masrl.types import TrainingError


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run (exit code 130); the message says what was kept and what to run next."""


class Signals:
    """SIGINT (Ctrl-C) and SIGTERM (a cluster's preemption) while `train` runs, in the main thread.

    While the engine loads a signal stops at once (KeyboardInterrupt naming it: nothing is trained yet).
    Once the loop runs (`graceful`), the first one only asks it to stop: the step in progress finishes
    and is checkpointed, so no finished step is lost and `--resume` continues exactly; a second signal
    stops at once, keeping what the last checkpoint holds. Writes that belong together (a checkpoint, a
    step's or an evaluation's log lines) run `held`: a signal that would stop at once waits until they
    are done, so that no file is left half written. Once stopping at once, a further signal is ignored
    while the process unwinds to its one line. With `trainer.processes=N` every rank and the launcher
    hold one; rank 0's signal decides for every rank (the loop broadcasts it)."""

    def __init__(self, note: bool = True) -> None:
        self.received: str | None = None  # the first signal's name, once one came while graceful
        self.graceful = False
        self.stopping = False  # a signal stopped the run at once: the process unwinds
        self._holding = False
        self._held: str | None = None  # a signal that came while holding and stops at once after it
        # one note per run: from this process, unless it is a rank > 0 or a launcher that leaves it to rank 0
        self.note = note and os.environ.get("RANK", "0") == "0"
        self._before: dict[int, object] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._before[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        unwinding = exc_type is not None and (self.stopping or self.received is not None)
        for sig, handler in self._before.items():
            # a run a signal stopped ends in its one line: another signal meanwhile changes nothing
            signal.signal(sig, _ignore if unwinding else handler)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Within: a signal that would stop at once stops when the block is done (its writes are whole)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self._held is not None:
            self.stopping = True
            raise KeyboardInterrupt(self._held)

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.stopping:
            return
        if not self.graceful or self.received is not None:
            if self._holding:
                self._held = self._held or name
                return
            self.stopping = True
            raise KeyboardInterrupt(name)
        self.received = name
        if not self.note:
            return
        # os.write, not print: a handler may run inside a write to stderr, which print would re-enter.
        # The newline first puts the note on a line of its own, below the progress bar.
        os.write(2, f"\nmasrl: {name}: stopping after the step in progress, which is then checkpointed; "
                    f"{name} again stops at once\n".encode())  # fmt: skip


def _ignore(signum: int, frame) -> None:
    """A signal while a stopped run unwinds: it stops anyway."""


def signal_name(exc: KeyboardInterrupt) -> str:
    """The signal a KeyboardInterrupt stands for (`Signals` and the command line's handler name it)."""
    return exc.args[0] if exc.args else "SIGINT"


def interrupted_message(name: str, saved: int, steps: int, start: int, run: RunDir) -> str:
    """What a graceful stop kept (`saved`: the step last checkpointed) and the command that goes on."""
    if saved == 0:
        return f"interrupted ({name}) before step 1 finished; no step to keep; {next_command(run, steps)}"
    kept = "checkpoint written" if saved > start else f"step {saved}'s checkpoint kept"
    return f"interrupted ({name}) after step {saved} of {steps}; {kept}; {next_command(run, steps)}"


def out_of_time(trained_seconds: float, step_seconds: float, max_minutes: float | None) -> bool:
    """Whether another step, as long as the last one, would end past the time allowance.

    Stopping *before* the step that would overrun keeps a run's training time at
    most `max_minutes` (up to one step's variation), the "at most 45 minutes" of
    the issues' measured runs.
    """
    if max_minutes is None:
        return False
    return trained_seconds + step_seconds > max_minutes * 60.0


def out_of_tokens(sampled_tokens: float, step_tokens: float, max_sampled_tokens: int | None) -> bool:
    """Whether another step that samples as many tokens as the last would end past `max_sampled_tokens`
    (the equal-token budget of a baseline: it stops before the step that would overrun, as `out_of_time`)."""
    if max_sampled_tokens is None:
        return False
    return sampled_tokens + step_tokens > max_sampled_tokens


def budget_note(max_minutes: float | None, max_sampled_tokens: int | None, step: int, seconds: float,
                tokens: float) -> str:  # fmt: skip
    """The line a run prints when its time or token allowance stopped it after `step`."""
    limit = f"trainer.max_minutes={max_minutes}"
    if max_sampled_tokens is not None:
        limit += f", max_sampled_tokens={max_sampled_tokens}"
    return f"{limit}: stopping after step {step} ({seconds / 60:.1f} min, {tokens:.0f} sampled tokens)"


# ---------------------------------------------------------------- several processes
def launch_ranks(rank_train: Callable[[str], None], config_data: Mapping, trainer: TrainerConfig, run: RunDir,
                 resuming: bool, model=None) -> None:  # fmt: skip
    """Prepare the run directory (a new run writes `config_data`, the resolved config, as config.yaml) and start
    `trainer.processes` ranks, each `rank_train(run_dir)`, under its lock; wait for them and stop them all when
    one fails (masrl.distributed.launch); TrainingError or Interrupted says how the run goes on."""
    processes = trainer.processes
    if model is not None:
        raise TrainingError("a model object cannot be handed to trainer.processes=N processes; name it in model.name")
    place = config_placement(trainer)  # a bad device or run directory fails here, before any spawn
    if place.device.type == "cuda" and processes > torch.cuda.device_count():
        raise ConfigError(f"trainer.processes={processes} needs one GPU each; torch sees {torch.cuda.device_count()}")
    with hold(run, "masrl train"):  # the ranks write under the launcher's lock (masrl.run.lock)
        _launch(rank_train, trainer, run, prepare_run_dir(run, config_data, trainer.steps, resuming).step, processes)


def _launch(rank_train: Callable[[str], None], trainer: TrainerConfig, run: RunDir, start: int,
            processes: int) -> None:  # fmt: skip
    # A signal reaches the ranks too (one process group): the launcher waits while they checkpoint and
    # stop, then says what was kept. A second one stops it at once (the ranks get theirs as well).
    with Signals(note=False) as signals:
        signals.graceful = True
        args = (str(run),)  # the ranks continue the run prepared here, from its config.yaml
        try:
            distributed.launch(rank_train, processes, args)
        except distributed.RankFailed as exc:
            if signals.received is None:
                raise TrainingError(f"{exc}. Continue from the last checkpoint with: "
                                    f"masrl train --resume {run}") from None  # fmt: skip
            raise Interrupted(interrupted_message(signals.received, run.saved_step(), trainer.steps,
                                                  start, run)) from None  # fmt: skip
