"""The channel layers: the embedded one (channels' in-memory layer, tidied at most once a
second), and Redis's, outlasting an outage.

channels' InMemoryChannelLayer walks every channel and group member on every receive and
group_send to drop expired entries: with N watching sockets, one event costs N² steps.
Expiry is a cleanup (60 s for messages, a day for group members), so doing it once a
second changes nothing a watcher can see.

`_clean_expired` is private to channels and has no public replacement; this module is the
only place that touches it, and tests/live/test_internals.py fails on an upgrade that renames it,
changes its signature or stops calling it from `receive` and `group_send`.

The layer is a hint, not the record (docs/contract.md §4): a process whose Redis is
unreachable still opens its sockets, and they catch up from the database. channels-redis
raises from every call instead, and channels lets that end the handshake with a 500 and a
traceback (`group_add`) or the open socket (the consumer's own `receive`).
`OutlastingRedisChannelLayer` keeps the raise for sends (the outbox logs what it could not
publish) and waits the outage out everywhere else, logging it once a minute, not once per
socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer

log = logging.getLogger(__name__)
CLEAN_INTERVAL = 1.0
UNREACHABLE = "the channel layer is unreachable"  # the log line's words
OUTAGE_LOG_SECONDS = 60.0  # an outage is logged at most this often
RETRY_SECONDS = 1.0  # a receive that failed tries again this soon
MEMBERSHIP_SECONDS = 2.0  # a group join or leave waits at most this long for Redis


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    _cleaned_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._cleaned_at < CLEAN_INTERVAL:
            return
        self._cleaned_at = now
        super()._clean_expired()  # type: ignore[misc]  # private in the stubs, not in channels


class Outage:
    """The layer's failures, logged at most once per `every` seconds (with how many there
    were), and once more when it answers again: a thousand sockets reconnecting into an
    outage make one line, not a thousand tracebacks."""

    def __init__(self, clock: Callable[[], float], every: float = OUTAGE_LOG_SECONDS) -> None:
        self.clock = clock
        self.every = every
        self.logged_at: float | None = None
        self.failures = 0  # since the last line
        self.down = False

    def failed(self, what: str, exc: BaseException) -> None:
        self.failures += 1
        self.down = True
        now = self.clock()
        if self.logged_at is not None and now - self.logged_at < self.every:
            return
        log.warning(
            "%s (%d failure%s, the last a %s: %s: %s); live sockets catch up from the "
            "database, and this is logged again in %d s at most",
            UNREACHABLE,
            self.failures,
            "" if self.failures == 1 else "s",
            what,
            type(exc).__name__,
            exc,
            self.every,
        )
        self.logged_at, self.failures = now, 0

    def answered(self) -> None:
        if self.down:
            self.down, self.logged_at, self.failures = False, None, 0
            log.warning("the channel layer answers again")


outage = Outage(time.monotonic)


class OutlastingRedisChannelLayer(RedisChannelLayer):  # type: ignore[misc]  # untyped package
    """channels-redis's layer, for a process that keeps serving while Redis is unreachable:
    a receive waits for Redis to come back, a group join or leave that fails is left to the
    sockets' group refresh (which resyncs them from the database); sends still raise."""

    async def receive(self, channel: str) -> dict[str, Any]:
        while True:
            try:
                message: dict[str, Any] = await super().receive(channel)
            except Exception as exc:  # the layer's failures are many and all mean the same
                outage.failed("receive", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            outage.answered()
            return message

    async def group_add(self, group: str, channel: str) -> None:
        try:
            async with asyncio.timeout(MEMBERSHIP_SECONDS):
                await super().group_add(group, channel)
        except Exception as exc:
            outage.failed("group join", exc)
        else:
            outage.answered()

    async def group_discard(self, group: str, channel: str) -> None:
        try:
            async with asyncio.timeout(MEMBERSHIP_SECONDS):
                await super().group_discard(group, channel)
        except Exception as exc:  # Redis forgets members by itself (group_expiry)
            outage.failed("group leave", exc)
        else:
            outage.answered()
