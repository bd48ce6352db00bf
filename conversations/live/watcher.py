"""What every live socket shares (docs/contract.md §4): who may watch, the close codes,
the user's group (logout and access changes), the per-user cap and the periodic refresh.

The channel layer is a hint, not the record: every fragment carries its position
(message seq, block count), a client that reconnects reports what it holds and gets
the rest from the database, and a consumer that sees a gap resyncs from the database.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.conf import settings

from conversations.core.socket_window import Quota
from conversations.live import access
from conversations.live.internals import LiveConsumer
from conversations.live.render_cache import access_checks
from conversations.record import events, metrics

log = logging.getLogger(__name__)
BAD_REQUEST = 4400
LOGGED_OUT = access.SIGNED_OUT  # 4401: signed out, deactivated, or the password changed
FORBIDDEN = access.FORBIDDEN  # 4403: signed in without conversations.view_conversation
NOT_FOUND = access.NOT_FOUND  # 4404: unknown or deleted conversation
TOO_MANY = 4429  # the user already holds REPLAY_MAX_SOCKETS_PER_USER sockets here
# The server cannot go on with this socket now (a refresh or check failed, a promised report
# never came): the page reconnects and resumes. In the application's range (autobahn takes
# only 1000 and 3000-4999 from it) and outside the final 4400-4499 (docs/contract.md §4).
RETRY = 4503
REFRESH_TIMEOUT = 10.0  # seconds; a refresh stuck longer closes the socket

# This process's open sockets, per user. Per process (docs/guide/dashboard.md): with several servers
# a user may hold this many on each.
user_sockets = Quota()


class Watcher(LiveConsumer):
    """A signed-in user's socket. `connect`: parse, check access, count, join, accept;
    `disconnect`: leave and give the count back. Subclasses name their groups and what
    they send once open.

    Refusals accept first and then close with a 44xx code: a handshake refused before
    the accept reaches the page as 1006, and the page would retry forever.
    """

    groups_joined: list[str]
    user_id: object = None
    counted: tuple[Quota, object] | None = None  # the quota this socket holds a place in
    tasks: tuple[asyncio.Task[None], ...] = ()  # its refresh (and a share link's watch)
    metrics_kind = "conversation"  # the `kind` it is counted under in /metrics
    gauged: Any = None  # its place in replay_live_sockets while open

    async def connect(self) -> None:
        problem = self.parse()
        if problem is not None:
            await self.refuse(problem)
            return
        verdict = await database_sync_to_async(access.check)(
            self.scope["session"], self.conversation_key()
        )
        if verdict.refusal is not None:
            await self.refuse(verdict.refusal)
            return
        if not user_sockets.take(verdict.user_id, settings.REPLAY_MAX_SOCKETS_PER_USER):
            await self.refuse(TOO_MANY)
            return
        self.user_id = verdict.user_id
        self.groups_joined = [events.user_group(verdict.user_id), *self.watched_groups()]
        await self.start((user_sockets, verdict.user_id))

    async def start(self, counted: tuple[Quota, object]) -> None:
        """Join, accept, start the background tasks and send what the page misses.

        The place taken in `counted` is the socket's while it is open: if a step fails (the
        database; the layer's outages do not fail it, `live/layers.py`), channels never
        calls `disconnect`, so it is given back here and the error goes on (the connection
        closes; the page retries).
        """
        self.counted = counted
        opened = False
        try:
            await self.join()
            await self.accept()
            self.tasks = tuple(asyncio.ensure_future(work) for work in self.background())
            await self.opened()
            opened = True
            self.gauged = metrics.SOCKETS.labels(self.metrics_kind)
            self.gauged.inc()
        finally:
            if not opened:
                await self.release()

    async def release(self) -> None:
        """Stop, give the place back and leave the groups (once, however often called)."""
        self.closing = True
        if self.gauged is not None:
            self.gauged.dec()
            self.gauged = None
        for task in self.tasks:
            task.cancel()
        if self.counted is not None:
            quota, key = self.counted
            self.counted = None
            quota.release(key)
        joined, self.groups_joined = getattr(self, "groups_joined", []), []
        for group in joined:
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception as exc:  # the layer forgets members by itself (group_expiry)
                log.warning("could not leave %s: %s: %s", group, type(exc).__name__, exc)

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.shut(code)

    async def shut(self, code: int) -> None:
        self.closing = True
        await self.close(code=code)

    def parse(self) -> int | None:
        """The close code for a malformed request, before anything is read."""
        return None

    def conversation_key(self) -> uuid.UUID | None:
        return None

    def watched_groups(self) -> list[str]:
        return []

    def background(self) -> list[Coroutine[Any, Any, None]]:
        return [self.refresh_groups(), self.access_ticks()]

    async def opened(self) -> None:
        pass

    async def join(self) -> None:
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)

    async def refresh_groups(self) -> None:
        # Layers forget group members after group_expiry (and all of them when Redis
        # restarts); re-adding renews them, and a resync covers what went by meanwhile.
        # Access is checked again too: the fallback for an access event the layer lost.
        while not self.closing:
            # Jitter, so that sockets opened together do not all refresh together.
            await asyncio.sleep(settings.REPLAY_GROUP_REFRESH_SECONDS * random.uniform(0.8, 1.2))
            try:
                async with asyncio.timeout(REFRESH_TIMEOUT):
                    if not await self.recheck(("refresh",)):
                        return
                    await self.join()
                    await self.refreshed()
            except Exception as exc:
                # A socket that can no longer renew would go quietly deaf: close it, and
                # the client reconnects and resumes from the database.
                log.warning(
                    "closing a socket whose refresh failed: %s: %s", type(exc).__name__, exc
                )
                await self.close(code=RETRY)
                return

    async def refreshed(self) -> None:
        pass

    async def access_ticks(self) -> None:
        """Check access again every `REPLAY_ACCESS_RECHECK_SECONDS` (5): a user deactivated,
        stripped of the permission or given a new password by another process (the admin
        on another server, `manage.py shell`), whose signal never reaches this one, loses
        the socket within 10 s. Every socket of a session here shares one check per tick
        (the tick is in the check's key), so the cost is per session, not per socket."""
        every = float(settings.REPLAY_ACCESS_RECHECK_SECONDS)
        opened = time.monotonic()  # the handshake has just checked access
        while not self.closing:
            # Wake at a tick boundary, so a session's sockets ask at the same time; the
            # first at least half a tick after the handshake (so within 1.5 ticks of it).
            now = time.monotonic()
            wait = every - now % every
            if now + wait - opened < every / 2:
                wait += every
            await asyncio.sleep(wait + random.uniform(0, every / 20))
            tick = int(time.monotonic() // every)
            try:
                async with asyncio.timeout(REFRESH_TIMEOUT):
                    if not await self.recheck(("tick", tick)):
                        return
            except Exception as exc:
                log.warning("closing a socket whose access check failed: %s", exc)
                await self.close(code=RETRY)
                return

    async def recheck(self, reason: tuple[Any, ...]) -> bool:
        """Check the session and user again (one check per session and reason, however
        many sockets share them); close the socket and answer False if access is gone."""
        session = self.scope["session"]
        verdict = await access_checks.get(
            (session.session_key, *reason),
            database_sync_to_async(lambda: access.check(access.fresh(session))),
        )
        if verdict.refusal is None and verdict.user_id == self.user_id:
            return True
        if not self.closing:
            await self.shut(verdict.refusal or LOGGED_OUT)
        return False

    async def disconnect(self, code: int) -> None:
        await self.release()

    async def session_logged_out(self, event: events.LoggedOut) -> None:
        await self.shut(LOGGED_OUT)

    async def user_access_changed(self, event: events.AccessChanged) -> None:
        await self.recheck(("change", event["change"]))

    def query(self, name: str, default: str) -> str:
        params = parse_qs(self.scope.get("query_string", b"").decode())
        return params.get(name, [default])[-1]
