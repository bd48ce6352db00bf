"""Events (docs/architecture.md, small events after commit): told to the channel layer after commit,
small and typed, and never in the way of ingest when the layer is down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers, get_channel_layer
from django.conf import settings as django_settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save

from conversations.record import events
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.tokens import ApiToken, IdempotentResponse
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import block_append, message_append
from conversations.record.services.conversations import conversation_create
from tests import services as reachable_services
from tests.conftest import free_port

pytestmark = pytest.mark.django_db(transaction=True)

QUIET = 0.3  # seconds of silence that count as "nothing arrives"


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    # Layers are cached per process; each test gets its own (and its own event loop).
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


class Member:
    """A channel in a group of the layer, as a consumer would be."""

    def __init__(self, layer: Any, channel: str) -> None:
        self.layer = layer
        self.channel = channel

    @classmethod
    async def join(cls, *groups: str) -> Member:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        for group in groups:
            await layer.group_add(group, channel)
        return cls(layer, channel)

    async def next(self, seconds: float = 2.0) -> dict[str, Any]:
        async with asyncio.timeout(seconds):
            return dict(await self.layer.receive(self.channel))

    async def nothing(self, seconds: float = QUIET) -> bool:
        try:
            message = await self.next(seconds)
        except TimeoutError:
            return True
        pytest.fail(f"unexpected event {message}")


def block(value: dict[str, Any]) -> Any:
    return BLOCK_ADAPTER.validate_python(value)


def text(value: str) -> Any:
    return block({"type": "text", "text": value})


def append(conversation: Conversation, *values: str) -> Message:
    message, _ = message_append(
        conversation=conversation, role="user", blocks=[text(v) for v in values]
    )
    return message


def assert_small(event: dict[str, Any]) -> None:
    for key, value in event.items():
        assert isinstance(value, str | int) and not isinstance(value, bool), key
        assert "<" not in str(value), f"{key} carries markup"


# -- after commit, small and typed ------------------------------------------------------------


def test_each_service_announces_one_small_event_after_commit() -> None:
    async def body() -> None:
        everything = await Member.join(events.LIST_GROUP)
        conversation = await sync_to_async(conversation_create)(title="<b>t</b>")
        cid = str(conversation.id)
        assert await everything.next() == {"type": "conversation.created", "conversation_id": cid}
        page = await Member.join(events.conversation_group(cid))

        message = await sync_to_async(append)(conversation, "<p>one</p>", "two")
        added = {
            "type": "conversation.message_added",
            "conversation_id": cid,
            "message_seq": 0,
            "block_count": 2,
        }
        assert await page.next() == added
        assert await everything.next() == added

        await sync_to_async(block_append)(message=message, block=text("three"))
        grown = {
            "type": "conversation.block_added",
            "conversation_id": cid,
            "message_seq": 0,
            "block_seq": 2,
        }
        assert await page.next() == grown
        assert await everything.next() == grown
        for event in (added, grown):
            assert_small(event)
        assert await page.nothing()
        assert await everything.nothing()

    async_to_sync(body)()


def test_a_rolled_back_append_announces_nothing() -> None:
    conversation = conversation_create(title="Rollback")

    def failing_append() -> None:
        with transaction.atomic():
            append(conversation, "never stored")
            raise Boom

    async def body() -> None:
        everything = await Member.join(events.LIST_GROUP)
        page = await Member.join(events.conversation_group(conversation.id))
        with pytest.raises(Boom):
            await sync_to_async(failing_append)()
        assert await page.nothing()
        assert await everything.nothing()
        # The next append that commits is announced, once, with the seq the failed one did
        # not take.
        await sync_to_async(append)(conversation, "stored")
        for member in (page, everything):
            event = await member.next()
            assert event["type"] == "conversation.message_added"
            assert event["message_seq"] == 0
            assert await member.nothing()

    async_to_sync(body)()
    assert list(Message.objects.filter(conversation=conversation).values_list("seq")) == [(0,)]


def test_an_event_waits_for_the_outermost_commit() -> None:
    conversation = conversation_create(title="Nested")

    async def body() -> None:
        page = await Member.join(events.conversation_group(conversation.id))

        def append_inside_a_larger_transaction() -> None:
            with transaction.atomic():
                message = append(conversation, "first")
                block_append(message=message, block=text("second"))
                # The services' own atomic blocks have ended, the outer one has not: a
                # watcher must not hear of rows another connection cannot see yet.
                assert async_to_sync(page.nothing)()

        await sync_to_async(append_inside_a_larger_transaction)()
        # Committed: both adds, in order, each as it is, or as one `conversation.changed`
        # when the second queued while the first was being sent.
        first = await page.next()
        if first["type"] == "conversation.changed":
            assert first["positions"] == [[0, 2]]
        else:
            assert (first["type"], first["message_seq"], first["block_count"]) == (
                "conversation.message_added",
                0,
                1,
            )
            second = await page.next()
            assert (second["type"], second["message_seq"], second["block_seq"]) == (
                "conversation.block_added",
                0,
                1,
            )
        assert await page.nothing()

    async_to_sync(body)()


def test_refused_ingest_announces_nothing(api: Any) -> None:
    conversation = conversation_create(title="Refused")

    async def body() -> None:
        everything = await Member.join(events.LIST_GROUP)
        page = await Member.join(events.conversation_group(conversation.id))
        # An assistant message may not carry an image: 400, nothing stored, nothing told.
        response = await sync_to_async(api.post)(
            f"/api/conversations/{conversation.id}/messages",
            {
                "role": "assistant",
                "blocks": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgo="},
                ],
            },
        )
        assert response.status_code == 400
        assert await page.nothing()
        assert await everything.nothing()

    async_to_sync(body)()
    assert not Message.objects.filter(conversation=conversation).exists()


def test_no_model_signal_receivers_broadcast_domain_events() -> None:
    for model in (Conversation, Message, Block, ApiToken, IdempotentResponse):
        for signal in (pre_save, post_save, post_delete):
            assert not signal.has_listeners(model), f"{signal} has receivers for {model}"


# -- a channel layer that is down ------------------------------------------------------------


def use_redis_layer(settings: Any, url: str, **config: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [url], **config},
        }
    }
    channel_layers.backends = {}


class SilentServer:
    """Accepts TCP connections and never answers: a hanging Redis."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        for connection in self.accepted:
            connection.close()
        self.thread.join(2)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def post_message(api: Any, conversation: Conversation, value: str) -> tuple[Any, float]:
    started = time.monotonic()
    response = api.post(
        f"/api/conversations/{conversation.id}/messages",
        {"role": "user", "blocks": [{"type": "text", "text": value}]},
    )
    return response, time.monotonic() - started


