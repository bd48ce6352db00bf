"""Live sockets (docs/contract.md §4) driven in-process through the real ASGI application.

Every pushed fragment is compared with what a fresh page load renders for the same
message and toggles (docs/architecture.md, One rendering path); refusals, resume, gap
resync and logout are tried against the same stack daphne serves.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from conversations.core.socket_window import CLIENT_BYTES
from conversations.dashboard import socket_urls as routing
from conversations.live import watcher
from conversations.record import events
from conversations.record.models.conversation import Conversation, Message
from conversations.record.schemas import BLOCK_ADAPTER, MessageIn
from conversations.record.services.appending import block_append, message_append, messages_append
from conversations.record.services.conversations import conversation_create
from replaysite.asgi import application
from tests.builders import make_user, png, text, tool_result, tool_use

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ORIGIN = b"http://localhost"
HOST = b"localhost"  # the Host the socket is opened on: ORIGIN is this page's origin
TOGGLES = [(True, "openai"), (False, "openai"), (True, "anthropic"), (False, "anthropic")]
WAIT = 5  # seconds a frame may take (the first render of a run is the slowest)
QUIET = 0.4  # seconds of silence that count as "nothing arrives"

ARTICLE = re.compile(r'<article id="m-(\d+)".*?</article>', re.S)
TOTALS = re.compile(r'<p class="totals" id="totals".*?</p>', re.S)
ROW = re.compile(r'<tr id="c-([0-9a-f-]+)" class="row".*?</tr>', re.S)


# -- helpers ---------------------------------------------------------------------------------


def in_loop(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async test body on one event loop (pytest-asyncio is not installed).

    Sync work inside it goes through `sync_to_async`, which runs it on this thread, as
    Django's ORM requires.
    """

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        async_to_sync(test)(*args, **kwargs)

    return wrapper


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Any:
    # The in-memory layer's queues belong to the event loop that first waited on them.
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


@pytest.fixture(autouse=True)
def plain_static_storage(settings: Any) -> None:
    # The manifest storage needs `collectstatic`; the page loads compared below must not.
    settings.STORAGES = settings.STORAGES | {
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    }


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator(transactional_db: None) -> Client:
    return signed_in(make_user("operator"))


def headers(client: Client | None, origin: bytes = ORIGIN) -> list[tuple[bytes, bytes]]:
    found = [(b"host", HOST), (b"origin", origin)]
    if client is not None:
        found.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return found


def create(title: str = "Live") -> Conversation:
    return conversation_create(title=title)


def append(conversation_id: Any, role: str, blocks: list[dict[str, Any]]) -> int:
    """The service path the API takes; returns the new message's seq."""
    message, _ = message_append(
        conversation=Conversation.objects.get(pk=conversation_id),
        role=role,
        blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
    )
    return message.seq


def add_block(conversation_id: Any, seq: int, block: dict[str, Any]) -> None:
    block_append(
        message=Message.objects.get(conversation_id=conversation_id, seq=seq),
        block=BLOCK_ADAPTER.validate_python(block),
    )


def block_count(conversation_id: Any, seq: int) -> int:
    return Message.objects.get(conversation_id=conversation_id, seq=seq).block_count


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def detail_page(client: Client, conversation_id: Any, vision: bool, shape: str) -> str:
    return page(client, f"/c/{conversation_id}/?vision={int(vision)}&shape={shape}")


def articles(html: str) -> dict[int, str]:
    return {int(m.group(1)): m.group(0) for m in ARTICLE.finditer(html)}


def article_order(html: str) -> list[int]:
    return [int(m.group(1)) for m in ARTICLE.finditer(html)]


def totals(html: str) -> str:
    found = TOTALS.search(html)
    assert found is not None, html
    return found.group(0)


def rows(html: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in ROW.finditer(html)}


def attribute(element: str, name: str) -> str:
    found = re.search(rf'\s{name}="([^"]*)"', element.split(">", 1)[0])
    assert found is not None, f"{name} missing in {element[:200]}"
    return found.group(1)


