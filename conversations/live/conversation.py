"""`/ws/conversations/ID/`: every message and block added to one conversation, pushed as
the page's own partials (docs/contract.md §4). What the client holds is a
`socket_window.HeldWindow`; the process's fan-out (`live/fanout.py`) hands it the
conversation's changes, and this consumer reads, renders and sends what it needs on its own
(a resume, a resync, a change it was too busy to take with the others)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Hashable, Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from conversations.alerts import reads as alert_reads
from conversations.core import bursts, page_windows, replay
from conversations.core.counting import context_windows
from conversations.core.options import OptionError
from conversations.core.socket_window import CLIENT_BYTES, HeldWindow, RefusedReport, parse_report
from conversations.live import access, fragments
from conversations.live.fanout import Fanout, fanout
from conversations.live.internals import Shared
from conversations.live.render_cache import batches, frames, notes
from conversations.live.watcher import BAD_REQUEST, NOT_FOUND, RETRY, Watcher
from conversations.record import events

log = logging.getLogger(__name__)


class ConversationConsumer(Watcher):
    """One conversation's socket: the page's messages, kept current."""

    conversation_id: str
    vision: bool
    shape: replay.Shape
    view: tuple[tuple[str, str], ...] = ()  # the pressure view's model/window overrides
    hub: Fanout | None = None  # the fan-out delivering to it, once it is open
    catching_up: asyncio.Task[None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window = HeldWindow()
        # One change at a time per socket: the fan-out, the refresh task and the client's
        # reports interleave.
        self.lock = asyncio.Lock()
        self.behind = bursts.Positions()  # changes it was too busy to take with the others
        # A page says in its socket's URL (`report=1`) that it reports what it holds as
        # soon as the socket opens (replay-live.js). Until that report, changes wait on the
        # socket's own path: sent before it, a change after a message the page lacks would
        # reach the page before the resync brings that message (a reconnect after the
        # layer lost events). A socket opened without `report=1` takes changes at once.
        self.reported = asyncio.Event()

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

    def view_key(self) -> Hashable:
        """What its frames' bytes depend on: sockets with the same key share frames."""
        return (self.conversation_id, self.vision, self.shape, self.view)

    async def opened(self) -> None:
        # Read after subscribing: whatever commits from now on is delivered to this socket
        # (held back by the lock until its window is known), and everything before is the
        # client's page (or its resume report). A page holds at most the last DOCUMENT
        # messages, so that is all this reads.
        async with self.lock:
            self.hub = fanout()
            await self.hub.subscribe(self)
            first, held = await database_sync_to_async(fragments.tail_counts)(self.conversation_id)
            self.window.opened(first, held)
            if self.query("report", "") != "1":
                self.reported.set()  # it holds the page as rendered now, or reports later

    async def join(self) -> None:
        await super().join()
        if self.hub is not None:  # a refresh: the layer may have forgotten the process
            await self.hub.subscribe(self)

    async def release(self) -> None:
        await super().release()
        if self.catching_up is not None:
            self.catching_up.cancel()
        hub, self.hub = self.hub, None
        if hub is not None:
            await hub.unsubscribe(self)

    def ready(self) -> bool:
        """Free to take a change with the others of its view now: open, its page's resume
        report heard (or not awaited any longer), not busy, and with nothing of its own
        still to catch up."""
        return (
            self.hub is not None
            and self.reported.is_set()
            and not self.lock.locked()
            and not self.behind
        )

    def fall_behind(self, positions: Sequence[tuple[int, int]]) -> None:
        """Take these positions on its own path, after whatever it is busy with."""
        self.behind.add(positions)
        if self.catching_up is None:
            self.catching_up = asyncio.ensure_future(self.catch_up())

    async def catch_up(self) -> None:
        try:
            if not self.reported.is_set():
                try:
                    # REPLAY_REPORT_WAIT_SECONDS: then RETRY, and the client reports again.
                    wait = float(settings.REPLAY_REPORT_WAIT_SECONDS)
                    await asyncio.wait_for(self.reported.wait(), wait)
                except TimeoutError:
                    log.info("closing a socket whose resume report did not come")
                    await self.close(code=RETRY)
                    return
            while self.behind and not self.closing:
                async with self.lock:
                    await self._changed(self.behind.take())
        except Exception as exc:  # the client reconnects and resumes from the database
            log.warning("closing a socket that could not catch up: %s: %s", type(exc).__name__, exc)
            await self.close(code=RETRY)
        finally:
            self.catching_up = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """A resume report (`socket_window.parse_report`): what the client misses is sent
        from the database; anything else is ignored, and a message no page sends (over
        CLIENT_BYTES, more than a window) closes the socket with 4400 (docs/contract.md §4)."""
        if bytes_data is not None and len(bytes_data) > CLIENT_BYTES:
            await self.shut(BAD_REQUEST)
            return
        try:
            report = parse_report(text_data or "")
        except RefusedReport as refused:
            log.info("closing a socket that sent %s", refused)
            await self.shut(BAD_REQUEST)
            return
        if report is None:
            return
        async with self.lock:
            self.window.reported(report)
            await self._resync()
        self.reported.set()

    async def resync(self) -> None:
        async with self.lock:
            await self._resync()

    async def _resync(self) -> None:
        if self.window.reloading:
            return  # the client is fetching its window over HTTP and reports after
        current = await database_sync_to_async(fragments.block_counts_between)(
            self.conversation_id, self.window.resync_span()
        )
        if current is None:
            await self.shut(NOT_FOUND)  # deleted, and its event went missing in the layer
            return
        plan = page_windows.resume(self.window.held, current)
        if isinstance(plan, page_windows.Reload):
            self.window.reloading = True
            await self.send(text_data=(await database_sync_to_async(self.build_reload)()).html)
            return
        rendered = [await self.render(seq, current[seq]) for seq in plan.seqs]
        for frame in fragments.pack(rendered):
            await self.push(frame)

    async def render(self, seq: int, blocks: int) -> fragments.Frame:
        """One message's frame, through the render cache (resyncs and events alike)."""
        key = (self.view_key(), seq, blocks)
        return await frames.get(key, database_sync_to_async(lambda: self.build([seq])))

    async def frames(self, wanted: Sequence[tuple[int, int]]) -> list[fragments.Frame]:
        """The frames bringing these (seq, block count) positions, rendered once per view:
        several messages in one rendering (one count of the totals and the pressure) when
        it fits in a frame."""
        if len(wanted) == 1:
            return [await self.render(*wanted[0])]
        key = (self.view_key(), tuple(wanted))
        return await batches.get(key, lambda: self.render_batch(wanted))

    async def render_batch(self, wanted: Sequence[tuple[int, int]]) -> list[fragments.Frame]:
        whole = await database_sync_to_async(self.build)([seq for seq, _ in wanted])
        if len(whole.html.encode()) <= page_windows.FRAME_BYTES:
            return [whole]
        return fragments.pack([await self.render(seq, blocks) for seq, blocks in wanted])

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

    async def conversation_created(self, event: events.ConversationCreated) -> None:
        pass

    async def conversation_message_added(self, event: events.MessageAdded) -> None:
        await self.changed((event["message_seq"], event["block_count"]))

    async def conversation_block_added(self, event: events.BlockAdded) -> None:
        await self.changed((event["message_seq"], event["block_seq"] + 1))

    async def conversation_changed(self, event: events.Changed) -> None:
        await self.changed(*((int(seq), int(blocks)) for seq, blocks in event["positions"]))

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.shut(NOT_FOUND)

    async def conversation_note_changed(self, event: events.NoteChanged) -> None:
        """A message's notes changed (docs/contract.md §10): its notes partial, rendered once
        per change; message frames rendered before it are not reused."""
        frames.forget_before(event["change"])
        batches.forget_before(event["change"])
        seq = event["message_seq"]
        html = await notes.get(
            self.notes_key(seq, event["change"]),
            database_sync_to_async(lambda: self.build_notes(seq)),
        )
        if html:
            async with self.lock:
                await self.send(text_data=html)

    def notes_key(self, seq: int, change: str) -> tuple[object, ...]:
        return ("notes", self.conversation_id, seq, change)

    def build_notes(self, seq: int) -> str:
        return fragments.notes_frame(self.conversation_id, seq)

    async def conversation_alerts_changed(self, event: events.AlertsChanged) -> None:
        """An alert fired or was acknowledged: the header's alerts, rendered again, with the
        acknowledge buttons only for a user who holds the permission now."""
        html = await database_sync_to_async(self.build_alerts)()
        await self.send(text_data=html)

    def build_alerts(self) -> str:
        acknowledge = access.has_permission(self.user_id, alert_reads.ACKNOWLEDGE_PERMISSION)
        return fragments.alerts_html(self.conversation_id, acknowledge=acknowledge)

    async def changed(self, *positions: tuple[int, int]) -> None:
        """Messages now end at these (seq, block count) positions, in seq order."""
        async with self.lock:
            await self._changed(positions)

    async def _changed(self, positions: Sequence[tuple[int, int]]) -> None:
        if self.window.reloading or self.closing:
            return  # the client reports its window once it has loaded it
        wanted = self.window.wanted(positions)
        if wanted is None:
            await self._resync()  # an earlier message went missing in the layer
            return
        if wanted:
            for frame in await self.frames(wanted):
                await self.push(frame)

    def push_now(self, frame: fragments.Frame, shared: Shared) -> bool:
        """`push` without awaiting (so without the lock: nothing can interleave), when the
        socket is free and daphne's protocol takes the bytes; False: `push` instead."""
        if not self.ready():
            return False
        if not self.window.newer(frame.counts):
            return True
        if not self.write_shared(shared):
            return False
        self.window.sent(frame.counts)
        return True

    async def push(self, frame: fragments.Frame, shared: Shared | None = None) -> None:
        """Send a frame unless it holds nothing newer than the client has (`shared`: its
        bytes, prepared once for every socket of the view)."""
        if not self.window.newer(frame.counts):
            return
        if shared is None:
            await self.send(text_data=frame.html)
        else:
            await self.send_shared(shared)
        self.window.sent(frame.counts)
