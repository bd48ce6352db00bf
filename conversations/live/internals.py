"""What the live sockets take from channels and daphne beyond their documented APIs, kept
here alone (guarded by tests/live/test_internals.py, which fails on an upgrade that changes it).

`AsyncConsumer.__call__` hands every message (the client's and the layer's) to
`self.dispatch`, which channels documents only by example. Replay overrides it for two
reasons: channels closes stale database connections before every handler, a thread hop per
socket per event, while these consumers reach the database only through
`database_sync_to_async`, which does that itself; and a socket closed by the server drops
the events (and resume reports) queued before its close instead of answering them.

daphne hands each connection's application `functools.partial(server.handle_reply,
protocol)` as its ASGI `send`, where `protocol` is autobahn's WebSocket protocol. `Wire`,
the websocket app's outermost middleware, finds that protocol so that the fan-out can write one
frame, framed once (autobahn's documented `PreparedMessage` for broadcasts), to every socket
of a view: the same bytes, without the per-socket encoding and the trip through the ASGI
send. When autobahn queues nothing for the connection, the bytes go to its transport as its
own `sendData` would write them, without the debug line autobahn formats (in colour) for
every write: at a thousand sockets that formatting cost more than the writes. Anywhere
else (channels' test communicator, another server) frames go through the ASGI send as
usual. `Wire` also turns off autobahn's `failByDrop` on that protocol, so that a client's
frame over daphne's cap closes with 1009 rather than a dropped connection.
"""

from __future__ import annotations

import functools
from typing import Any

from autobahn.websocket.protocol import PreparedMessage, WebSocketProtocol
from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from twisted.internet import tcp

from conversations.record import metrics

WIRE = "replay.wire"  # the scope key of daphne's protocol for this connection, if any


def wire_of(send: Any) -> WebSocketProtocol | None:
    """daphne's protocol behind its ASGI `send`, or None when the server is not daphne."""
    if not isinstance(send, functools.partial) or len(send.args) != 1:
        return None
    if getattr(send.func, "__name__", "") != "handle_reply":
        return None
    protocol = send.args[0]
    return protocol if isinstance(protocol, WebSocketProtocol) else None


class Wire:
    """ASGI middleware (outermost, websockets): puts daphne's protocol in the scope."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        wire = wire_of(send)
        if wire is not None:
            # A frame over daphne's cap (--websocket-max-frame-size) is refused with a
            # 1009 close the page can read, not by dropping the TCP connection (autobahn's
            # default; daphne has no option for it). `failByDrop` is autobahn's documented
            # protocol option, read when a connection fails: set before any client frame.
            wire.failByDrop = False  # type: ignore[attr-defined]  # set from the factory
        return await self.inner(dict(scope, **{WIRE: wire}), receive, send)


def write_now(transport: Any, data: bytes) -> None:
    """`transport.write(data)`, sent to the socket at once when the transport is an open TCP
    connection with nothing buffered; whatever the socket does not take (or everything, on an
    error: the loop then finds the connection lost) is buffered as `write` buffers it."""
    if (
        isinstance(transport, tcp.Connection)
        and transport.connected
        and not transport.disconnecting
        and not transport._writeDisconnected
        and not transport._tempDataLen
        and transport.offset == len(transport.dataBuffer)
    ):
        written = transport.writeSomeData(data)
        if isinstance(written, int):  # else the connection is lost: the loop will say so
            data = data[written:]
    if data:
        transport.write(data)


class Shared:
    """One frame's text for many sockets: encoded and framed at most once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._prepared: PreparedMessage | None = None

    @property
    def prepared(self) -> PreparedMessage:
        if self._prepared is None:
            # Server frames are not masked; never compressed, so every socket gets these
            # bytes (an uncompressed frame is valid on a connection that negotiated it).
            self._prepared = PreparedMessage(self.text.encode(), False, False, True)
        return self._prepared


class LiveConsumer(AsyncWebsocketConsumer):
    """A WebSocket consumer whose handlers run without the per-message connection check,
    and which hears nothing but its disconnect once `closing` is set."""

    closing = False  # closed (or closing) by us: events that arrive now are dropped

    def write_shared(self, frame: Shared) -> bool:
        """Write a frame many sockets share, its prepared bytes straight to daphne's
        protocol, without awaiting anything; False when there is no open protocol to write
        to (then `send_shared`)."""
        wire = self.scope.get(WIRE)
        if not isinstance(wire, WebSocketProtocol) or wire.state != WebSocketProtocol.STATE_OPEN:
            return False
        if wire.send_queue:  # autobahn is pacing this connection's writes: keep their order
            wire.sendPreparedMessage(frame.prepared)
        else:  # what sendPreparedMessage does, without formatting a debug line per socket
            write_now(wire.transport, frame.prepared.payloadHybi)  # type: ignore[attr-defined]
        metrics.FRAMES.inc()
        return True

    async def send_shared(self, frame: Shared) -> None:
        """Send a frame many sockets share: straight to daphne's protocol when open, else
        through the ASGI send."""
        if not self.write_shared(frame):
            await self.send(text_data=frame.text)

    async def send(  # type: ignore[override]
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        if text_data is not None or bytes_data is not None:
            metrics.FRAMES.inc()
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)

    async def dispatch(self, message: dict[str, Any]) -> None:
        if self.closing and message["type"] != "websocket.disconnect":
            return  # an event (or resume report) queued before this socket was closed
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)