def assert_logged(caplog: pytest.LogCaptureFixture, conversation: Conversation) -> None:
    records = [r for r in caplog.records if r.name == "conversations.record.events"]
    assert records, "the failed broadcast was not logged"
    assert any(
        r.levelno >= logging.WARNING
        and "conversation.message_added" in r.getMessage()
        and str(conversation.id) in r.getMessage()
        for r in records
    ), [r.getMessage() for r in records]


def test_ingest_answers_201_and_logs_when_redis_refuses(
    api: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conversation = conversation_create(title="Refused layer")
    use_redis_layer(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    caplog.set_level(logging.WARNING, logger="conversations.record.events")

    response, elapsed = post_message(api, conversation, "kept")

    assert response.status_code == 201
    assert elapsed < 2
    assert [b.text for b in Block.objects.filter(message__conversation=conversation)] == ["kept"]
    assert_logged(caplog, conversation)


def test_ingest_answers_201_within_the_broadcast_timeout_when_redis_hangs(
    api: Any, settings: Any, caplog: pytest.LogCaptureFixture, silent_server: SilentServer
) -> None:
    conversation = conversation_create(title="Hanging layer")
    use_redis_layer(settings, f"redis://127.0.0.1:{silent_server.port}/0")
    caplog.set_level(logging.WARNING, logger="conversations.record.events")

    response, elapsed = post_message(api, conversation, "kept")

    assert response.status_code == 201
    # The margin is for a loaded 2-core machine; without the timeout this would never end.
    assert elapsed < django_settings.REPLAY_BROADCAST_TIMEOUT + 2.5
    assert silent_server.accepted, "the layer never tried the hanging server"
    assert [b.text for b in Block.objects.filter(message__conversation=conversation)] == ["kept"]
    assert_logged(caplog, conversation)
    assert any("did not answer in 500 ms" in r.getMessage() for r in caplog.records)


def test_events_cross_a_real_redis_layer(settings: Any) -> None:
    url = reachable_services.redis_url()
    if url is None:
        if reachable_services.required():
            pytest.fail("Redis is not reachable and REPLAY_REQUIRE_SERVICES=1")
        pytest.skip("Redis is not reachable")
    # A private prefix: other test runs may share this Redis.
    use_redis_layer(settings, url, prefix=f"replay-test-{free_port()}")
    conversation = conversation_create(title="Through Redis")

    async def body() -> None:
        page = await Member.join(events.conversation_group(conversation.id))
        await sync_to_async(append)(conversation, "over the wire")
        event = await page.next()
        assert event == {
            "type": "conversation.message_added",
            "conversation_id": str(conversation.id),
            "message_seq": 0,
            "block_count": 1,
        }

    async_to_sync(body)()


def test_the_embedded_layer_is_channels_in_memory_layer_tidied_once_a_second() -> None:
    from channels.layers import InMemoryChannelLayer

    from conversations.live.layers import ThrottledInMemoryChannelLayer

    layer = ThrottledInMemoryChannelLayer(expiry=0)
    assert isinstance(layer, InMemoryChannelLayer)

    async def body() -> None:
        await layer.group_add("g", "a!1")
        await layer.send("a!1", {"type": "x"})  # expires at once (expiry=0)
        layer._clean_expired()  # the first clean runs…
        assert "a!1" not in layer.groups.get("g", {})
        await layer.group_add("g", "a!1")
        await layer.send("a!1", {"type": "y"})
        layer._clean_expired()  # …a second one within the interval does not
        assert "a!1" in layer.groups["g"]

    asyncio.run(body())


def test_the_outbox_stops_when_cancelled_though_the_layer_swallows_the_cancellation(
    monkeypatch: Any,
) -> None:
    """A loop that closes cancels its outbox mid-send; a layer client that turns that
    into an error of its own must not leave the outbox waiting for the next event (the
    loop's close would wait for it forever)."""
    started: dict[str, asyncio.Event] = {}  # the send under way, per run (an Event is per loop)

    async def raising(groups: list[str], message: dict[str, Any]) -> None:
        started["send"].set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise ConnectionError("connection closed") from None

    async def swallowing(groups: list[str], message: dict[str, Any]) -> None:
        started["send"].set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)

    async def body() -> None:
        started["send"] = asyncio.Event()
        outbox = events.Outbox(asyncio.get_running_loop())
        outbox.put((["g"], {"type": "share.revoked", "share_id": 1}, None))
        await asyncio.wait_for(started["send"].wait(), 2)
        outbox.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(outbox.task, 2)

    for send in (raising, swallowing):
        monkeypatch.setattr(events, "_send", send)
        asyncio.run(body())
