"""`/ws/conversations/ID/`: every message and block added to one conversation, pushed as
the page's own partials (docs/contract.md §4). What the client holds is a
`socket_window.HeldWindow`; this consumer reads, renders and sends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from channels.db import database_sync_to_async

from conversations.core import context_windows, page_windows, replay
from conversations.core.options import OptionError
from conversations.core.socket_window import HeldWindow, parse_report
from conversations.live import fragments
from conversations.live.render_cache import frames, notes
from conversations.live.watcher import BAD_REQUEST, NOT_FOUND, Watcher
from conversations.record import events


class ConversationConsumer(Watcher):
    """One conversation's socket: the page's messages, kept current."""

    conversation_id: str
    vision: bool
    shape: replay.Shape
    view: tuple[tuple[str, str], ...] = ()  # the pressure view's model/window overrides

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window = HeldWindow()
        # One change at a time per socket: the refresh task and event handlers interleave.
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

    def watched_groups(self) -> list[str]:
        return [events.conversation_group(self.conversation_id)]

    async def opened(self) -> None:
        # Read after joining the group: whatever commits from now on is announced to this
        # socket, and everything before is the client's page (or its resume report). A page
        # holds at most the last DOCUMENT messages, so that is all this reads.
        first, held = await database_sync_to_async(fragments.tail_counts)(self.conversation_id)
        self.window.opened(first, held)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """A resume report (`socket_window.parse_report`): what the client misses is sent
        from the database; anything else is ignored."""
        report = parse_report(text_data or "")
        if report is None:
            return
        async with self.lock:
            self.window.reported(report)
            await self._resync()

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
        """An alert fired or was acknowledged: the header's alerts, rendered again."""
        html = await database_sync_to_async(fragments.alerts_html)(self.conversation_id)
        await self.send(text_data=html)

    async def changed(self, *positions: tuple[int, int]) -> None:
        """Messages now end at these (seq, block count) positions, in seq order."""
        async with self.lock:
            if self.window.reloading:
                return  # the client reports its window once it has loaded it
            wanted = self.window.wanted(positions)
            if wanted is None:
                await self._resync()  # an earlier message went missing in the layer
                return
            rendered = [await self.render(seq, blocks) for seq, blocks in wanted]
            for frame in fragments.pack(rendered):
                await self.push(frame)

    async def push(self, frame: fragments.Frame) -> None:
        """Send a frame unless it holds nothing newer than the client has."""
        if not self.window.newer(frame.counts):
            return
        await self.send(text_data=frame.html)
        self.window.sent(frame.counts)
