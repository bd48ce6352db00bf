"""What the live sockets take from channels beyond its documented API, kept here alone
(guarded by tests/test_internals.py, which fails on an upgrade that changes it).

`AsyncConsumer.__call__` hands every message (the client's and the layer's) to
`self.dispatch`, which channels documents only by example. Replay overrides it for two
reasons: channels closes stale database connections before every handler, a thread hop per
socket per event, while these consumers reach the database only through
`database_sync_to_async`, which does that itself; and a socket closed by the server drops
the events (and resume reports) queued before its close instead of answering them.
"""

from __future__ import annotations

from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer


class LiveConsumer(AsyncWebsocketConsumer):
    """A WebSocket consumer whose handlers run without the per-message connection check,
    and which hears nothing but its disconnect once `closing` is set."""

    closing = False  # closed (or closing) by us: events that arrive now are dropped

    async def dispatch(self, message: dict[str, Any]) -> None:
        if self.closing and message["type"] != "websocket.disconnect":
            return  # an event (or resume report) queued before this socket was closed
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