def conversation_path(conversation_id: Any, vision: bool = True, shape: str = "openai") -> str:
    return routing.conversation_socket_url(conversation_id, vision=vision, shape=shape)


@asynccontextmanager
async def socket(
    path: str, client: Client | None, origin: bytes = ORIGIN
) -> AsyncIterator[WebsocketCommunicator]:
    communicator = WebsocketCommunicator(application, path, headers=headers(client, origin))
    connected, code = await communicator.connect(timeout=WAIT)
    assert connected, f"{path} refused with {code}"
    try:
        yield communicator
    finally:
        await communicator.disconnect()


async def refused(path: str, client: Client | None, origin: bytes = ORIGIN) -> int:
    """The close code of a socket the server accepts and then closes (docs/contract.md §4: a browser
    sees a close code only after the accept; a refused handshake reaches it as 1006)."""
    communicator = WebsocketCommunicator(application, path, headers=headers(client, origin))
    return await close_code(communicator, path)


async def close_code(communicator: WebsocketCommunicator, path: str = "") -> int:
    connected, _ = await communicator.connect(timeout=WAIT)
    assert connected, f"{path} was refused at the handshake; the page would see 1006"
    closed = await communicator.receive_output(timeout=WAIT)
    assert closed["type"] == "websocket.close", closed
    assert await communicator.receive_nothing(QUIET), "something was sent after the close"
    return int(closed["code"])


async def denied(path: str, client: Client | None, origin: bytes = ORIGIN) -> None:
    """A socket refused at the handshake (a foreign origin is told nothing)."""
    communicator = WebsocketCommunicator(application, path, headers=headers(client, origin))
    connected, _ = await communicator.connect(timeout=WAIT)
    # Refused or not, the app runs until told the client left: a denier left running holds a
    # channel layer receive that the test's event loop cannot cancel on Redis.
    await communicator.disconnect()
    assert not connected, f"{path} was accepted from {origin!r}"


async def frame(ws: WebsocketCommunicator) -> str:
    data = await ws.receive_from(timeout=WAIT)
    assert isinstance(data, str)
    return data


async def group_members(group: str) -> list[str]:
    # The in-memory layer's own record of who is in a group: the members a layer "forgets"
    # after group_expiry (or a Redis restart) are exactly these.
    layer = get_channel_layer()
    return list(layer.groups.get(group, {}))


# -- who may connect ---------------------------------------------------------------------------


@in_loop
async def test_anonymous_socket_is_refused(transactional_db: None) -> None:
    conversation = await sync_to_async(create)()
    assert await refused(conversation_path(conversation.id), None) == 4401
    assert await refused(routing.list_socket_url(), None) == 4401


@in_loop
async def test_signed_in_user_without_the_permission_is_refused(transactional_db: None) -> None:
    outsider = await sync_to_async(lambda: signed_in(make_user("outsider", operator=False)))()
    conversation = await sync_to_async(create)()
    assert await refused(conversation_path(conversation.id), outsider) == 4403
    assert await refused(routing.list_socket_url(), outsider) == 4403


