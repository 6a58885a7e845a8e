"""What a rollout does when a system's own code raises: one line, the traceback in a log, stop or drop.

A system is untrusted code (a user's plugin). `call_hook` runs one of its hooks and turns what it
raises into `HookFailed` (the hook's name and the exception); masrl's own errors that pass through
the system's code (`NOT_THE_SYSTEMS`: a config the system refuses, a sandbox without isolation, a
machine problem, a full disk) go on as they are, with their own line and exit code. `SystemErrors`
(`rollout.on_system_error`, `rollout.max_dropped`) makes a HookFailed one line, `SystemCodeError`,
naming the system, the hook, the file and line and the exception:

    system 'mysys:SYSTEM' raised in next_step (mysys.py:42): KeyError: 'x' (traceback in RUN/errors.log)

The file and line are the deepest frame of the traceback in the system's own code (its top-level
package, or its module's file: `system_source`), so an error a library raises on the system's behalf
points at the system's call, not into the library. With on_error 'stop' the run stops there; with
'drop' the episode it raised in is dropped (`SystemErrors.drop`: its calls kept, each marked failed,
so it counts as failed as an episode whose agent call failed does) and a rollout stops only when it
drops more than `max_dropped` of its episodes (`check_share`). Either way the traceback is appended
to the log. masrl.rollout.tree calls these around `start`, `next_step`, `advance` and `expand`;
`Guarded` wraps the optional hooks (observe, eval_metrics, eval_item_metrics), which always stop:
they have no episode to drop.

Two more mistakes of the system's are handled as a raise is. A reward that is not a finite number
(`finite_reward`: NaN, inf, a string) would train on silently and make every adapter weight NaN, so
it fails the hook that returned it ("returned a bad value from advance"). A hook that runs longer
than `rollout.hook_timeout_s` on the main thread is stopped by SIGALRM where it is ("hung in
advance", the file and line it was at; `call_hook`).
"""

from __future__ import annotations

import errno
import inspect
import math
import numbers
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from masrl.config import ConfigError
from masrl.sandbox import SandboxError
from masrl.types import Call, Episode, EnvironmentProblem, SystemCodeError, TaskItem, TrainingError

# masrl's own errors, which a hook may pass on (agent code without isolation, a full disk, a config
# the system refuses): they keep their own line and exit code, for they are not the system's bug.
NOT_THE_SYSTEMS: tuple[type[Exception], ...] = (ConfigError, SandboxError, EnvironmentProblem, TrainingError)
_DISK_FULL = frozenset((errno.ENOSPC, errno.EDQUOT))
THE_SYSTEM = "the system "  # how a dropped episode's reason (and its calls' error) begins
RAISED, HUNG, RETURNED = "raised in", "hung in", "returned a bad value from"  # what the hook did (HookFailed.verb)


class HookFailed(Exception):
    """The system's hook `hook` raised `error` (inside a rollout; `SystemErrors` makes it one line). `verb`
    says what it did: raised (RAISED), ran past its time limit (HUNG) or returned a value the engine
    cannot use (RETURNED: `error` is a BadValue)."""

    def __init__(self, hook: str, error: Exception, verb: str = RAISED):
        super().__init__(hook, error)
        self.hook, self.error, self.verb = hook, error, verb


class BadValue(ValueError):
    """What a hook returned and the engine refuses (a reward that is not a finite number)."""


class _TimedOut(BaseException):
    """Raised by SIGALRM's handler inside a hook past its limit. A BaseException, so that the hook's own
    `except Exception` cannot swallow it."""


def call_hook(hook: str, fn: Callable[..., Any], *args: Any, seconds: float | None = None) -> Any:
    """`fn(*args)`, the system's hook `hook`: what it raises comes back as HookFailed, masrl's own errors as they are.

    With `seconds`, a call still running then is stopped where it is and fails as HUNG. Python cannot
    stop a thread, so a hook on a worker thread (a thread with a join timeout) would run on, holding
    the system's state and a CPU, while the run went on or tried to exit past it; the one honest way
    to stop Python code where it is is a signal in the main thread, so this arms SIGALRM (POSIX) on the
    main thread alone. It stops Python code and the sleeps and reads Python retries (PEP 475), not a
    single C call that never returns to the interpreter. A hook on another thread (`rollout.env_threads`,
    rollouts sampled ahead) and a call inside another timer of the process (SIGALRM already armed) run
    without the limit. Ctrl-C still reaches the hook: the loop's handler (masrl.run.stop.Signals) raises
    KeyboardInterrupt into it on the second signal, which is no Exception and passes through."""
    try:
        return _limited(seconds, fn, *args)
    except _TimedOut as exc:
        late = TimeoutError(f"it did not return within {seconds:g} s (rollout.hook_timeout_s)")
        raise HookFailed(hook, late.with_traceback(exc.__traceback__), HUNG) from None
    except Exception as exc:
        failure = as_failure(hook, exc)
        if failure is None:
            raise
        raise failure from exc


