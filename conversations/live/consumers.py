"""Live updates (docs/contract.md §4): thin consumers that push the page's own partials.

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
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs

from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from conversations.core import context_windows, page_windows, replay, strictjson
from conversations.core.options import OptionError, ReplayOptions
from conversations.dashboard import share_pages
from conversations.live import access, fragments
from conversations.record import events
from conversations.record.models import ShareLink

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
    span: int = 0  # the client holds [first, first + span)
    tail: bool = True  # it follows the end: later messages are pushed to it
    reloading: bool = False  # told to reload its window; silent until it reports again
    view: tuple[tuple[str, str], ...] = ()  # the pressure view's model/window overrides

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
        view = {k: self.query(k, "") for k in ("model", "window") if self.query(k, "")}
        try:
            context_windows.resolve(view, {}, [])
        except OptionError:
            return BAD_REQUEST
        self.vision = vision in {"1", "true"}
        self.shape = shape
        self.view = tuple(sorted(view.items()))
        return None

    def conversation_key(self) -> uuid.UUID | None:
        return uuid.UUID(self.conversation_id)

    async def opened(self) -> None:
        # Read after joining the group: whatever commits from now on is announced to this
        # socket, and everything before is the client's page (or its resume report). A page
        # holds at most the last DOCUMENT messages, so that is all this reads.
        self.first, self.held = await database_sync_to_async(fragments.tail_counts)(
            self.conversation_id
        )
        self.span = len(self.held)

    def watched_groups(self) -> list[str]:
        return [events.conversation_group(self.conversation_id)]

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """`{"type": "resume", "from": SEQ, "counts": [blocks of SEQ, of SEQ+1, …],
        "tail": bool}`: the client's position (`tail` false: it holds a window away from the
        end and wants no later messages); what it misses is sent from the database."""
        try:
            report: Any = strictjson.loads(text_data or "")  # its error is a ValueError
            start = int(report["from"])
            counts = [int(n) for n in report["counts"]]
            tail = report.get("tail", True)
        except (ValueError, KeyError, TypeError, OverflowError):
            return
        if report.get("type") != "resume" or start < 0 or not isinstance(tail, bool):
            return
        if len(counts) > page_windows.DOCUMENT:  # a page holds no more: keep its end
            start, counts = (
                start + len(counts) - page_windows.DOCUMENT,
                counts[-page_windows.DOCUMENT :],
            )
        async with self.lock:
            self.first, self.tail, self.reloading = start, tail, False
            self.held = {start + i: n for i, n in enumerate(counts)}
            self.span = len(counts)
            await self._resync()

    async def resync(self) -> None:
        async with self.lock:
            await self._resync()

    async def _resync(self) -> None:
        if self.reloading:
            return  # the client is fetching its window over HTTP and reports after
        held_span = range(self.first, self.first + max(self.span, 1))
        span = page_windows.report_span(self.first, self.span) if self.tail else held_span
        current = await database_sync_to_async(fragments.block_counts_between)(
            self.conversation_id, span
        )
        if current is None:
            await self.shut(NOT_FOUND)  # deleted, and its event went missing in the layer
            return
        plan = page_windows.resume(self.held, current)
        if isinstance(plan, page_windows.Reload):
            self.reloading = True
            await self.send(text_data=(await database_sync_to_async(self.build_reload)()).html)
            return
        rendered = [await self.render(seq, current[seq]) for seq in plan.seqs]
        for frame in fragments.pack(rendered):
            await self.push(frame)

    async def render(self, seq: int, blocks: int) -> fragments.Frame:
        """One message's frame, through the render cache (resyncs and events alike)."""
        key = (self.conversation_id, seq, blocks, self.vision, self.shape, self.view)
        return await frames.get(key, database_sync_to_async(lambda: self.build([seq])))

    def build(self, seqs: Sequence[int]) -> fragments.Frame:
        """The frame of these messages, rendered (sync: runs in a worker thread)."""
        return fragments.messages_frame(
            self.conversation_id, seqs, self.vision, self.shape, self.view
        )

    def build_reload(self) -> fragments.Frame:
        """The "reload your window" frame (sync: runs in a worker thread)."""
        return fragments.reload_frame(self.conversation_id, self.vision, self.shape)

    async def refreshed(self) -> None:
        await self.resync()

    async def conversation_message_added(self, event: events.MessageAdded) -> None:
        await self.changed((event["message_seq"], event["block_count"]))

    async def conversation_block_added(self, event: events.BlockAdded) -> None:
        await self.changed((event["message_seq"], event["block_seq"] + 1))

    async def conversation_changed(self, event: events.Changed) -> None:
        await self.changed(*((int(seq), int(blocks)) for seq, blocks in event["positions"]))

    async def changed(self, *positions: tuple[int, int]) -> None:
        """Messages now end at these (seq, block count) positions, in seq order."""
        # One change at a time per socket: the refresh task and event handlers interleave.
        async with self.lock:
            if self.reloading:
                return  # the client reports its window once it has loaded it
            wanted: list[tuple[int, int]] = []
            for seq, blocks in positions:
                if seq < self.first or self.held.get(seq, -1) >= blocks:
                    continue  # before the client's window, or already sent
                if not self.tail and seq >= self.first + self.span:
                    continue  # past a window away from the end: "Load later" brings it
                if (
                    seq > self.first
                    and seq - 1 not in self.held
                    and (not wanted or wanted[-1][0] != seq - 1)
                ):
                    await self._resync()  # an earlier message went missing in the layer
                    return
                wanted.append((seq, blocks))
            rendered = [await self.render(seq, blocks) for seq, blocks in wanted]
            for frame in fragments.pack(rendered):
                await self.push(frame)

    async def push(self, frame: fragments.Frame) -> None:
        """Send a frame unless it holds nothing newer than the client has."""
        if not any(self.held.get(seq, -1) < n for seq, n in frame.counts.items()):
            return
        await self.send(text_data=frame.html)
        for seq, n in frame.counts.items():
            self.held[seq] = max(self.held.get(seq, 0), n)
        if self.tail:
            # What the page keeps while it follows the tail: the last DOCUMENT messages.
            last = max(self.held)
            self.first = page_windows.trimmed(self.first, last)
            self.held = {seq: n for seq, n in self.held.items() if seq >= self.first}
            self.span = last - self.first + 1

    async def conversation_created(self, event: events.ConversationCreated) -> None:
        pass

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.shut(NOT_FOUND)