@in_loop
async def test_foreign_origin_is_refused(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    evil = b"http://evil.example"
    await denied(conversation_path(conversation.id), operator, origin=evil)
    await denied(routing.list_socket_url(), operator, origin=evil)
    # The same operator from the page's own origin is let in.
    async with socket(conversation_path(conversation.id), operator):
        pass


@in_loop
async def test_unknown_conversation_is_refused(operator: Client) -> None:
    path = conversation_path("00000000-0000-4000-8000-000000000000")
    assert await refused(path, operator) == 4404


@in_loop
async def test_bad_vision_or_shape_is_refused(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    base = f"/ws/conversations/{conversation.id}/"
    for query in ("vision=2", "vision=yes", "shape=gemini", "vision=1&shape=OpenAI"):
        assert await refused(f"{base}?{query}", operator) == 4400, query
    for query in ("", "vision=true&shape=anthropic", "vision=0&shape=openai"):
        async with socket(f"{base}?{query}", operator):
            pass


def test_allowed_hosts_never_contains_a_wildcard() -> None:
    assert "*" not in settings.ALLOWED_HOSTS
    assert all(host.strip() for host in settings.ALLOWED_HOSTS)


@pytest.mark.parametrize("hosts", ["*", "replay.example,*"])
def test_settings_refuse_a_wildcard_allowed_host(hosts: str) -> None:
    env = os.environ | {"DJANGO_ALLOWED_HOSTS": hosts, "DJANGO_SECRET_KEY": settings.SECRET_KEY}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "DJANGO_ALLOWED_HOSTS" in result.stderr


def test_settings_accept_named_hosts() -> None:
    env = os.environ | {
        "DJANGO_ALLOWED_HOSTS": "replay.example,127.0.0.1",
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# -- what an operator receives ---------------------------------------------------------------


@in_loop
async def test_every_service_pushes_the_fragment_a_fresh_page_load_renders(
    operator: Client,
) -> None:
    """The one rendering path (docs/architecture.md) for message_append and block_append,
    for all four toggles."""
    conversation = await sync_to_async(create)("Picture triage")
    cid = conversation.id
    steps: list[tuple[int, Callable[[], Any]]] = [
        (0, lambda: append(cid, "system", [text("You are terse.\nAnswer in one line.")])),
        (1, lambda: append(cid, "user", [text('<b>hi</b> & "quotes"'), png()])),
        (2, lambda: append(cid, "assistant", [{"type": "reasoning", "text": "Look."}])),
        (2, lambda: add_block(cid, 2, tool_use("call_1", "describe", b=1, a=[1, 2]))),
        (3, lambda: append(cid, "user", [tool_result("call_1", "a <red> square")])),
        (3, lambda: add_block(cid, 3, tool_result("call_9", "no such call", is_error=True))),
        (4, lambda: append(cid, "user", [])),
        (4, lambda: add_block(cid, 4, png((10, 200, 10)))),
        (4, lambda: add_block(cid, 4, text("and a caption"))),
        (1, lambda: add_block(cid, 1, text("an earlier message grows"))),
    ]
    async with (
        socket(conversation_path(cid, *TOGGLES[0]), operator) as ws0,
        socket(conversation_path(cid, *TOGGLES[1]), operator) as ws1,
        socket(conversation_path(cid, *TOGGLES[2]), operator) as ws2,
        socket(conversation_path(cid, *TOGGLES[3]), operator) as ws3,
    ):
        sockets = [ws0, ws1, ws2, ws3]
        for seq, step in steps:
            await sync_to_async(step)()
            blocks = await sync_to_async(block_count)(cid, seq)
            for ws, (vision, shape) in zip(sockets, TOGGLES, strict=True):
                pushed = await frame(ws)
                fresh = await sync_to_async(detail_page)(operator, cid, vision, shape)
                assert article_order(pushed) == [seq]
                assert articles(pushed)[seq] == articles(fresh)[seq], (seq, vision, shape)
                assert totals(pushed) == totals(fresh)
                assert attribute(articles(pushed)[seq], "data-seq") == str(seq)
                assert attribute(articles(pushed)[seq], "data-blocks") == str(blocks)
                assert "<b>hi" not in pushed and "<red>" not in pushed
        for ws in sockets:
            assert await ws.receive_nothing(QUIET)


@in_loop
async def test_events_of_another_conversation_reach_nobody_here(operator: Client) -> None:
    watched = await sync_to_async(create)("Watched")
    other = await sync_to_async(create)("Other")
    async with socket(conversation_path(watched.id), operator) as ws:
        await sync_to_async(append)(other.id, "user", [text("elsewhere")])
        await sync_to_async(add_block)(other.id, 0, text("still elsewhere"))
        assert await ws.receive_nothing(QUIET)
        await sync_to_async(append)(watched.id, "user", [text("here")])
        assert article_order(await frame(ws)) == [0]


@in_loop
async def test_an_event_for_what_the_client_already_holds_sends_nothing(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    await sync_to_async(append)(cid, "user", [text("one"), text("two")])
    layer = get_channel_layer()
    group = events.conversation_group(cid)
    async with socket(conversation_path(cid), operator) as ws:
        # The page held message 0 with both blocks when the socket opened: late or repeated
        # hints about it change nothing.
        await layer.group_send(
            group,
            {"type": "conversation.block_added", "conversation_id": cid, "message_seq": 0,
             "block_seq": 1},
        )  # fmt: skip
        await layer.group_send(
            group,
            {"type": "conversation.message_added", "conversation_id": cid, "message_seq": 0,
             "block_count": 2},
        )  # fmt: skip
        assert await ws.receive_nothing(QUIET)
        await sync_to_async(add_block)(cid, 0, text("three"))
        pushed = await frame(ws)
        assert attribute(articles(pushed)[0], "data-blocks") == "3"
        # The same event delivered twice is applied once.
        await layer.group_send(
            group,
            {"type": "conversation.block_added", "conversation_id": cid, "message_seq": 0,
             "block_seq": 2},
        )  # fmt: skip
        assert await ws.receive_nothing(QUIET)


# -- resume and resync -------------------------------------------------------------------------


@in_loop
async def test_resume_sends_exactly_what_the_client_misses_in_order_once(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    for blocks in ([text("a"), text("b")], [text("c")], [text("d"), text("e"), text("f")]):
        await sync_to_async(append)(cid, "user", blocks)
    await sync_to_async(append)(cid, "assistant", [])
    async with socket(conversation_path(cid, False, "anthropic"), operator) as ws:
        # Holds message 0 whole, message 1 without its block, and nothing after.
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [2, 0]})
        pushed = await frame(ws)
        assert article_order(pushed) == [1, 2, 3]
        fresh = await sync_to_async(detail_page)(operator, cid, False, "anthropic")
        for seq, element in articles(pushed).items():
            assert element == articles(fresh)[seq]
        assert totals(pushed) == totals(fresh)
        assert await ws.receive_nothing(QUIET)
        # A second, identical report is answered again (the client says it lost them).
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [2, 0]})
        assert article_order(await frame(ws)) == [1, 2, 3]
        # A client that holds everything gets nothing.
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [2, 1, 3, 0]})
        assert await ws.receive_nothing(QUIET)
        # After a resume, live events continue from what the client now holds.
        await sync_to_async(add_block)(cid, 3, text("late"))
        pushed = await frame(ws)
        assert article_order(pushed) == [3]
        assert attribute(articles(pushed)[3], "data-blocks") == "1"
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_socket_that_says_it_reports_takes_nothing_before_its_late_report(
    operator: Client,
) -> None:
    """A page reconnecting on a loaded server (CI's Redis-restart run): its report comes
    after later messages were added. Sent before the report, message 3 would precede the
    messages 1 and 2 the resync brings; with `report=1` everything waits for the report."""
    conversation = await sync_to_async(create)()
    cid = conversation.id
    for n in range(3):
        await sync_to_async(append)(cid, "user", [text(f"m{n}")])
    path = routing.conversation_socket_url(cid, vision=True, shape="openai", report=True)
    async with socket(path, operator) as ws:
        await sync_to_async(append)(cid, "user", [text("m3")])
        assert await ws.receive_nothing(1.0)  # longer than any grace: it waits for the report
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [1]})  # holds message 0
        seen = article_order(await frame(ws))
        while not await ws.receive_nothing(QUIET):
            seen += article_order(await frame(ws))
        assert seen == [1, 2, 3]


