"""Share sockets (docs/contract.md §8): `/ws/s/TOKEN/`, authorized by the link alone, through the
real ASGI application; revocation and expiry close them within 10 s and the page is told."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_create, share_revoke
from replaysite.asgi import application
from tests.builders import png, text
from tests.live.test_consumers import add_block, append, articles, create, headers, in_loop

pytestmark = pytest.mark.django_db(transaction=True)
WAIT = 5
GONE = 4410


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Any:
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


def share_path(token: str, query: str = "vision=1&shape=openai") -> str:
    return f"/ws/s/{token}/?{query}"


@asynccontextmanager
async def share_socket(path: str) -> AsyncIterator[WebsocketCommunicator]:
    # No cookie at all: the token in the path is the only credential.
    communicator = WebsocketCommunicator(application, path, headers=headers(None))
    connected, code = await communicator.connect(timeout=WAIT)
    assert connected, f"{path} refused with {code}"
    try:
        yield communicator
    finally:
        await communicator.disconnect()


async def close_code(ws: WebsocketCommunicator) -> int:
    while True:
        output = await ws.receive_output(timeout=WAIT)
        if output["type"] == "websocket.close":
            return int(output.get("code", 1000))


async def refused_with(path: str) -> int:
    communicator = WebsocketCommunicator(application, path, headers=headers(None))
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected  # accepted, then closed with a code the page does not retry
    code = await close_code(communicator)
    await communicator.disconnect()
    return code


def make_share(conversation_id: Any, **options: Any) -> tuple[int, str]:
    from conversations.record.models.conversation import Conversation

    link, token = share_create(conversation=Conversation.objects.get(pk=conversation_id), **options)
    return link.pk, token


def share_page(token: str, query: str = "") -> str:
    response = Client().get(f"/s/{token}/{query}")
    assert response.status_code == 200
    return response.content.decode()


@in_loop
async def test_share_socket_gets_live_blocks_as_the_share_page_renders_them() -> None:
    conversation = await sync_to_async(create)()
    await sync_to_async(append)(conversation.id, "user", [text("first")])
    _, token = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)) as ws:
        seq = await sync_to_async(append)(conversation.id, "user", [text("second"), png()])
        frame = await ws.receive_from(timeout=WAIT)
        pushed = articles(frame)[seq]
        assert f"/s/{token}/c/{conversation.id}/m/{seq}/b/1/image" in pushed
        # One rendering path: the frame is what a fresh share page shows.
        assert articles(await sync_to_async(share_page)(token))[seq] == pushed
        await sync_to_async(add_block)(conversation.id, seq, text("third"))
        grown = articles(await ws.receive_from(timeout=WAIT))[seq]
        assert "third" in grown


@in_loop
async def test_share_frames_never_mix_with_operator_frames() -> None:
    # Both sockets watch one conversation: each gets its own URLs (render cache keyed by link).
    from tests.builders import make_user
    from tests.live.test_consumers import conversation_path, signed_in

    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id)
    operator = await sync_to_async(lambda: signed_in(make_user("op")))()
    own = WebsocketCommunicator(
        application, conversation_path(conversation.id), headers=headers(operator)
    )
    assert (await own.connect(timeout=WAIT))[0]
    async with share_socket(share_path(token)) as shared:
        await sync_to_async(append)(conversation.id, "user", [png()])
        operator_frame = await own.receive_from(timeout=WAIT)
        share_frame = await shared.receive_from(timeout=WAIT)
    await own.disconnect()
    assert token not in operator_frame and f"/c/{conversation.id}/m/0/b/0/image" in operator_frame
    assert f"/s/{token}/c/{conversation.id}/m/0/b/0/image" in share_frame


@in_loop
async def test_share_socket_without_images_gets_no_image_urls() -> None:
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id, images=False)
    async with share_socket(share_path(token)) as ws:
        await sync_to_async(append)(conversation.id, "user", [text("look"), png()])
        frame = await ws.receive_from(timeout=WAIT)
    assert "/image" not in frame and "not included in this shared view" in frame
    # vision=1 asked, but a link without images is seen with vision off.
    assert "[Image (image/png): not seen" in frame


@in_loop
async def test_share_socket_with_fixed_toggles_ignores_the_query() -> None:
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id, vision=False, shape="anthropic")
    async with share_socket(share_path(token, "vision=1&shape=openai")) as ws:
        await sync_to_async(append)(conversation.id, "user", [png()])
        frame = await ws.receive_from(timeout=WAIT)
    assert "not seen" in frame


@in_loop
async def test_frozen_unknown_revoked_and_bad_share_sockets_are_refused() -> None:
    conversation = await sync_to_async(create)()
    await sync_to_async(append)(conversation.id, "user", [text("a")])
    _, frozen = await sync_to_async(make_share)(conversation.id, up_to_seq=0)
    share_id, revoked = await sync_to_async(make_share)(conversation.id)
    await sync_to_async(lambda: share_revoke(link=ShareLink.objects.get(pk=share_id)))()
    assert await refused_with(share_path(frozen)) == 4400  # frozen: nothing live, nothing past SEQ
    assert await refused_with(share_path("x" * 43)) == 4404
    assert await refused_with(share_path(revoked)) == GONE
    _, token = await sync_to_async(make_share)(conversation.id)
    assert await refused_with(share_path(token, "vision=maybe")) == 4400


@in_loop
async def test_sharing_off_refuses_share_sockets(settings: Any) -> None:
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id)
    settings.REPLAY_SHARING = False
    assert await refused_with(share_path(token)) == 4404


@in_loop
async def test_revoking_tells_the_page_and_closes_at_once() -> None:
    conversation = await sync_to_async(create)()
    share_id, token = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)) as ws:
        started = time.monotonic()
        await sync_to_async(lambda: share_revoke(link=ShareLink.objects.get(pk=share_id)))()
        notice = await ws.receive_from(timeout=WAIT)
        assert re.search(r'id="share-notice"[^>]*data-state="revoked"', notice)
        assert "revoked; the page no longer updates" in notice
        assert await close_code(ws) == GONE
        assert time.monotonic() - started < 2
        # Nothing more arrives, though the conversation goes on.
        await sync_to_async(append)(conversation.id, "user", [text("after")])
        assert await ws.receive_nothing(timeout=0.3)


@in_loop
async def test_a_revocation_the_layer_lost_closes_within_the_recheck(settings: Any) -> None:
    settings.REPLAY_SHARE_RECHECK_SECONDS = 1
    conversation = await sync_to_async(create)()
    share_id, token = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)) as ws:
        started = time.monotonic()
        # Revoked without the event (as if the channel layer had dropped it).
        await sync_to_async(
            lambda: ShareLink.objects.filter(pk=share_id).update(revoked_at=timezone.now())
        )()
        notice = await ws.receive_from(timeout=10)
        assert 'data-state="revoked"' in notice
        assert await close_code(ws) == GONE
        assert time.monotonic() - started < 10


@in_loop
async def test_expiry_closes_the_socket_at_its_time() -> None:
    conversation = await sync_to_async(create)()
    share_id, token = await sync_to_async(make_share)(conversation.id)
    await sync_to_async(
        lambda: ShareLink.objects.filter(pk=share_id).update(
            expires_at=timezone.now() + timedelta(seconds=1)
        )
    )()
    async with share_socket(share_path(token)) as ws:
        started = time.monotonic()
        notice = await ws.receive_from(timeout=WAIT)
        assert 'data-state="expired"' in notice
        assert await close_code(ws) == GONE
        assert time.monotonic() - started < 3


@in_loop
async def test_deleting_the_conversation_closes_its_share_sockets(settings: Any) -> None:
    settings.REPLAY_SHARE_RECHECK_SECONDS = 1
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)) as ws:
        await sync_to_async(conversation.delete)()
        notice = await ws.receive_from(timeout=10)
        assert 'data-state="deleted"' in notice and "conversation was deleted" in notice
        assert await close_code(ws) == GONE


@in_loop
async def test_a_link_holds_at_most_its_share_of_sockets(settings: Any) -> None:
    settings.REPLAY_MAX_SOCKETS_PER_SHARE = 2
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id)
    _, other = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)), share_socket(share_path(token)):
        assert await refused_with(share_path(token)) == 4429
        async with share_socket(share_path(other)):  # another link is counted apart
            pass
    async with share_socket(share_path(token)):  # closed sockets are counted out
        pass


@in_loop
async def test_group_refresh_checks_the_link_not_a_session(settings: Any) -> None:
    # The refresh re-checks access; a share socket has no session and must stay open.
    settings.REPLAY_GROUP_REFRESH_SECONDS = 0.2
    conversation = await sync_to_async(create)()
    _, token = await sync_to_async(make_share)(conversation.id)
    async with share_socket(share_path(token)) as ws:
        await asyncio.sleep(0.8)
        seq = await sync_to_async(append)(conversation.id, "user", [text("still here")])
        assert "still here" in articles(await ws.receive_from(timeout=WAIT))[seq]