def _limited(seconds: float | None, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, interrupted by _TimedOut after `seconds` when that can be done here (see call_hook)."""
    main = threading.current_thread() is threading.main_thread()
    if seconds is None or not main or not hasattr(signal, "setitimer") or signal.getitimer(signal.ITIMER_REAL)[0]:
        return fn(*args)

    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut

    before = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)  # one shot: it cannot fire again once it has
        try:
            return fn(*args)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:  # the handler goes back even when the alarm fired just as fn returned
        signal.signal(signal.SIGALRM, before)


def finite_reward(name: str, value: Any) -> float:
    """`value`, a reward the system returned, as a float; a BadValue unless it is a finite real number.

    An int, a float, a numpy scalar and a bool (Python's bool is an int: True is 1.0, as
    `reward=answer == gold` means) are rewards; NaN, inf, a string, None, a tensor are not: NaN and
    inf would train on without a word and make every adapter weight NaN (issue 50)."""
    if isinstance(value, numbers.Real) and _finite(value):
        return float(value)
    kind = "" if isinstance(value, (float, int)) else f" ({type(value).__name__})"
    shown = f"an int of {value.bit_length()} bits" if isinstance(value, int) and value.bit_length() > 1023 else repr(value)
    raise BadValue(f"{name}={shown}{kind} is not a finite number (a reward is an int, float or bool)")


def _finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float's range: it raised out of the engine instead of BadValue
        return False


def as_failure(hook: str, exc: Exception) -> HookFailed | None:
    """HookFailed for what the system's code raised; None for masrl's own errors (they pass on as they are)."""
    if isinstance(exc, NOT_THE_SYSTEMS) or (isinstance(exc, OSError) and exc.errno in _DISK_FULL):
        return None
    return HookFailed(hook, exc)


def system_source(system: object) -> Path | None:
    """The system's own code: the directory of its top-level package, or its module's file (also when the
    top level is a namespace package, a folder without `__init__.py`, which has no file of its own)."""
    name = type(system).__module__
    top, own = sys.modules.get(name.split(".")[0]), sys.modules.get(name)
    file = getattr(top, "__file__", None) or getattr(own, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return path.parent if path.name == "__init__.py" else path


def raised_at(error: BaseException, source: Path | None) -> str:
    """`file:line` of the deepest frame of `error`'s traceback in the system's own code (`source`),
    the path from the folder holding it; without such a frame the deepest frame's file name."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    paths = [Path(f.filename).resolve() for f in frames]
    inside = [i for i, path in enumerate(paths) if source is not None and (path == source or source in path.parents)]
    i = inside[-1] if inside else len(frames) - 1
    shown = paths[i].relative_to(source.parent) if inside else Path(paths[i].name)
    return f"{shown}:{frames[i].lineno}"


def defined_at(fn: Callable[..., Any] | None, source: Path | None) -> str:
    """`file:line` where a hook is defined (a step names an unknown agent: no traceback says where); "?" when
    Python cannot say (a builtin, a function made at run time)."""
    try:
        path, line = Path(inspect.getsourcefile(fn) or "?").resolve(), inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return "?"
    inside = source is not None and (path == source or source in path.parents)
    return f"{path.relative_to(source.parent) if inside else path.name}:{line}"


def exception_line(error: BaseException) -> str:
    """`KeyError: 'x'`: the exception's type and message on one line."""
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


@dataclass(frozen=True)
class SystemErrors:
    """What a rollout does when the system's own code raises (`rollout.on_system_error`, `rollout.max_dropped`).

    `name` is the system as the config names it (`system.kind`; None: its class name); `log` the file
    its tracebacks are appended to (RUN_DIR/errors.log; None, or a folder that does not exist: none)."""

    name: str | None = None
    on_error: Literal["stop", "drop"] = "stop"
    max_dropped: float = 0.5
    log: Path | None = None
    timeout_s: float | None = None  # the longest one call of a hook may run (rollout.hook_timeout_s); None: no limit

    def title(self, system: object) -> str:
        return repr(self.name or type(system).__name__)

    def call(self, hook: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`call_hook` under this rollout's time limit (`timeout_s`)."""
        return call_hook(hook, fn, *args, seconds=self.timeout_s)

    def reason(self, system: object, failure: HookFailed) -> str:
        """`raised in next_step (mysys.py:42): KeyError: 'x'`: what, where and why. A bad value has no
        traceback in the system's code: the line that defines the hook is named."""
        source = system_source(system)
        if isinstance(failure.error, BadValue):
            return f"{failure.verb} {failure.hook} ({defined_at(getattr(system, failure.hook, None), source)}): {failure.error}"
        what = str(failure.error) if failure.verb == HUNG else exception_line(failure.error)
        return f"{failure.verb} {failure.hook} ({raised_at(failure.error, source)}): {what}"

    def stop(self, system: object, failure: HookFailed) -> SystemCodeError:
        """The error that stops the run, its traceback written to the log."""
        return SystemCodeError(f"system {self.title(system)} {self.reason(system, failure)}"
                               + self._written(system, failure))  # fmt: skip

    def drop(self, system: object, task: TaskItem, calls: Sequence[Call], failure: HookFailed) -> Episode:
        """The episode `failure` ended: with on_error 'stop' the run stops; with 'drop' its calls are kept
        (their cost counts), each marked failed, and a raise before any call leaves one failed call."""
        if self.on_error == "stop":
            raise self.stop(system, failure) from None
        self._written(system, failure)
        reason = THE_SYSTEM + self.reason(system, failure)
        marked = tuple(replace(c, error=c.error or reason) for c in calls)
        return Episode(task, marked or (Call("0", None, "", "", 0, (), None, done=True, error=reason),), dropped=reason)

    def check_share(self, system: object, episodes: Sequence[Episode]) -> None:
        """Stop when more than `max_dropped` of a rollout's episodes (a training step's) were dropped."""
        dropped = [ep for ep in episodes if ep.dropped is not None]
        if len(dropped) > self.max_dropped * len(episodes):
            first = dropped[0].dropped.removeprefix(THE_SYSTEM).removeprefix(RAISED + " ")
            where = f" (tracebacks in {self.log})" if self._logs() else ""
            raise SystemCodeError(f"system {self.title(system)} raised in {len(dropped)} of {len(episodes)} "
                                  f"episodes, more than rollout.max_dropped={self.max_dropped} of them; the first: "
                                  f"{first}{where}")  # fmt: skip

    def unknown_agent(self, system: object, agent: str, agents: Collection[str]) -> SystemCodeError:
        """A step for an agent that nothing serves: the system's mistake, the same in every episode."""
        where = defined_at(getattr(system, "next_step", None), system_source(system))
        return SystemCodeError(f"system {self.title(system)} asked for agent {agent!r} in next_step ({where}), "
                               f"which no policy or frozen agent serves; its agents are {sorted(agents)}")  # fmt: skip

    def _logs(self) -> bool:
        return self.log is not None and self.log.parent.is_dir()

    def _written(self, system: object, failure: HookFailed) -> str:
        """Append the traceback to the log; the note the line ends with ("" without a log)."""
        if not self._logs():
            return ""
        text = "".join(traceback.format_exception(failure.error))
        with self.log.open("a") as f:
            f.write(f"system {self.title(system)} {failure.verb} {failure.hook}:\n{text}\n")
        return f" (traceback in {self.log})"


class Guarded:
    """An optional hook of the system (observe, eval_metrics, eval_item_metrics): what it raises stops the run
    with one line (no episode to drop). Equal when it guards the same method under the same settings."""

    def __init__(self, hook: str, fn: Callable[..., Any], system: object, errors: SystemErrors):
        self.hook, self.fn, self.system, self.errors = hook, fn, system, errors

    def __call__(self, *args: Any) -> Any:
        try:
            return self.errors.call(self.hook, self.fn, *args)
        except HookFailed as failure:
            raise self.errors.stop(self.system, failure) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Guarded) and (self.hook, self.fn, self.errors) == (other.hook, other.fn, other.errors)

    def __hash__(self) -> int:
        return hash((self.hook, self.fn, self.errors))