@in_loop
async def test_a_socket_whose_promised_report_never_comes_closes_for_a_reconnect(
    operator: Client, settings: Any
) -> None:
    settings.REPLAY_REPORT_WAIT_SECONDS = 0.5
    conversation = await sync_to_async(create)()
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("m0")])
    path = routing.conversation_socket_url(cid, vision=True, shape="openai", report=True)
    async with socket(path, operator) as ws:
        await sync_to_async(append)(cid, "user", [text("m1")])
        closed = await ws.receive_output(timeout=WAIT)
        assert closed == {"type": "websocket.close", "code": watcher.RETRY}


@in_loop
async def test_resume_from_a_window_reports_holes_and_ignores_earlier_messages(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    for n in range(5):
        await sync_to_async(append)(cid, "user", [text(f"m{n}")])
    async with socket(conversation_path(cid), operator) as ws:
        # A page that loaded only messages 2.. and lost message 3 (a hole, reported as -1).
        await ws.send_json_to({"type": "resume", "from": 2, "counts": [1, -1, 1]})
        assert article_order(await frame(ws)) == [3]
        # A block added before the page's window is not pushed ("Load earlier" brings it).
        await sync_to_async(add_block)(cid, 0, text("old news"))
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_malformed_resume_reports_are_ignored_and_the_socket_stays_live(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("a")])
    async with socket(conversation_path(cid), operator) as ws:
        for report in (
            "not json",
            "[1, 2]",
            '"resume"',
            '{"type": "resume"}',
            '{"type": "resume", "from": -1, "counts": []}',
            '{"type": "resume", "from": "x", "counts": []}',
            '{"type": "resume", "from": 0, "counts": 5}',
            '{"type": "resume", "from": 0, "counts": [null]}',
            '{"type": "other", "from": 0, "counts": []}',
            '{"type": "resume", "from": 1e999, "counts": []}',
            '{"type": "resume", "from": 0, "counts": [Infinity]}',
            # Well-formed but beyond any integer column: answered with nothing.
            '{"type": "resume", "from": 99999999999999999999999, "counts": [1]}',
        ):
            await ws.send_to(text_data=report)
        assert await ws.receive_nothing(QUIET)
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [1]})
        assert await ws.receive_nothing(QUIET)
        await sync_to_async(append)(cid, "user", [text("b")])
        assert article_order(await frame(ws)) == [1]