class ListConsumer(Watcher):
    """`/ws/conversations/`: new conversations and activity, for the list page."""

    def watched_groups(self) -> list[str]:
        return [events.LIST_GROUP]

    async def opened(self) -> None:
        # `since` is the page's position: what changed between its render and this socket
        # (joined to the group already) is sent now, so no row is lost in between.
        try:
            since = datetime.fromisoformat(self.query("since", ""))
        except ValueError:
            return
        if since.tzinfo is None:
            return
        html = await database_sync_to_async(fragments.rows_since)(since)
        if html:
            await self.send(text_data=html)

    async def conversation_created(self, event: events.ConversationCreated) -> None:
        await self.row(event["conversation_id"], "created")

    async def conversation_message_added(self, event: events.MessageAdded) -> None:
        await self.row(event["conversation_id"], event["message_seq"], event["block_count"])

    async def conversation_block_added(self, event: events.BlockAdded) -> None:
        # Name the state as message_added does: "message N has K blocks".
        await self.row(event["conversation_id"], event["message_seq"], event["block_seq"] + 1)

    async def conversation_changed(self, event: events.Changed) -> None:
        seq, blocks = event["positions"][-1]
        await self.row(event["conversation_id"], seq, blocks)

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.send(text_data=fragments.removed_row_html(event["conversation_id"]))

    async def row(self, conversation_id: str, *position: Any) -> None:
        key = ("row", conversation_id, *position)
        html = await rows.get(
            key, database_sync_to_async(lambda: fragments.row_html(conversation_id))
        )
        if html:
            await self.send(text_data=html)


share_sockets: Counter[int] = Counter()  # this process's open sockets, per share link


