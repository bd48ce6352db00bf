"""The framework internals Replay leans on, one guard each: an upgrade of asgiref, channels
or Django that changes one fails here, by name, rather than quietly in production.

- asgiref's `SyncToAsync.threadlocal` (conversations/record/server_loop.py): how a sync
  view's publish finds the server's event loop and its outbox.
- channels' `InMemoryChannelLayer._clean_expired` (conversations/live/layers.py): the
  embedded layer's expiry walk, throttled to once a second.
- channels' `AsyncConsumer.dispatch` (conversations/live/internals.py): overridden to skip
  the per-message connection check and to drop events after a close.
- daphne's ASGI `send`, `partial(server.handle_reply, protocol)`, and autobahn's
  `PreparedMessage` and `sendData` (conversations/live/internals.py): a frame many sockets
  share is framed once and written to each socket's transport.
- Twisted's TCP `Connection` buffers (`dataBuffer`, `offset`, `_tempDataLen`) and its
  `writeSomeData` (conversations/live/internals.py `write_now`): such a frame goes to the
  socket at once when nothing waits before it.
- Django's `ASGIHandler.read_body` (replaysite/asgi.py): the bounded request body.
- Django's `SQLCompiler.as_sql` and `results_iter(results=…)`
  (conversations/record/reads/compiled.py):
  a read's SQL built once, its rows converted by the compiler that built it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync, sync_to_async
from channels.consumer import AsyncConsumer, get_handler_name
from channels.layers import InMemoryChannelLayer
from django.core.handlers.asgi import ASGIHandler

from conversations.live.internals import LiveConsumer
from conversations.record.server_loop import server_loop


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


# -- asgiref ------------------------------------------------------------------------------------


def test_asgiref_still_keeps_the_calling_loop_in_its_threadlocal() -> None:
    assert hasattr(SyncToAsync, "threadlocal")

    async def body() -> None:
        running = asyncio.get_running_loop()
        assert await sync_to_async(server_loop)() is running
        assert await sync_to_async(server_loop, thread_sensitive=False)() is running

    async_to_sync(body)()


def test_no_server_loop_outside_one() -> None:
    assert server_loop() is None


# -- channels -----------------------------------------------------------------------------------


def test_channels_in_memory_layer_still_cleans_through_clean_expired() -> None:
    assert parameters(InMemoryChannelLayer._clean_expired) == ["self"]
    for method in (InMemoryChannelLayer.receive, InMemoryChannelLayer.group_send):
        assert "self._clean_expired()" in inspect.getsource(method), method.__name__


def test_channels_still_hands_every_message_to_dispatch() -> None:
    assert parameters(AsyncConsumer.dispatch) == ["self", "message"]
    assert "self.dispatch" in inspect.getsource(AsyncConsumer.__call__)
    assert get_handler_name({"type": "conversation.block_added"}) == "conversation_block_added"


def test_a_closing_consumer_hears_only_its_disconnect() -> None:
    heard: list[str] = []

    class Probe(LiveConsumer):
        async def conversation_created(self, message: dict[str, Any]) -> None:
            heard.append(message["type"])

        async def websocket_disconnect(self, message: dict[str, Any]) -> None:
            heard.append(message["type"])

    async def body() -> None:
        probe = Probe()
        await probe.dispatch({"type": "conversation.created"})
        probe.closing = True
        await probe.dispatch({"type": "conversation.created"})
        await probe.dispatch({"type": "websocket.disconnect", "code": 1000})

    asyncio.run(body())
    assert heard == ["conversation.created", "websocket.disconnect"]


# -- daphne and autobahn ------------------------------------------------------------------------


def test_daphne_still_hands_the_application_its_protocol_in_send() -> None:
    from daphne.server import Server

    source = inspect.getsource(Server.create_application)
    assert "send=partial(self.handle_reply, protocol)" in source
    assert parameters(Server.handle_reply) == ["self", "protocol", "message"]


def test_the_wire_is_found_behind_daphnes_send_and_nowhere_else() -> None:
    import functools

    from autobahn.twisted.websocket import WebSocketServerProtocol

    from conversations.live.internals import wire_of

    class Server:
        async def handle_reply(self, protocol: Any, message: Any) -> None:
            pass

    protocol = WebSocketServerProtocol()
    assert wire_of(functools.partial(Server().handle_reply, protocol)) is protocol
    assert wire_of(functools.partial(Server().handle_reply, object())) is None
    assert wire_of(Server().handle_reply) is None  # channels' test communicator, say


def test_autobahn_still_fails_an_oversized_frame_by_its_protocols_fail_by_drop() -> None:
    # Wire sets `failByDrop` on the connection's protocol (a 1009 close, not a drop): it
    # must stay a per-connection option that failing a connection reads.
    from autobahn.websocket.protocol import WebSocketProtocol

    assert "failByDrop" in WebSocketProtocol.CONFIG_ATTRS_COMMON
    assert "self.failByDrop" in inspect.getsource(WebSocketProtocol._fail_connection)
    source = inspect.getsource(WebSocketProtocol.onMessageFrameBegin)
    assert "maxFramePayloadSize" in source and "_max_message_size_exceeded" in source


def test_a_prepared_frame_is_the_websocket_frame_autobahn_would_send() -> None:
    from autobahn.websocket.protocol import PreparedMessage, WebSocketProtocol

    from conversations.live.internals import Shared

    assert parameters(PreparedMessage.__init__) == [
        "self", "payload", "isBinary", "applyMask", "doNotCompress"
    ]  # fmt: skip
    assert parameters(WebSocketProtocol.sendPreparedMessage) == ["self", "preparedMsg"]
    # Written as sendData writes an uncompressed prepared frame when nothing is queued.
    send_data = inspect.getsource(WebSocketProtocol.sendData)
    assert "len(self.send_queue) > 0" in send_data and "self.transport.write(data)" in send_data
    assert "preparedMsg.doNotCompress" in inspect.getsource(WebSocketProtocol.sendPreparedMessage)
    text = "<article>é</article>" * 20  # 420 bytes: a 16-bit extended length
    frame = Shared(text).prepared.payloadHybi
    payload = text.encode()
    assert frame == bytes([0x81, 126]) + len(payload).to_bytes(2, "big") + payload


# -- Twisted ------------------------------------------------------------------------------------


def connection_pair() -> tuple[Any, Any, Any]:
    """A real Twisted TCP connection over a real socket pair, on a reactor that is not
    running (its writers are the connections waiting to write): (connection, peer,
    reactor)."""
    import socket

    from twisted.internet import protocol, selectreactor, tcp

    ours, peer = socket.socketpair()
    reactor = selectreactor.SelectReactor()
    connection = tcp.Connection(ours, protocol.Protocol(), reactor=reactor)
    connection.connected = True
    return connection, peer, reactor


def received(peer: Any) -> bytes:
    peer.setblocking(False)
    chunks = []
    while True:
        try:
            chunk = peer.recv(1 << 20)
        except BlockingIOError:
            return b"".join(chunks)
        chunks.append(chunk)


def test_a_frame_goes_to_an_idle_socket_at_once_without_waiting_for_the_loop() -> None:
    from conversations.live.internals import write_now

    connection, peer, reactor = connection_pair()
    write_now(connection, b"frame one")
    assert received(peer) == b"frame one"
    assert connection not in reactor.getWriters()  # nothing left for the loop to write


def test_what_the_socket_does_not_take_is_buffered_and_every_byte_arrives_in_order() -> None:
    from conversations.live.internals import write_now

    connection, peer, reactor = connection_pair()
    big = bytes(range(256)) * 40_000  # 10 MB: more than the socket's buffers hold
    write_now(connection, big)
    assert connection in reactor.getWriters()  # the rest waits for the loop
    write_now(connection, b"after")  # behind what waits: buffered, not sent before it
    got = received(peer)
    while connection in reactor.getWriters():  # the loop's turns, by hand
        connection.doWrite()
        got += received(peer)
    assert got == big + b"after"


def test_a_lost_connection_is_left_to_the_loop_to_find() -> None:
    from conversations.live.internals import write_now

    connection, peer, reactor = connection_pair()
    peer.close()
    write_now(connection, b"x" * 1000)
    write_now(connection, b"x" * 1000)  # the first may have reached the kernel; not this
    assert connection in reactor.getWriters()  # doWrite will report the loss
    assert connection.doWrite() is not None


# -- Django -------------------------------------------------------------------------------------


def test_djangos_compiler_still_converts_rows_it_is_handed() -> None:
    from django.db.models.sql.compiler import SQLCompiler

    assert parameters(SQLCompiler.as_sql)[:1] == ["self"]
    assert parameters(SQLCompiler.results_iter)[:2] == ["self", "results"]
    source = inspect.getsource(SQLCompiler.results_iter)
    assert "if results is None:" in source and "self.apply_converters(" in source


def test_djangos_asgi_handler_still_reads_the_body_through_read_body() -> None:
    assert parameters(ASGIHandler.read_body) == ["self", "receive"]
    assert "self.read_body(receive)" in inspect.getsource(ASGIHandler.handle)


def test_the_bounded_handler_keeps_at_most_one_byte_past_the_limit(settings: Any) -> None:
    from replaysite.asgi import BoundedBodyASGIHandler

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    chunks = [{"type": "http.request", "body": b"x" * 8, "more_body": True}] * 3
    chunks.append({"type": "http.request", "body": b"", "more_body": False})

    async def body() -> bytes:
        queue = iter(chunks)

        async def receive() -> dict[str, Any]:
            return next(queue)

        kept = await BoundedBodyASGIHandler().read_body(receive)
        return bytes(kept.read())

    assert asyncio.run(body()) == b"x" * 11