@in_loop
async def test_a_message_no_page_sends_closes_with_4400_unread(operator: Client) -> None:
    # What reaches the consumer past daphne's cap (a server started without it): refused
    # before it is parsed, as is a report of more than a window (docs/contract.md §4).
    conversation = await sync_to_async(create)()
    path = conversation_path(conversation.id)
    for message in (
        {"text_data": " " * (CLIENT_BYTES + 1)},
        {"bytes_data": b"x" * (CLIENT_BYTES + 1)},
        {"text_data": json.dumps({"type": "resume", "from": 0, "counts": [0] * 301})},
    ):
        async with socket(path, operator) as ws:
            await ws.send_to(**message)
            closed = await ws.receive_output(timeout=WAIT)
            assert closed == {"type": "websocket.close", "code": 4400}, closed


@in_loop
async def test_a_gap_in_the_layer_is_filled_from_the_database(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    await sync_to_async(append)(cid, "user", [text("n")])
    layer = get_channel_layer()
    group = events.conversation_group(cid)
    async with socket(conversation_path(cid), operator) as ws:
        # The layer forgets the socket (group_expiry, a Redis restart): N+1 is announced
        # to nobody, and so is N+2 ...
        (member,) = await group_members(group)
        await layer.group_discard(group, member)
        await sync_to_async(append)(cid, "assistant", [text("n+1, never announced")])
        await sync_to_async(append)(cid, "user", [text("n+2")])
        await layer.group_add(group, member)
        assert await ws.receive_nothing(QUIET)
        # ... until a hint about N+2 arrives: the consumer sees the gap and resyncs.
        await layer.group_send(
            group,
            {"type": "conversation.message_added", "conversation_id": cid, "message_seq": 2,
             "block_count": 1},
        )  # fmt: skip
        pushed = await frame(ws)
        assert article_order(pushed) == [1, 2]
        fresh = await sync_to_async(detail_page)(operator, cid, True, "openai")
        assert articles(pushed) == {seq: articles(fresh)[seq] for seq in (1, 2)}
        assert await ws.receive_nothing(QUIET)
        # And the next service call is pushed as usual, once.
        await sync_to_async(append)(cid, "assistant", [text("n+3")])
        assert article_order(await frame(ws)) == [3]
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_lost_event_is_resynced_by_the_next_service_call(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    layer = get_channel_layer()
    group = events.conversation_group(cid)
    async with socket(conversation_path(cid), operator) as ws:
        (member,) = await group_members(group)
        await layer.group_discard(group, member)
        await sync_to_async(append)(cid, "user", [text("lost")])
        await layer.group_add(group, member)
        await sync_to_async(append)(cid, "assistant", [text("seen")])
        assert article_order(await frame(ws)) == [0, 1]
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_forgotten_member_rejoins_and_catches_up_on_its_own(
    operator: Client, settings: Any
) -> None:
    settings.REPLAY_GROUP_REFRESH_SECONDS = 0.3
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    group = events.conversation_group(cid)
    async with socket(conversation_path(cid), operator) as ws:
        (member,) = await group_members(group)
        await get_channel_layer().group_discard(group, member)
        await sync_to_async(append)(cid, "user", [text("told to nobody")])
        # No further event and no resume: the periodic refresh alone brings it.
        assert article_order(await frame(ws)) == [0]
        assert await group_members(group) == [member]
        assert await ws.receive_nothing(QUIET)


# -- logout ------------------------------------------------------------------------------------


@in_loop
async def test_logging_out_closes_that_users_sockets_only(transactional_db: None) -> None:
    leaving = await sync_to_async(lambda: signed_in(make_user("leaving")))()
    staying = await sync_to_async(lambda: signed_in(make_user("staying")))()
    conversation = await sync_to_async(create)()
    cid = conversation.id
    async with (
        socket(conversation_path(cid), leaving) as page_socket,
        socket(routing.list_socket_url(), leaving) as list_socket,
        socket(conversation_path(cid), staying) as other,
    ):
        cookie = headers(leaving)
        await sync_to_async(leaving.logout)()
        for ws in (page_socket, list_socket):
            closed = await ws.receive_output(timeout=WAIT)
            assert closed == {"type": "websocket.close", "code": 4401}
        assert await other.receive_nothing(QUIET)
        await sync_to_async(append)(cid, "user", [text("still watched")])
        assert article_order(await frame(other)) == [0]
    # The old session cookie opens nothing any more.
    communicator = WebsocketCommunicator(application, conversation_path(cid), headers=cookie)
    assert await close_code(communicator) == 4401


# -- the list socket ---------------------------------------------------------------------------


async def assert_row_is_fresh(pushed: str, client: Client, conversation_id: Any) -> str:
    row = rows(pushed)[str(conversation_id)]
    fresh = rows(await sync_to_async(page)(client, "/"))
    assert row == fresh[str(conversation_id)]
    return row


@in_loop
async def test_list_socket_pushes_a_row_for_a_new_conversation(operator: Client) -> None:
    async with socket(routing.list_socket_url(), operator) as ws:
        conversation = await sync_to_async(create)("Brand <new>")
        pushed = await frame(ws)
        assert list(rows(pushed)) == [str(conversation.id)]
        row = await assert_row_is_fresh(pushed, operator, conversation.id)
        assert "Brand &lt;new&gt;" in row
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_list_socket_pushes_the_row_on_new_activity(operator: Client) -> None:
    conversation = await sync_to_async(create)("Busy")
    cid = conversation.id
    async with socket(routing.list_socket_url(), operator) as ws:
        await sync_to_async(append)(cid, "user", [text("hello")])
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert '<td class="num">1</td>' in row
        await sync_to_async(append)(cid, "assistant", [tool_use("call_1", "search", q="x")])
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert '<td class="num">2</td>' in row and "unanswered tool call" in row
        await sync_to_async(append)(cid, "user", [tool_result("call_1", "found")])
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert '<td class="num">3</td>' in row and "unanswered tool call" not in row
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_list_row_after_a_block_is_the_fresh_row_not_the_one_before_it(
    operator: Client,
) -> None:
    """message_added(seq 0, 1 block) and block_added(seq 0, block 1) describe different
    states; the row pushed for the block must show the block (here: an open tool call)."""
    conversation = await sync_to_async(create)("Growing")
    cid = conversation.id
    async with socket(routing.list_socket_url(), operator) as ws:
        await sync_to_async(append)(cid, "assistant", [text("let me look")])
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert "unanswered tool call" not in row
        await sync_to_async(add_block)(cid, 0, tool_use("call_1", "search", q="x"))
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert "unanswered tool call" in row


@in_loop
async def test_list_rows_pushed_live_carry_the_model_and_errors_columns(operator: Client) -> None:
    conversation = await sync_to_async(create)("Columns")
    cid = conversation.id

    def append_with_model() -> None:
        message_append(
            conversation=Conversation.objects.get(pk=cid),
            role="assistant",
            blocks=[BLOCK_ADAPTER.validate_python(tool_use("call_1", "search", q="x"))],
            metadata={"model": "claude-opus-4"},
        )

    async with socket(routing.list_socket_url(), operator) as ws:
        await sync_to_async(append_with_model)()
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert '<td class="model">claude-opus-4</td>' in row
        assert '<td class="errors"></td>' in row
        await sync_to_async(add_block)(cid, 0, tool_result("call_1", "boom", is_error=True))
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert '<td class="errors">1</td>' in row and "unanswered tool call" not in row
        assert await ws.receive_nothing(QUIET)


def test_a_render_survives_the_socket_that_asked_for_it_going_away() -> None:
    """The first socket's handler is cancelled mid-render; the others still get the frame."""
    from conversations.live.render_cache import RenderCache

    cache: RenderCache[str] = RenderCache(ttl=1.0)
    started = asyncio.Event()

    async def render() -> str:
        started.set()
        await asyncio.sleep(0.05)
        return "frame"

    async def body() -> None:
        first = asyncio.ensure_future(cache.get(("k",), render))
        await started.wait()
        second = asyncio.ensure_future(cache.get(("k",), render))
        first.cancel()
        assert await asyncio.wait_for(second, 2) == "frame"
        assert first.cancelled()

    asyncio.run(body())


# -- a batch is one event (docs/contract.md §3) ----------------------------------------------------


def append_batch(conversation_id: Any, messages: list[dict[str, Any]]) -> list[int]:
    stored = messages_append(
        conversation=Conversation.objects.get(pk=conversation_id),
        messages=[MessageIn.model_validate(m) for m in messages],
    )
    return [message.seq for message, _ in stored]


BATCH = [
    {"role": "assistant", "blocks": [tool_use("c1", "grep", pattern="x")]},
    {"role": "user", "blocks": [tool_result("c1", "3 matches")]},
    {"role": "assistant", "blocks": [text("done"), text("really")]},
    {"role": "user", "blocks": []},
]


@in_loop
async def test_a_batch_reaches_a_watcher_whole_as_the_page_renders_it(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    await sync_to_async(append)(cid, "user", [text("before")])
    async with socket(conversation_path(cid), operator) as ws:
        assert await sync_to_async(append_batch)(cid, BATCH) == [1, 2, 3, 4]
        pushed = await frame(ws)
        # One event, for the last message: the consumer sees the gap and resyncs the rest.
        assert article_order(pushed) == [1, 2, 3, 4]
        fresh = await sync_to_async(detail_page)(operator, cid, True, "openai")
        assert articles(pushed) == {seq: articles(fresh)[seq] for seq in (1, 2, 3, 4)}
        assert await ws.receive_nothing(QUIET)
        # What follows is pushed as usual, once.
        await sync_to_async(append)(cid, "user", [text("after")])
        assert article_order(await frame(ws)) == [5]
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_batch_into_an_empty_conversation_reaches_a_watcher(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    async with socket(conversation_path(cid), operator) as ws:
        await sync_to_async(append_batch)(cid, BATCH)
        assert article_order(await frame(ws)) == [0, 1, 2, 3]
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_a_batch_moves_the_list_row_once(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    cid = str(conversation.id)
    async with socket(routing.list_socket_url(), operator) as ws:
        await sync_to_async(append_batch)(cid, BATCH)
        assert list(rows(await frame(ws))) == [cid]
        assert await ws.receive_nothing(QUIET)


# -- bounds (docs/contract.md §4): no frame over 256 KB, a gap past a window is a reload -----------

FRAME_LIMIT = 256 * 1024
RELOAD = re.compile(r'<div id="reload-window" data-url="([^"]+)" hidden></div>')


@in_loop
async def test_a_two_megabyte_block_travels_cut_under_the_frame_limit_and_updates_go_on(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("dump the log")])
    async with socket(conversation_path(cid), operator) as ws:
        await sync_to_async(append)(cid, "user", [tool_result("call_1", "<&>'\"" * 400_000)])
        pushed = await frame(ws)
        assert len(pushed.encode()) <= FRAME_LIMIT
        fresh = await sync_to_async(detail_page)(operator, cid, True, "openai")
        assert articles(pushed)[1] == articles(fresh)[1]
        assert 'class="truncated"' in articles(pushed)[1]
        # The socket lives on: the next block and message arrive as usual.
        await sync_to_async(add_block)(cid, 1, text("x" * 2_000_000))
        pushed = await frame(ws)
        assert len(pushed.encode()) <= FRAME_LIMIT
        assert attribute(articles(pushed)[1], "data-blocks") == "2"
        await sync_to_async(append)(cid, "assistant", [text("Done. " + "d" * 300_000)])
        assert article_order(await frame(ws)) == [2]
        # A resume that misses several huge messages is answered in frames under the limit.
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [1]})
        received: list[str] = []
        while 2 not in articles("".join(received)):
            received.append(await frame(ws))
        assert all(len(f.encode()) <= FRAME_LIMIT for f in received)
        assert len(received) >= 2
        assert sorted(articles("".join(received))) == [1, 2]


@in_loop
async def test_a_gap_past_one_window_is_answered_with_reload_and_the_reload_ends_as_a_fresh_load(
    operator: Client,
) -> None:
    conversation = await sync_to_async(create)()
    cid = conversation.id

    def store() -> None:
        for n in range(410):
            append(cid, "user", [text(f"m{n}")])

    await sync_to_async(store)()
    async with socket(conversation_path(cid, False, "openai"), operator) as ws:
        # The page held the first ten messages and missed 400.
        await ws.send_json_to({"type": "resume", "from": 0, "counts": [1] * 10})
        pushed = await frame(ws)
        found = RELOAD.search(pushed)
        assert found is not None, pushed[:300]
        assert "<article" not in pushed
        # Nothing more until the client reports again, whatever happens meanwhile.
        await sync_to_async(append)(cid, "user", [text("meanwhile")])
        assert await ws.receive_nothing(QUIET)
        window = await sync_to_async(page)(operator, found.group(1).replace("&amp;", "&"))
        held = articles(window)
        first = min(held)
        await ws.send_json_to(
            {"type": "resume", "from": first,
             "counts": [int(attribute(held[s], "data-blocks")) for s in sorted(held)]}
        )  # fmt: skip
        assert await ws.receive_nothing(QUIET)
        fresh = await sync_to_async(detail_page)(operator, cid, False, "openai")
        assert held == articles(fresh)
        assert sorted(held) == list(range(311, 411))


@in_loop
async def test_list_socket_sends_what_changed_since_the_page_was_rendered(
    operator: Client,
) -> None:
    quiet = await sync_to_async(create)("Quiet")
    busy = await sync_to_async(create)("Busy")
    listing = await sync_to_async(page)(operator, "/")
    found = re.search(r'ws-connect="([^"]+)"', listing)
    assert found is not None and "since=" in found.group(1)
    # Activity after the page's rows were read, before its socket opens.
    await sync_to_async(append)(busy.id, "user", [text("while the socket was not open yet")])
    fresh_conversation = await sync_to_async(create)("Brand new")
    async with socket(found.group(1).replace("&amp;", "&"), operator) as ws:
        pushed = await frame(ws)
        assert list(rows(pushed)) == [str(busy.id), str(fresh_conversation.id)]
        await assert_row_is_fresh(pushed, operator, busy.id)
        assert str(quiet.id) not in pushed
        assert await ws.receive_nothing(QUIET)
    # A bad position is ignored: the socket is live, and sends only new activity.
    async with socket(routing.list_socket_url("yesterday"), operator) as ws:
        assert await ws.receive_nothing(QUIET)
        await sync_to_async(append)(quiet.id, "user", [text("now")])
        assert list(rows(await frame(ws))) == [str(quiet.id)]
