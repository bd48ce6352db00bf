"""Each fragment rendered once per event and view variant, however many sockets watch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from conversations.live import access, fragments

T = TypeVar("T")


class RenderCache(Generic[T]):
    """Renders each fragment once per event and view variant, however many sockets watch.

    Keyed by what the event says changed; entries live a few seconds, long enough for
    every consumer in this process to pick the same rendering up.
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self.pending: dict[tuple[Any, ...], asyncio.Task[T]] = {}
        self.last_change = ""

    async def get(self, key: tuple[Any, ...], render: Callable[[], Awaitable[T]]) -> T:
        task = self.pending.get(key)
        if task is None:
            # A task of its own: a socket that goes away mid-render (its handler is
            # cancelled) must not leave the others waiting for a result that never comes.
            task = asyncio.ensure_future(render())
            self.pending[key] = task
            task.add_done_callback(lambda done: self._forget_failure(key, done))
            asyncio.get_running_loop().call_later(self.ttl, self._expire, key, task)
        return await asyncio.shield(task)

    def forget_before(self, change: str) -> None:
        """A change the cached renderings may predate (a note): render afresh from now on
        (once per change, however many sockets hear of it)."""
        if change != self.last_change:
            self.last_change = change
            self.pending.clear()

    def _forget_failure(self, key: tuple[Any, ...], task: asyncio.Task[T]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._expire(key, task)

    def _expire(self, key: tuple[Any, ...], task: asyncio.Task[T]) -> None:
        if self.pending.get(key) is task:
            del self.pending[key]


frames: RenderCache[fragments.Frame] = RenderCache()  # a conversation's messages
batches: RenderCache[list[fragments.Frame]] = RenderCache()  # several at once, packed
rows: RenderCache[str] = RenderCache()  # the list's rows
notes: RenderCache[str] = RenderCache()  # a message's notes, once per change
# Shared by the sockets of one session; an access event's checks are keyed by the event,
# so a check made before the change is never reused for it.
access_checks: RenderCache[access.Access] = RenderCache()
