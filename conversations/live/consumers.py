"""Live updates (SPEC §4): thin consumers that push the page's own partials.

The channel layer is a hint, not the record: every fragment carries its position
(message seq, block count), a client that reconnects reports what it holds and gets
the rest from the database, and a consumer that sees a gap resyncs from the database.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from conversations.core import replay, strictjson
from conversations.live import access, fragments
from conversations.record import events

log = logging.getLogger(__name__)
T = TypeVar("T")
BAD_REQUEST = 4400
LOGGED_OUT = access.SIGNED_OUT  # 4401: signed out, deactivated, or the password changed
FORBIDDEN = access.FORBIDDEN  # 4403: signed in without conversations.view_conversation
NOT_FOUND = access.NOT_FOUND  # 4404: unknown or deleted conversation
TOO_MANY = 4429  # the user already holds REPLAY_MAX_SOCKETS_PER_USER sockets here
REFRESH_TIMEOUT = 10.0  # seconds; a refresh stuck longer closes the socket


class RenderCache(Generic[T]):
    """Renders each fragment once per event and view variant, however many sockets watch.

    Keyed by what the event says changed; entries live a few seconds, long enough for
    every consumer in this process to pick the same rendering up.
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self.pending: dict[tuple[Any, ...], asyncio.Task[T]] = {}

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

    def _forget_failure(self, key: tuple[Any, ...], task: asyncio.Task[T]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._expire(key, task)

    def _expire(self, key: tuple[Any, ...], task: asyncio.Task[T]) -> None:
        if self.pending.get(key) is task:
            del self.pending[key]


frames: RenderCache[fragments.Frame] = RenderCache()
rows: RenderCache[str] = RenderCache()
# Shared by the sockets of one session; an access event's checks are keyed by the event,
# so a check made before the change is never reused for it.
access_checks: RenderCache[access.Access] = RenderCache()
open_sockets: Counter[object] = Counter()  # this process's accepted sockets, per user


class Watcher(AsyncWebsocketConsumer):
    """What both live sockets share: who may watch, the close codes, the user's group
    (logout and access changes), the per-user cap and the periodic refresh.

    Refusals accept first and then close with a 44xx code: a handshake refused before
    the accept reaches the page as 1006, and the page would retry forever.
    """

    groups_joined: list[str]
    refresher: asyncio.Task[None] | None = None
    user_id: object = None
    counted = False  # this socket is in open_sockets
    closing = False  # closed (or closing) by us: events that arrive now are dropped

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
        # Per process (see README): with several servers a user may hold this many on each.
        if open_sockets[verdict.user_id] >= settings.REPLAY_MAX_SOCKETS_PER_USER:
            await self.refuse(TOO_MANY)
            return
        open_sockets[verdict.user_id] += 1
        self.counted = True
        self.user_id = verdict.user_id
        self.groups_joined = [events.user_group(verdict.user_id), *self.watched_groups()]
        await self.join()
        await self.accept()
        self.refresher = asyncio.ensure_future(self.refresh_groups())
        await self.opened()

    async def refuse(self, code: int) -> None:
        await self.accept()
        await self.shut(code)

    async def shut(self, code: int) -> None:
        self.closing = True
        await self.close(code=code)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # channels closes stale database connections before every handler, a thread hop
        # per socket per event; ours reach the database only through
        # database_sync_to_async, which does that itself.
        if self.closing and message["type"] != "websocket.disconnect":
            return  # an event (or resume report) queued before this socket was closed
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    def parse(self) -> int | None:
        """The close code for a malformed request, before anything is read."""
        return None

    def conversation_key(self) -> uuid.UUID | None:
        return None

    def watched_groups(self) -> list[str]:
        return []

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
                await self.close(code=1011)
                return

    async def refreshed(self) -> None:
        pass

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
        self.closing = True
        if self.refresher is not None:
            self.refresher.cancel()
        if self.counted:
            self.counted = False
            open_sockets[self.user_id] -= 1
            if open_sockets[self.user_id] <= 0:
                del open_sockets[self.user_id]
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def session_logged_out(self, event: events.LoggedOut) -> None:
        await self.shut(LOGGED_OUT)

    async def user_access_changed(self, event: events.AccessChanged) -> None:
        await self.recheck(("change", event["change"]))

    def query(self, name: str, default: str) -> str:
        params = parse_qs(self.scope.get("query_string", b"").decode())
        return params.get(name, [default])[-1]


class ConversationConsumer(Watcher):
    """`/ws/conversations/ID/`: every message and block added to one conversation."""

    conversation_id: str
    vision: bool
    shape: replay.Shape
    # What this client holds, as far as this consumer knows: message seq → block count,
    # for the messages from `first` on (a page may hold only the latest window).
    held: dict[int, int]
    first: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = {}
        self.lock = asyncio.Lock()

    def parse(self) -> int | None:
        self.conversation_id = str(self.scope["url_route"]["kwargs"]["conversation_id"])
        vision = self.query("vision", "1").lower()
        shape = self.query("shape", "openai")
        if vision not in {"1", "0", "true", "false"} or shape not in replay.SHAPES:
            return BAD_REQUEST
        self.vision = vision in {"1", "true"}
        self.shape = shape
        return None

    def conversation_key(self) -> uuid.UUID | None:
        return uuid.UUID(self.conversation_id)

    async def opened(self) -> None:
        # Read after joining the group: whatever commits from now on is announced to this
        # socket, and everything before is the client's page (or its resume report).
        # After the accept, so that the handshake itself costs the two access queries.
        self.held = await database_sync_to_async(fragments.held_counts)(self.conversation_id)

    def watched_groups(self) -> list[str]:
        return [events.conversation_group(self.conversation_id)]

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """`{"type": "resume", "from": SEQ, "counts": [blocks of SEQ, of SEQ+1, …]}`:
        the client's position; everything after it is sent from the database."""
        try:
            report: Any = strictjson.loads(text_data or "")  # its error is a ValueError
            start = int(report["from"])
            counts = [int(n) for n in report["counts"]]
        except (ValueError, KeyError, TypeError, OverflowError):
            return
        if report.get("type") != "resume" or start < 0:
            return
        self.first = start
        self.held = {start + i: n for i, n in enumerate(counts)}
        await self.resync(start)

    async def resync(self, start: int) -> None:
        async with self.lock:
            await self._resync(start)

    async def _resync(self, start: int) -> None:
        current = await database_sync_to_async(fragments.block_counts)(self.conversation_id, start)
        if current is None:
            await self.shut(NOT_FOUND)  # deleted, and its event went missing in the layer
            return
        stale = [seq for seq, n in sorted((current or {}).items()) if self.held.get(seq, -1) < n]
        if stale:
            await self.push(
                await database_sync_to_async(fragments.messages_frame)(
                    self.conversation_id, stale, self.vision, self.shape
                )
            )

    async def refreshed(self) -> None:
        await self.resync(self.first)

    async def conversation_message_added(self, event: events.MessageAdded) -> None:
        await self.changed(event["message_seq"], event["block_count"])

    async def conversation_block_added(self, event: events.BlockAdded) -> None:
        await self.changed(event["message_seq"], event["block_seq"] + 1)

    async def changed(self, seq: int, blocks: int) -> None:
        # One change at a time per socket: the refresh task and event handlers interleave.
        async with self.lock:
            if seq < self.first or self.held.get(seq, -1) >= blocks:
                return  # before the client's window, or already sent (by a resync)
            if seq > self.first and seq - 1 not in self.held:
                await self._resync(self.first)  # an earlier message went missing in the layer
                return
            key = (self.conversation_id, seq, blocks, self.vision, self.shape)
            # The renderer is built only on a miss: the other sockets of this event hit.
            frame = await frames.get(
                key,
                lambda: database_sync_to_async(fragments.messages_frame)(
                    self.conversation_id, [seq], self.vision, self.shape
                ),
            )
            await self.push(frame)

    async def push(self, frame: fragments.Frame) -> None:
        """Send a frame unless it holds nothing newer than the client has."""
        if not any(self.held.get(seq, -1) < n for seq, n in frame.counts.items()):
            return
        await self.send(text_data=frame.html)
        for seq, n in frame.counts.items():
            self.held[seq] = max(self.held.get(seq, 0), n)

    async def conversation_created(self, event: events.ConversationCreated) -> None:
        pass

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.shut(NOT_FOUND)


class ListConsumer(Watcher):
    """`/ws/conversations/`: new conversations and activity, for the list page."""

    def watched_groups(self) -> list[str]:
        return [events.LIST_GROUP]

    async def conversation_created(self, event: events.ConversationCreated) -> None:
        await self.row(event["conversation_id"], "created")

    async def conversation_message_added(self, event: events.MessageAdded) -> None:
        await self.row(event["conversation_id"], event["message_seq"], event["block_count"])

    async def conversation_block_added(self, event: events.BlockAdded) -> None:
        # Name the state as message_added does: "message N has K blocks".
        await self.row(event["conversation_id"], event["message_seq"], event["block_seq"] + 1)

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.send(text_data=fragments.removed_row_html(event["conversation_id"]))

    async def row(self, conversation_id: str, *position: Any) -> None:
        key = ("row", conversation_id, *position)
        html = await rows.get(
            key, database_sync_to_async(lambda: fragments.row_html(conversation_id))
        )
        if html:
            await self.send(text_data=html)
