"""Who keeps a live socket (docs/contract.md §4, Socket closes): close codes the page can read,
access lost within 10 s, the Origin's scheme, host and port, the per-user cap, the
handshake's query count, and deletion closing a conversation's sockets with 4404.

Driven through the real ASGI application (as tests/live/test_consumers.py), and against a
real daphne with a `websockets` client where time is measured.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from websockets.exceptions import ConnectionClosed

from conversations.dashboard import socket_urls as routing
from conversations.live.layers import ThrottledInMemoryChannelLayer
from conversations.record.models.conversation import Conversation
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_delete
from replaysite.asgi import application
from tests.builders import make_user
from tests.conftest import Server, start_daphne
from tests.live.test_consumers import (
    QUIET,
    WAIT,
    append,
    close_code,
    conversation_path,
    create,
    denied,
    frame,
    headers,
    in_loop,
    refused,
    signed_in,
    socket,
    text,
)
from tests.live.test_live_e2e import open_socket
from tests.redis_server import RedisServer, available

pytestmark = pytest.mark.django_db(transaction=True)

ACCESS_DEADLINE = 10.0  # docs/contract.md §4: open sockets are lost within 10 s


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    # The in-memory layer's queues belong to the event loop that first waited on them.
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


def view_permission() -> Permission:
    return Permission.objects.get(
        codename="view_conversation", content_type__app_label="conversations"
    )


async def closes_with(ws: WebsocketCommunicator, code: int) -> float:
    """Wait for the server to close `ws` with `code`; returns the seconds it took."""
    start = time.monotonic()
    closed = await ws.receive_output(timeout=ACCESS_DEADLINE)
    assert closed == {"type": "websocket.close", "code": code}
    return time.monotonic() - start


# -- close codes: accepted, then closed --------------------------------------------------------


@in_loop
async def test_every_refusal_is_an_accept_then_a_close_code_the_page_can_read(
    transactional_db: None,
) -> None:
    operator = await sync_to_async(lambda: signed_in(make_user("op")))()
    outsider = await sync_to_async(lambda: signed_in(make_user("out", operator=False)))()
    conversation = await sync_to_async(create)()
    path = conversation_path(conversation.id)
    assert await refused(f"/ws/conversations/{conversation.id}/?shape=gemini", operator) == 4400
    assert await refused(path, None) == 4401
    assert await refused(path, outsider) == 4403
    assert await refused(conversation_path("00000000-0000-4000-8000-000000000000"), operator) == (
        4404
    )
    # A cookie naming no session (or a flushed one) is signed out, not an error.
    stale = [(b"host", b"localhost"), (b"origin", b"http://localhost"), (b"cookie", b"sessionid=x")]
    assert await close_code(WebsocketCommunicator(application, path, headers=stale)) == 4401


@in_loop
async def test_a_deactivated_users_session_is_signed_out(transactional_db: None) -> None:
    user = await sync_to_async(make_user)("dormant")
    client = await sync_to_async(signed_in)(user)
    await sync_to_async(User.objects.filter(pk=user.pk).update)(is_active=False)
    assert await refused(routing.list_socket_url(), client) == 4401


@in_loop
async def test_a_superuser_without_the_explicit_permission_may_watch(
    transactional_db: None,
) -> None:
    admin = await sync_to_async(
        lambda: User.objects.create_superuser("root", password="a long passphrase here")
    )()
    client = await sync_to_async(signed_in)(admin)
    async with socket(routing.list_socket_url(), client):
        pass


# -- access lost while a socket is open ---------------------------------------------------------


def deactivate(user: User) -> None:
    user.is_active = False
    user.save()


def remove_permission(user: User) -> None:
    user.user_permissions.remove(view_permission())


def change_password(user: User) -> None:
    user.set_password("a brand new and long passphrase")
    user.save()


def remove_from_the_permission_side(user: User) -> None:
    view_permission().user_set.remove(user)


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (deactivate, 4401),
        (change_password, 4401),
        (remove_permission, 4403),
        (remove_from_the_permission_side, 4403),
        (lambda user: user.delete(), 4401),
    ],
    ids=["deactivated", "password-changed", "permission-removed", "permission-side", "deleted"],
)
@in_loop
async def test_losing_access_closes_open_sockets_within_10_s(
    transactional_db: None, change: Any, code: int
) -> None:
    user = await sync_to_async(make_user)("losing")
    client = await sync_to_async(signed_in)(user)
    keeper = await sync_to_async(lambda: signed_in(make_user("keeper")))()
    conversation = await sync_to_async(create)()
    async with (
        socket(conversation_path(conversation.id), client) as page_socket,
        socket(routing.list_socket_url(), client) as list_socket,
        socket(conversation_path(conversation.id), keeper) as other,
    ):
        await sync_to_async(change)(user)
        for ws in (page_socket, list_socket):
            assert await closes_with(ws, code) < ACCESS_DEADLINE
        assert await other.receive_nothing(QUIET)  # someone else's change closes nothing here
        await sync_to_async(append)(conversation.id, "user", [text("still watched")])
        assert "still watched" in await frame(other)


@pytest.mark.parametrize("side", ["user", "group"])
@in_loop
async def test_leaving_the_group_that_grants_the_permission_closes_sockets(
    transactional_db: None, side: str
) -> None:
    def member() -> tuple[User, Group]:
        user = make_user("member", operator=False)
        group = Group.objects.create(name="operators")
        group.permissions.add(view_permission())
        user.groups.add(group)
        return user, group

    user, group = await sync_to_async(member)()
    client = await sync_to_async(signed_in)(user)
    async with socket(routing.list_socket_url(), client) as ws:
        if side == "user":
            await sync_to_async(user.groups.remove)(group)
        else:
            await sync_to_async(group.user_set.remove)(user)
        assert await closes_with(ws, 4403) < ACCESS_DEADLINE


@pytest.mark.parametrize("how", ["permission-removed", "group-deleted"])
@in_loop
async def test_a_group_losing_the_permission_closes_its_members_sockets(
    transactional_db: None, how: str
) -> None:
    def members() -> tuple[list[User], Group]:
        group = Group.objects.create(name="operators")
        group.permissions.add(view_permission())
        users = [make_user(f"member{i}", operator=False) for i in range(2)]
        for user in users:
            user.groups.add(group)
        return users, group

    users, group = await sync_to_async(members)()
    clients = [await sync_to_async(signed_in)(user) for user in users]
    async with (
        socket(routing.list_socket_url(), clients[0]) as first,
        socket(routing.list_socket_url(), clients[1]) as second,
    ):
        if how == "group-deleted":
            await sync_to_async(group.delete)()
        else:
            await sync_to_async(lambda: group.permissions.remove(view_permission()))()
        for ws in (first, second):
            assert await closes_with(ws, 4403) < ACCESS_DEADLINE


@in_loop
async def test_a_change_that_keeps_access_keeps_the_socket(transactional_db: None) -> None:
    user = await sync_to_async(make_user)("staying")
    client = await sync_to_async(signed_in)(user)
    async with socket(routing.list_socket_url(), client) as ws:

        def rename() -> None:
            user.first_name = "Still"
            user.save()
            # Signing in elsewhere saves last_login, and changes nothing here either.
            Client().force_login(user)

        await sync_to_async(rename)()
        assert await ws.receive_nothing(1.0)


@in_loop
async def test_the_periodic_refresh_catches_a_change_no_event_announced(
    transactional_db: None, settings: Any
) -> None:
    settings.REPLAY_GROUP_REFRESH_SECONDS = 1
    user = await sync_to_async(make_user)("quiet")
    client = await sync_to_async(signed_in)(user)
    async with socket(routing.list_socket_url(), client) as ws:
        # A queryset update sends no signal: only the refresh can notice it.
        await sync_to_async(User.objects.filter(pk=user.pk).update)(is_active=False)
        assert await closes_with(ws, 4401) < 3


# -- Origin -------------------------------------------------------------------------------------


@in_loop
async def test_origin_must_match_scheme_host_and_port(transactional_db: None) -> None:
    client = await sync_to_async(lambda: signed_in(make_user("op")))()
    path = routing.list_socket_url()
    for origin in (
        b"http://localhost:9999",  # another app on this host
        b"https://localhost",  # another scheme
        b"http://127.0.0.1",  # another host, though allowed
        b"null",
        b"http://localhost/page",
    ):
        await denied(path, client, origin=origin)
    async with socket(path, client):
        pass
    # Without an Origin header (not a browser page), nothing is let in.
    cookie = [h for h in headers(client) if h[0] != b"origin"]
    no_origin = WebsocketCommunicator(application, path, headers=cookie)
    assert not (await no_origin.connect(WAIT))[0]
    await no_origin.disconnect()


@in_loop
async def test_origin_with_an_explicit_port_matches_the_host_header(
    transactional_db: None,
) -> None:
    client = await sync_to_async(lambda: signed_in(make_user("op")))()
    path = routing.list_socket_url()

    def with_host(host: bytes, origin: bytes) -> list[tuple[bytes, bytes]]:
        found = [h for h in headers(client) if h[0] not in {b"host", b"origin"}]
        return [*found, (b"host", host), (b"origin", origin)]

    ok = WebsocketCommunicator(
        application, path, headers=with_host(b"localhost:8000", b"http://localhost:8000")
    )
    assert (await ok.connect(WAIT))[0]
    await ok.disconnect()
    # The default port may be named or left out on either side.
    default = WebsocketCommunicator(
        application, path, headers=with_host(b"localhost", b"http://localhost:80")
    )
    assert (await default.connect(WAIT))[0]
    await default.disconnect()
    for host, origin in [
        (b"localhost:8000", b"http://localhost"),
        (b"localhost:8000", b"http://localhost:8001"),
        (b"evil.example", b"http://evil.example"),  # a Host outside ALLOWED_HOSTS
    ]:
        refused_at_handshake = WebsocketCommunicator(
            application, path, headers=with_host(host, origin)
        )
        assert not (await refused_at_handshake.connect(WAIT))[0], (host, origin)
        await refused_at_handshake.disconnect()  # ends the denier (it holds a layer receive)


@in_loop
async def test_csrf_trusted_origins_and_the_proxy_header_are_honoured(
    transactional_db: None, settings: Any
) -> None:
    client = await sync_to_async(lambda: signed_in(make_user("op")))()
    path = routing.list_socket_url()
    await denied(path, client, origin=b"https://replay.example")
    settings.CSRF_TRUSTED_ORIGINS = ["https://replay.example", "https://*.corp.example"]
    for origin in (
        b"https://replay.example",
        b"https://replay.example:443",
        b"https://a.corp.example",
    ):
        async with socket(path, client, origin=origin):
            pass
    for origin in (b"http://replay.example", b"https://replay.example:8443", b"https://corp.evil"):
        await denied(path, client, origin=origin)
    # Behind a TLS proxy (DJANGO_HTTPS=1) the page is https: so must the Origin be.
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = [*headers(client, b"https://localhost"), (b"x-forwarded-proto", b"https")]
    behind = WebsocketCommunicator(application, path, headers=proxied)
    assert (await behind.connect(WAIT))[0]
    await behind.disconnect()
    await denied(path, client, origin=b"http://localhost:9999")


# -- the per-user cap ---------------------------------------------------------------------------


@in_loop
async def test_sockets_per_user_are_capped_with_4429(transactional_db: None, settings: Any) -> None:
    settings.REPLAY_MAX_SOCKETS_PER_USER = 3
    hoarder = await sync_to_async(lambda: signed_in(make_user("hoarder")))()
    other = await sync_to_async(lambda: signed_in(make_user("other")))()
    path = routing.list_socket_url()
    held = []
    for _ in range(3):
        ws = WebsocketCommunicator(application, path, headers=headers(hoarder))
        assert (await ws.connect(WAIT))[0]
        held.append(ws)
    try:
        assert await refused(path, hoarder) == 4429
        async with socket(path, other):  # the cap is per user
            pass
        await held.pop().disconnect()
        again = WebsocketCommunicator(application, path, headers=headers(hoarder))
        assert (await again.connect(WAIT))[0]
        assert await again.receive_nothing(QUIET), "a freed slot is usable again"
        held.append(again)
    finally:
        for ws in held:
            await ws.disconnect()


class FlakyLayer(ThrottledInMemoryChannelLayer):
    """The embedded layer, with an outage while `down`: group_add raises."""

    down = False

    async def group_add(self, group: str, channel: str) -> None:
        if self.down:
            raise ConnectionError("the channel layer is down")
        await super().group_add(group, channel)


@in_loop
async def test_sockets_that_failed_to_open_do_not_count_against_the_cap(
    transactional_db: None, settings: Any
) -> None:
    settings.REPLAY_MAX_SOCKETS_PER_USER = 3
    layer = FlakyLayer()
    channel_layers.backends = {"default": layer}
    user = await sync_to_async(lambda: signed_in(make_user("unlucky")))()
    path = routing.list_socket_url()
    layer.down = True
    for _ in range(settings.REPLAY_MAX_SOCKETS_PER_USER + 2):
        failed = WebsocketCommunicator(application, path, headers=headers(user))
        with contextlib.suppress(Exception):  # the handshake fails with the layer
            connected, _ = await failed.connect(WAIT)
            assert not connected or await failed.receive_output(WAIT)
        with contextlib.suppress(Exception):
            await failed.disconnect()
    layer.down = False
    # The outage is over: the user's next socket opens, not 4429 (final for the page).
    async with socket(path, user) as ws:
        assert await ws.receive_nothing(QUIET), "the layer's failures were counted as sockets"


# -- what a handshake costs --------------------------------------------------------------------


def test_a_handshake_costs_at_most_two_queries(transactional_db: None) -> None:
    client = signed_in(make_user("counted"))
    conversation = create()
    message_append(conversation=conversation, role="user", blocks=[])

    async def open_and_close(path: str) -> None:
        ws = WebsocketCommunicator(application, path, headers=headers(client))
        assert (await ws.connect(WAIT))[0]
        assert await ws.receive_nothing(QUIET)
        await ws.disconnect()

    # The ORM runs on this thread (sync_to_async's thread-sensitive executor), so the
    # queries of the consumer's whole life are captured here.
    with CaptureQueriesContext(connection) as listing:
        async_to_sync(open_and_close)(routing.list_socket_url())
    assert len(listing.captured_queries) <= 2, listing.captured_queries
    with CaptureQueriesContext(connection) as watching:
        async_to_sync(open_and_close)(conversation_path(conversation.id))
    queries = [q["sql"] for q in watching.captured_queries]
    # Two before the accept (the session; the user, permission and conversation), and
    # after it the position this socket starts from, one query on messages alone.
    assert len(queries) <= 3, queries
    assert "auth_user" in queries[1] and "conversations_conversation" in queries[1]
    assert "auth_user" not in queries[-1] and "conversations_message" in queries[-1]


def test_connections_are_kept_and_checked_before_reuse() -> None:
    db = settings.DATABASES["default"]
    assert db["CONN_HEALTH_CHECKS"] is True
    if db["ENGINE"].endswith("postgresql"):
        # Pooled (Django keeps no per-thread connection of its own with a pool).
        assert db["CONN_MAX_AGE"] == 0
        assert db["OPTIONS"]["pool"]["max_size"] >= 2
    else:
        assert db["CONN_MAX_AGE"] > 0


# -- deletion reaches open sockets --------------------------------------------------------------


@in_loop
async def test_deleting_a_conversation_closes_its_sockets_with_4404_and_drops_its_row(
    transactional_db: None,
) -> None:
    client = await sync_to_async(lambda: signed_in(make_user("op")))()
    doomed = await sync_to_async(create)("doomed")
    kept = await sync_to_async(create)("kept")
    async with (
        socket(conversation_path(doomed.id), client) as doomed_socket,
        socket(conversation_path(kept.id), client) as kept_socket,
        socket(routing.list_socket_url(), client) as list_socket,
    ):
        await sync_to_async(
            lambda: conversation_delete(conversation=Conversation.objects.get(pk=doomed.id))
        )()
        assert await closes_with(doomed_socket, 4404) < WAIT
        removal = await frame(list_socket)
        assert f'id="c-{doomed.id}"' in removal and "data-removed" in removal
        assert (
            removal.strip()
            == f'<tr id="c-{doomed.id}" class="row removed" data-removed="true"></tr>'
        )
        assert await kept_socket.receive_nothing(QUIET)
        await sync_to_async(append)(kept.id, "user", [text("the other one lives on")])
        assert "the other one lives on" in await frame(kept_socket)
    # And a page opened on it afterwards is told the same.
    assert await refused(conversation_path(doomed.id), client) == 4404


# -- a real daphne, a real client, the clock ---------------------------------------------------


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server: the test process and daphne share its channel layer."""
    if not available():
        pytest.skip("redis-server is not installed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_daphne(
    redis: RedisServer, transactional_db: None, tmp_path: Any, settings: Any
) -> Iterator[Server]:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [redis.url]},
        }
    }
    server = start_daphne(tmp_path, {"REDIS_URL": redis.url})
    yield server
    server.stop()


def test_deactivating_a_user_closes_a_real_socket_on_daphne_within_10_s(
    redis_daphne: Server,
) -> None:
    user = make_user(f"real-{time.monotonic_ns()}")
    client = signed_in(user)
    url = redis_daphne.url.replace("http", "ws", 1) + routing.list_socket_url()
    ws = open_socket(
        url,
        {"Cookie": f"sessionid={client.cookies['sessionid'].value}", "Origin": redis_daphne.url},
    )
    try:
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.5)  # live, and quiet
        start = time.monotonic()
        deactivate(user)  # as the admin would: a save, published on commit
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=ACCESS_DEADLINE)
        took = time.monotonic() - start
    finally:
        ws.close()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    assert took < ACCESS_DEADLINE
    print(f"deactivation closed the socket in {took * 1000:.0f} ms")
