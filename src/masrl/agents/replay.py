"""Recorded responses replayed from a JSONL file, as an agent.

Each line is one recorded reply::

    {"prompt": "What is 2+2?", "response": "4", "tokens_in": 12, "tokens_out": 1, "cost": 0.0001}

``response`` is required; ``tokens_in``, ``tokens_out`` and ``cost`` are
optional (missing counts are `approx_tokens` estimates, a missing cost comes
from the agent's `Price`). A conversation is looked up by one of two keys:

- ``key="prompt"`` (default): the text of its last user message, matched
  against each line's ``"prompt"``. Robust to system-prompt edits; use it for
  single-turn agents.
- ``key="conversation"``: `conversation_key(messages)`, a SHA-256 of every
  message's role and content, matched against each line's ``"conversation"``
  (or computed from its ``"messages"``, a list of ``{"role", "content"}``).
  Exact; use it when the same question recurs in different contexts.

A key recorded several times is answered with its responses in file order,
cycling: the n-th call for that key gets response ``n mod count``. A
conversation with no recording raises `AgentError`, so the episode fails and
the step goes on.

`record_jsonl` appends a line in this format (with both keys) from any
agent's reply, so a replay file can be built by running a live agent once.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from masrl.agents.base import approx_tokens
from masrl.types import AgentError, Message, Price, Reply

KEYS = ("prompt", "conversation")


@dataclass(frozen=True)
class Recording:
    response: str
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None


def conversation_key(messages: Sequence[Message]) -> str:
    """A stable hash of a whole conversation: roles and contents, in order."""
    canonical = json.dumps([[m.role, m.content] for m in messages], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def last_user_text(messages: Sequence[Message]) -> str | None:
    for m in reversed(messages):
        if m.role == "user":
            return m.content
    return None


class ReplayAgent:
    def __init__(self, name: str, path: str | Path, price: Price = Price(), key: str = "prompt"):
        if key not in KEYS:
            raise ValueError(f"key must be one of {KEYS}, got {key!r}")
        self.name = name
        self.path = Path(path)
        self.price = price
        self.key = key
        self.recordings = load_recordings(self.path, key)
        self._served: dict[str, int] = defaultdict(int)

    def reset(self) -> None:
        """Start every key's cycle again from its first recorded response."""
        self._served.clear()

    def fork(self) -> "ReplayAgent":
        """The same recordings for one independent episode: each prompt's first recording again."""
        other = copy.copy(self)
        other._served = defaultdict(int)
        return other

    def lookup_key(self, messages: Sequence[Message]) -> str | None:
        return last_user_text(messages) if self.key == "prompt" else conversation_key(messages)

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        messages = tuple(messages)
        k = self.lookup_key(messages)
        if k is None:
            raise AgentError(f"{self.name}: conversation has no user message to look up in {self.path}")
        options = self.recordings.get(k)
        if not options:
            shown = k if len(k) <= 80 else k[:80] + "..."
            raise AgentError(f"{self.name}: no recorded response for {self.key} {shown!r} in {self.path}")
        rec = options[self._served[k] % len(options)]
        self._served[k] += 1
        n_in = rec.tokens_in if rec.tokens_in is not None else sum(approx_tokens(m.content) for m in messages)
        n_out = rec.tokens_out if rec.tokens_out is not None else approx_tokens(rec.response)
        cost = rec.cost if rec.cost is not None else self.price.cost(n_in, n_out)
        return Reply(text=rec.response, tokens_in=n_in, tokens_out=n_out, cost=cost)


def load_recordings(path: Path, key: str) -> dict[str, list[Recording]]:
    """Parse a replay file into {lookup key: responses in file order}; ValueError names the bad line."""
    out: dict[str, list[Recording]] = defaultdict(list)
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                k, rec = _parse_line(line, key)
            except ValueError as exc:
                raise ValueError(f"{path}:{lineno}: {exc}") from None
            out[k].append(rec)
    return dict(out)


def _parse_line(line: str, key: str) -> tuple[str, Recording]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    response = obj.get("response")
    if not isinstance(response, str):
        raise ValueError('"response" must be a string')
    if key == "prompt":
        k = obj.get("prompt")
        if not isinstance(k, str):
            raise ValueError('"prompt" must be a string (the last user message)')
    elif isinstance(obj.get("conversation"), str):
        k = obj["conversation"]
    elif "messages" in obj:
        k = conversation_key(_messages(obj["messages"]))
    else:
        raise ValueError('key="conversation" needs a "conversation" hash or a "messages" list on every line')
    return k, Recording(
        response=response,
        tokens_in=_count(obj, "tokens_in"),
        tokens_out=_count(obj, "tokens_out"),
        cost=_cost(obj),
    )


def _messages(raw: Any) -> list[Message]:
    if not isinstance(raw, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in raw
    ):
        raise ValueError('"messages" must be a list of {"role": str, "content": str}')
    return [Message(m["role"], m["content"]) for m in raw]


def _count(obj: dict, field: str) -> int | None:
    value = obj.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f'"{field}" must be a non-negative integer, got {value!r}')
    return value


def _cost(obj: dict) -> float | None:
    value = obj.get("cost")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f'"cost" must be a non-negative number, got {value!r}')
    return float(value)


def record_jsonl(path: str | Path, messages: Sequence[Message], reply: Reply) -> None:
    """Append one replay line for `reply` to `messages`, usable with either key."""
    messages = tuple(messages)
    line = {
        "prompt": last_user_text(messages) or "",
        "conversation": conversation_key(messages),
        "messages": [{"role": m.role, "content": m.content} for m in messages],
        "response": reply.text,
        "tokens_in": reply.tokens_in,
        "tokens_out": reply.tokens_out,
        "cost": reply.cost,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
