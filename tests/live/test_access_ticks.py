"""Access lost in another process reaches open sockets within 10 s (docs/contract.md §4),
with no signal to tell this one: a user deactivated or stripped of the permission through
a queryset update or raw SQL (as another server, the admin elsewhere or `manage.py shell`
would) loses the socket at the next access tick. A session's sockets share one check a
tick."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from django.contrib.auth.models import User
from django.db import connection

from conversations.dashboard import socket_urls
from conversations.live import access
from tests.builders import make_user
from tests.live.test_consumers import conversation_path, create, in_loop, signed_in, socket

pytestmark = pytest.mark.django_db(transaction=True)
TICK = 0.5  # seconds, for the test; the default is 5


@pytest.fixture(autouse=True)
def quick_ticks(settings: Any) -> Iterator[None]:
    settings.REPLAY_ACCESS_RECHECK_SECONDS = TICK
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


async def closed_within(ws: Any, code: int, seconds: float) -> float:
    start = time.monotonic()
    message = await ws.receive_output(timeout=seconds)
    assert message == {"type": "websocket.close", "code": code}
    return time.monotonic() - start


@in_loop
async def test_a_user_deactivated_without_a_signal_loses_the_socket(transactional_db: None):
    user = await sync_to_async(make_user)("elsewhere")
    client = await sync_to_async(signed_in)(user)
    conversation = await sync_to_async(create)()
    async with socket(conversation_path(conversation.id), client) as ws:
        await ws.receive_nothing(timeout=TICK * 2)  # ticks pass while access holds
        await sync_to_async(User.objects.filter(pk=user.pk).update)(is_active=False)
        assert await closed_within(ws, 4401, TICK * 4) <= TICK * 3


def drop_permissions(user_id: int) -> None:
    with connection.cursor() as cursor:  # raw SQL: no m2m_changed, as from another process
        cursor.execute("DELETE FROM auth_user_user_permissions WHERE user_id = %s", [user_id])


@in_loop
async def test_a_permission_removed_without_a_signal_loses_the_socket(transactional_db: None):
    user = await sync_to_async(make_user)("demoted")
    client = await sync_to_async(signed_in)(user)
    async with socket(socket_urls.list_socket_url(), client) as ws:
        await sync_to_async(drop_permissions)(user.pk)
        assert await closed_within(ws, 4403, TICK * 4) <= TICK * 3


@in_loop
async def test_a_sessions_sockets_share_one_check_a_tick(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
):
    checks: list[float] = []
    real = access.check

    def counted(*args: Any, **kwargs: Any) -> Any:
        checks.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(access, "check", counted)
    client = await sync_to_async(signed_in)(await sync_to_async(make_user)("busy"))
    conversation = await sync_to_async(create)()
    path = conversation_path(conversation.id)
    async with socket(path, client) as a, socket(path, client), socket(path, client):
        before = len(checks)  # the three handshakes
        await a.receive_nothing(timeout=TICK * 5)
        ticks = len(checks) - before
    assert 3 <= ticks <= 6, checks  # about one a tick for the session, not three
    await asyncio.sleep(0)
