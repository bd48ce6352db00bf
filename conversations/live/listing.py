"""`/ws/conversations/`: new conversations and activity, pushed as the list page's rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async

from conversations.live import fragments
from conversations.live.render_cache import rows
from conversations.live.watcher import Watcher
from conversations.record import events


class ListConsumer(Watcher):
    """The list page's socket: one fresh row per conversation that changed."""

    metrics_kind = "list"

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

    async def conversation_alerts_changed(self, event: events.AlertsChanged) -> None:
        await self.row(event["conversation_id"], "alerts", event["alert_id"], event["change"])

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.send(text_data=fragments.removed_row_html(event["conversation_id"]))

    async def conversation_note_changed(self, event: events.NoteChanged) -> None:
        # A note's labels show on the row (docs/contract.md §10).
        await self.row(event["conversation_id"], "note", event["change"])

    async def row(self, conversation_id: str, *position: Any) -> None:
        key = ("row", conversation_id, *position)
        html = await rows.get(
            key, database_sync_to_async(lambda: fragments.row_html(conversation_id))
        )
        if html:
            await self.send(text_data=html)
