"""Crash-safe checkpoint IO: atomic files, atomic checkpoint directories, RNG state.

No model code lives here: callers pass writer callables that put model,
adapter and optimizer files at a path we choose.

A checkpoint is the directory `run_dir/checkpoints/step_{step:06d}/` holding
the writers' files and `meta.json`. It is built under a hidden
`.tmp-step_XXXXXX-<random>/` name, every file is fsynced, `meta.json` is
written last, and only then is the directory renamed into place (rename is
atomic on POSIX). `checkpoints/latest` is a one-line text file naming the
current checkpoint, replaced atomically after the rename. So a kill -9 at any
moment leaves either the previous or the new checkpoint reachable and whole:

- before the rename: only a `.tmp-*` dir exists, which readers ignore and the
  next save deletes;
- between the rename and rewriting `latest`: `latest` still names the old,
  intact checkpoint;
- while pruning: old checkpoints are first renamed to `.tmp-*` (atomic), then
  deleted, so a half-deleted directory never looks like a checkpoint.

One writer per run directory is assumed (the trainer's rank 0).
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"
_STEP_RE = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"


# ---------------------------------------------------------------- atomic files


def _fsync_dir(path: Path) -> None:
    """Persist a directory's entries (new names, renames) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{_TMP_PREFIX}{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


# ----------------------------------------------------------------- checkpoints


def _fsync_tree(root: Path) -> None:
    """fsync every file and directory under root (writers rarely fsync themselves)."""
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _step_of(path: Path) -> int | None:
    m = _STEP_RE.match(path.name)
    return int(m.group(1)) if m else None


def _is_complete(path: Path) -> bool:
    """A checkpoint dir counts once its meta.json (written last) parses."""
    try:
        json.loads((path / META).read_text())
    except (OSError, ValueError):
        return False
    return True


def _complete_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete step_* dir, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for p in ckpt_dir.iterdir():
        step = _step_of(p)
        if step is not None and p.is_dir() and _is_complete(p):
            found.append((step, p))
    return sorted(found)


def _remove(path: Path) -> None:
    """Delete a checkpoint dir crash-safely: hide it under a .tmp- name first."""
    hidden = path.with_name(f"{_TMP_PREFIX}delete-{path.name}-{os.urandom(4).hex()}")
    os.rename(path, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def _clear_leftovers(ckpt_dir: Path) -> None:
    """Remove what a crashed save or prune left under a .tmp- name."""
    for stale in ckpt_dir.glob(f"{_TMP_PREFIX}*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    files: Mapping[str, Callable[[Path], None]],
    meta: dict,
    keep: int = 2,
) -> Path:
    """Write a checkpoint atomically and return its final path `checkpoints/step_{step:06d}`.

    `files` maps a relative name inside the checkpoint to a writer called with
    that path (parent dirs are created), e.g.
    {"policy/adapter": lambda p: model.save_pretrained(p),
     "optimizer.pt": lambda p: torch.save(opt.state_dict(), p)}.
    meta.json holds `{**meta, "step": step}` and must be JSON-serialisable.
    After the save, older checkpoints beyond `keep` (counting this one) are
    deleted; checkpoints with a larger step (an abandoned timeline after
    resuming from an older one) are left alone. If a writer raises, the
    partial directory is removed, `latest` is untouched, and the error propagates.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    ckpt_dir = Path(run_dir) / CHECKPOINTS
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(ckpt_dir)
    name = f"step_{step:06d}"
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{name}-", dir=ckpt_dir))
    try:
        for rel, writer in files.items():
            _pause_for_test("checkpoint")
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            writer(target)
        _fsync_tree(tmp)
        atomic_write_json(tmp / META, {**meta, "step": step})  # last: marks it complete
    except Exception as exc:
        full = not isinstance(exc, OSError) and _nearly_full(ckpt_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        if full:  # torch.save reports a full disk as RuntimeError("iostream error"): say what it is
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ckpt_dir)) from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    final = ckpt_dir / name
    if final.exists():  # re-saving a step (e.g. after resume): hide the old one first
        _remove(final)
    os.rename(tmp, final)
    _fsync_dir(ckpt_dir)
    atomic_write_text(ckpt_dir / LATEST, name + "\n")

    older = [p for s, p in _complete_checkpoints(ckpt_dir) if s < step]
    for p in older[: max(len(older) - (keep - 1), 0)]:
        _remove(p)
    _fsync_dir(ckpt_dir)
    return final


def _pause_for_test(phase: str) -> None:
    """Tests only: with MASRL_TEST_PAUSE=`phase` the process stops itself (SIGSTOP) here, so that a test
    delivers real signals in the middle of writing a checkpoint, then continues it (SIGCONT)
    (tests/run/test_stop.py). A stopped process cannot time its own stop: no race to win."""
    if os.environ.get("MASRL_TEST_PAUSE") == phase:
        os.kill(os.getpid(), signal.SIGSTOP)


def _nearly_full(path: Path, margin: int = 1 << 20) -> bool:
    """Whether the file system holding `path` has less than `margin` bytes left."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize < margin


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint `checkpoints/latest` names, or the newest complete step_* if
    `latest` is missing, corrupt or names an incomplete dir; None if there is none."""
    ckpt_dir = Path(run_dir) / CHECKPOINTS
    try:
        name = (ckpt_dir / LATEST).read_text().strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if _STEP_RE.match(name) and _is_complete(ckpt_dir / name):
        return ckpt_dir / name
    found = _complete_checkpoints(ckpt_dir)
    return found[-1][1] if found else None


def complete_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """Every complete checkpoint of a run, newest first (the fallbacks when one is unreadable)."""
    return [path for _, path in reversed(_complete_checkpoints(Path(run_dir) / CHECKPOINTS))]


def set_aside(checkpoint: str | os.PathLike) -> Path:
    """Rename an unreadable checkpoint to `broken-step_XXXXXX-<random>` (kept for a look, never
    read again: neither a step_* nor a .tmp-* name); `latest` then falls back to the newest whole one."""
    path = Path(checkpoint)
    aside = path.with_name(f"broken-{path.name}-{os.urandom(4).hex()}")
    os.rename(path, aside)
    _fsync_dir(path.parent)
    return aside


def read_meta(checkpoint: str | os.PathLike) -> dict:
    """The meta.json of a checkpoint dir (includes "step")."""
    return json.loads((Path(checkpoint) / META).read_text())


# ------------------------------------------------------------------------- RNG


def capture_rng() -> dict:
    """State of python `random`, numpy's global RNG, torch CPU and CUDA (if any).

    Only ints, floats, strings, lists, tuples and tensors: loads with
    `torch.load(..., weights_only=True)`.
    """
    import torch  # lazy: checkpoint IO alone should not pay torch's import (~3 s)

    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "python": random.getstate(),
        "numpy": (kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def restore_rng(state: dict) -> None:
    """Inverse of capture_rng. CUDA state is restored for as many devices as both have."""
    import torch  # lazy: checkpoint IO alone should not pay torch's import (~3 s)

    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        for i, s in enumerate(cuda[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, device=i)
