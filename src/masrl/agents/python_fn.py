"""A plain Python callable as an agent: tools, scripted opponents, oracles.

``fn(messages)`` returns the reply text, or a full `Reply` when it knows its
own token counts and cost (taken as given). Async functions are awaited;
sync ones run in a worker thread so a slow tool never stalls the episodes
sharing the event loop. Any exception becomes an `AgentError` carrying the
original message, so a crashing tool fails its episode, not the step.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence

from masrl.agents.base import approx_tokens
from masrl.types import AgentError, Message, Price, Reply

AgentFn = Callable[[tuple[Message, ...]], "str | Reply | Awaitable[str | Reply]"]


class FunctionAgent:
    def __init__(self, name: str, fn: AgentFn, price: Price = Price()):
        self.name = name
        self.fn = fn
        self.price = price
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))

    async def __call__(self, messages: Sequence[Message]) -> Reply:
        messages = tuple(messages)
        try:
            if self._is_async:
                out = await self.fn(messages)
            else:
                out = await asyncio.to_thread(self.fn, messages)
                if inspect.isawaitable(out):  # e.g. a lambda returning a coroutine
                    out = await out
        except AgentError:
            raise
        except Exception as exc:  # noqa: BLE001 - any tool failure fails the episode only
            raise AgentError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if isinstance(out, Reply):
            return out
        if not isinstance(out, str):
            raise AgentError(f"{self.name}: function returned {type(out).__name__}, expected str or Reply")
        n_in = sum(approx_tokens(m.content) for m in messages)
        n_out = approx_tokens(out)
        return Reply(text=out, tokens_in=n_in, tokens_out=n_out, cost=self.price.cost(n_in, n_out))
