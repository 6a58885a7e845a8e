"""What a run writes as it trains: metrics, TensorBoard, and episode trees (masrl.run.files names the files).

`RunLogger` appends one JSON line per step (`kind: train`) and per evaluation
(`kind: eval`) to metrics.jsonl, the same numbers to TensorBoard, and every few
steps the step's first episode trees to samples.jsonl (`episode_record`: what
`masrl view` draws). A resumed run first drops the lines of steps past its
checkpoint (`truncate_after`), so the files read as if the run had never stopped;
a line torn by a kill in the middle of an append is dropped too (`masrl.run.files.records`).

Before that, `mend_metrics` makes sure the log is whole up to the checkpoint: every checkpoint carries
a copy of metrics.jsonl as it was when written (masrl.run.resume), so lines cut or deleted for the
steps it covers are restored from it, and said so; a checkpoint without that copy (written by an
older masrl) refuses to continue over missing steps rather than drop them without a word.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from masrl.checkpoint import atomic_write_text
from masrl.run.files import RunDir, records
from masrl.scoring import Scored
from masrl.types import EnvironmentProblem, Episode


class RunLogger:
    """metrics.jsonl + TensorBoard + samples.jsonl; a resumed run drops lines past its checkpoint."""

    def __init__(self, run: RunDir, purge_after: int):
        from torch.utils.tensorboard import SummaryWriter  # lazy: tensorboard loads its protobuf stack

        self.run = run
        self.metrics_path = run.metrics
        self.samples_path = run.samples
        for path in (self.metrics_path, self.samples_path):
            truncate_after(path, purge_after)
        self.tb = SummaryWriter(str(run.tensorboard), purge_step=purge_after + 1 if purge_after else None)

    def log(self, step: int, metrics: dict[str, float], kind: str = "train") -> None:
        clean = {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"step": step, "kind": kind, **clean}) + "\n")
        for k, v in metrics.items():
            if math.isfinite(v):
                self.tb.add_scalar(k, v, step)
        self.tb.flush()

    def episodes(self, step: int, episodes: Sequence[Episode], scored: Scored) -> None:
        with self.samples_path.open("a") as f:
            for i, ep in enumerate(episodes):
                f.write(json.dumps(episode_record(step, ep, scored, i)) + "\n")

    def close(self) -> None:
        self.tb.close()


def episode_record(step: int, ep: Episode, scored: Scored, index: int) -> dict:
    """One episode tree as samples.jsonl keeps it (what `masrl view` draws): every call's prompt and
    response, reward components, and for trainable calls the return, group and advantage it was
    trained with (`group` ids are shared by the calls of one step that were compared)."""
    key = lambda c: (index, c.id)  # noqa: E731
    return {
        "step": step,
        "episode": index,
        "task": {"id": ep.task.id, "question": ep.task.question, "answer": ep.task.answer},
        "calls": [
            {
                "id": c.id,
                "parent": c.parent,
                "agent": c.agent,
                "role": c.role,
                "turn": c.turn,
                "policy": c.reply.policy if c.reply else None,
                "prompt": [[m.role, m.content] for m in c.messages],
                "response": c.reply.text if c.reply else None,
                "tokens_in": c.reply.tokens_in if c.reply else 0,
                "tokens_out": c.reply.tokens_out if c.reply else 0,
                "cost": c.cost,
                "action": c.action if isinstance(c.action, (str, int, float, type(None))) else repr(c.action),
                "rewards": dict(c.rewards),
                "reward": c.reward,
                "return": scored.returns.get(key(c)),
                "group": scored.groups.get(key(c)),
                "advantage": scored.advantages.get(key(c)),
                "done": c.done,
                "error": c.error,
            }
            for c in ep.calls
        ],
    }


def truncate_after(path: Path, step: int) -> None:
    """Keep only lines with step <= `step` (lines from steps a crash lost are dropped)."""
    if not path.exists():
        return
    lines = [] if step == 0 else path.read_text().splitlines()  # a new run keeps nothing
    kept = [line for line, record in records(lines) if record["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))



TORN = "had its last line cut (a kill while it was written); dropped that line"


def mend_metrics(run: RunDir, ckpt: Path, step: int, again: str) -> str | None:
    """Check metrics.jsonl against checkpoint `ckpt` (of `step`) before a resume: restore the lines of steps
    <= `step` from the checkpoint's copy when any is missing or unreadable, and drop a torn last line.
    Returns the note to print (None: the log was whole); EnvironmentProblem when lines are missing and the
    checkpoint has no copy to restore them from (`again`: the command that goes on without this run)."""
    path = run.metrics
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    torn = bool(lines) and not records(lines[-1:])  # a kill in the middle of an append
    if torn:
        lines = lines[:-1]
    unreadable = len([line for line in lines if line.strip()]) - len(records(lines))
    have = {(r["step"], r["kind"]) for _, r in records(lines) if r["step"] <= step}
    copy = ckpt / path.name
    if not copy.exists():  # a checkpoint from before masrl kept the log in it: only the train lines are known
        lost = sorted(set(range(1, step + 1)) - {s for s, kind in have if kind == "train"})
        if lost or unreadable:
            what = f"lacks the lines of step{'s' if len(lost) > 1 else ''} {span(lost)}" if lost else \
                f"has {unreadable} unreadable lines"
            raise EnvironmentProblem(f"{path} {what}, which checkpoint {ckpt.name} covers, and the checkpoint "
                                     f"holds no copy of them; put the file back, or {again}")  # fmt: skip
        return _rewrite(path, lines, TORN) if torn else None
    kept = [line for line, r in records(copy.read_text().splitlines()) if r["step"] <= step]
    lost = sorted({s for s, kind in map(_key, kept) if (s, kind) not in have})
    if not lost and not unreadable:
        return _rewrite(path, lines, TORN) if torn else None
    # the checkpoint's lines, then the file's lines it does not have (the final evaluation, logged after the
    # checkpoint), then those of later steps (the logger drops them: they are trained again)
    known = set(map(_key, kept))
    extra = [line for line, r in records(lines) if r["step"] <= step and (r["step"], r["kind"]) not in known]
    later = [line for line, r in records(lines) if r["step"] > step]
    what = f"lacked the lines of step{'s' if len(lost) > 1 else ''} {span(lost)}" if lost else \
        f"had {unreadable} unreadable lines"
    return _rewrite(path, kept + extra + later, f"{what} (cut or edited); restored the lines of steps 1-{step} "
                                                f"from checkpoint {ckpt.name}")  # fmt: skip


def _key(line: str) -> tuple[int, str]:
    record = json.loads(line)
    return record["step"], record["kind"]


def span(steps: list[int]) -> str:
    """`2-4`, or `2, 5, 7`: the steps a message names (sorted, each once)."""
    steps = sorted(set(steps))
    if steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}" if len(steps) > 1 else str(steps[0])
    return ", ".join(map(str, steps))


def _rewrite(path: Path, lines: list[str], what: str) -> str:
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return f"{path} {what}"
