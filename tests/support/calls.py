"""Hand-made calls for tests of scoring and a step's metrics: ids are tree addresses ("0", "0.1")."""

from __future__ import annotations

from masrl.types import Call, Reply


def call(id, reward, policy="p", role="solver", done=True, error=None):
    """A call at address `id` with `reward`; its reply's tokens name the last index (an errored call has none)."""
    parent = id.rpartition(".")[0] or None
    n = int(id.split(".")[-1])
    reply = None if error else Reply("x", 2, 1, 0.0, prompt_ids=(1, n), response_ids=(9, n, 7), policy=policy)
    return Call(id=id, parent=parent, agent=role, role=role, turn=id.count("."), messages=(), reply=reply,
                reward=reward, done=done, error=error)  # fmt: skip