class ShareConsumer(ConversationConsumer):
    """`/ws/s/TOKEN/`: a share link's live updates (docs/contract.md §8), authorized by the token alone.

    No session, no user: the link decides. It is checked again every
    REPLAY_SHARE_RECHECK_SECONDS, at its expiry, on every group refresh, and at once on
    `share.revoked`; when it is gone the page is told so (the share notice partial) and the
    socket closes with 4410. A frozen link has no live updates; its socket is refused (so
    nothing past `up_to_seq` is ever sent). Frames carry the link's URLs and, for a link
    without images, no image URL.
    """

    token: str
    link: ShareLink
    watchdog: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        self.token = str(self.scope["url_route"]["kwargs"]["token"])
        try:
            query = ReplayOptions.from_query(
                {name: self.query(name, "") for name in ("vision", "shape") if self.query(name, "")}
            )
        except OptionError:
            await self.refuse(BAD_REQUEST)
            return
        link = await database_sync_to_async(fragments.share_link)(self.token)
        if link is None or not settings.REPLAY_SHARING:
            await self.refuse(NOT_FOUND)
            return
        if link.state(timezone.now()) != "active":
            await self.refuse(share_pages.SOCKET_GONE)
            return
        if link.frozen:
            await self.refuse(BAD_REQUEST)  # nothing past up_to_seq, and nothing live
            return
        # Per process, as the per-user cap: a link holder cannot open sockets without end.
        if share_sockets[link.pk] >= settings.REPLAY_MAX_SOCKETS_PER_SHARE:
            await self.refuse(TOO_MANY)
            return
        share_sockets[link.pk] += 1
        self.link = link
        options = share_pages.options(link, query)
        self.conversation_id = str(link.conversation_id)
        self.vision, self.shape = options.vision, options.shape
        self.groups_joined = [events.share_group(link.pk), *self.watched_groups()]
        await self.join()
        await self.accept()
        self.refresher = asyncio.ensure_future(self.refresh_groups())
        self.watchdog = asyncio.ensure_future(self.watch())
        await self.opened()

    async def watch(self) -> None:
        """Check the link every few seconds (and at its expiry): the fallback for a
        `share.revoked` event the layer lost, and how expiry is noticed."""
        while not self.closing:
            wait = float(settings.REPLAY_SHARE_RECHECK_SECONDS)
            if self.link.expires_at is not None:
                until = (self.link.expires_at - timezone.now()).total_seconds()
                wait = max(0.0, min(wait, until))
            await asyncio.sleep(wait)
            try:
                if not await self.recheck(("share",)):
                    return
            except Exception as exc:
                log.warning("closing a share socket whose check failed: %s", exc)
                await self.shut(1011)
                return

    async def recheck(self, reason: tuple[Any, ...]) -> bool:
        """The link, not a session: close (saying why) and answer False once it is gone."""
        state = await database_sync_to_async(fragments.share_state)(self.link.pk)
        if state == "active":
            return True
        await self.gone(state)
        return False

    async def gone(self, state: str) -> None:
        """Tell the page the link is gone (revoked, expired or deleted), then close."""
        if self.closing:
            return
        self.closing = True
        await self.send(text_data=await database_sync_to_async(fragments.share_notice)(state))
        await self.close(code=share_pages.SOCKET_GONE)

    async def share_revoked(self, event: events.ShareRevoked) -> None:
        await self.gone("revoked")

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.gone("deleted")

    async def disconnect(self, code: int) -> None:
        self.closing = True
        if self.watchdog is not None:
            self.watchdog.cancel()
        link = getattr(self, "link", None)
        if link is not None:
            share_sockets[link.pk] -= 1
            if share_sockets[link.pk] <= 0:
                del share_sockets[link.pk]
        await super().disconnect(code)

    async def render(self, seq: int, blocks: int) -> fragments.Frame:
        # Keyed by the link too: its frames hold its own URLs (and maybe no images).
        key = ("share", self.link.pk, seq, blocks, self.vision, self.shape)
        return await frames.get(key, database_sync_to_async(lambda: self.build([seq])))

    def build(self, seqs: Sequence[int]) -> fragments.Frame:
        with share_pages.scoped_urls(self.token):
            return fragments.messages_frame(
                self.conversation_id,
                seqs,
                self.vision,
                self.shape,
                images=self.link.images,
                share=True,
            )

    def build_reload(self) -> fragments.Frame:
        with share_pages.scoped_urls(self.token):
            return fragments.reload_frame(self.conversation_id, self.vision, self.shape)
