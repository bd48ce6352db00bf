"""Alerts live (docs/contract.md §11): a fired or acknowledged alert reaches the list's
row and the conversation's header through the page sockets, rendered as a fresh page
load renders them; share sockets hear nothing of them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission, User
from django.test import Client

from conversations.alerts.models import Alert
from conversations.alerts.services import alert_acknowledge, alert_rule_create
from conversations.dashboard import socket_urls as routing
from conversations.sharing.services import share_create
from tests.builders import tool_result
from tests.live.test_consumers import (
    QUIET,
    append,
    assert_row_is_fresh,
    conversation_path,
    create,
    frame,
    fresh_channel_layer,  # noqa: F401 (an autouse fixture of these tests too)
    in_loop,
    operator,  # noqa: F401
    page,
    plain_static_storage,  # noqa: F401
    socket,
)
from tests.sharing.test_share_consumers import share_path, share_socket

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

ALERTS = re.compile(r'<div id="alerts".*?</div>\n', re.S)


def alerts_of(html: str) -> str:
    found = ALERTS.search(html)
    assert found is not None, html[:300]
    return found.group(0)


def error(conversation_id: Any) -> None:
    append(conversation_id, "user", [tool_result("t", "<b>boom</b>", is_error=True)])


def may_acknowledge(username: str = "operator") -> None:
    user = User.objects.get(username=username)
    user.user_permissions.add(Permission.objects.get(codename="change_alert"))


@in_loop
async def test_the_header_gets_the_alert_as_the_page_renders_it(operator: Client) -> None:  # noqa: F811
    await sync_to_async(may_acknowledge)()
    await sync_to_async(alert_rule_create)(kind="tool_error")
    conversation = await sync_to_async(create)("Watched")
    cid = conversation.pk
    async with socket(conversation_path(cid), operator) as ws:
        await sync_to_async(error)(cid)
        frames = [await frame(ws), await frame(ws)]  # the message, then the alerts
        pushed = alerts_of(next(f for f in frames if 'id="alerts"' in f))
        fresh = alerts_of(await sync_to_async(page)(operator, f"/c/{cid}/"))
        assert "1 open alert" in pushed
        # The fresh page carries a CSRF token in its form; the frame's form rides on hx-headers.
        strip = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken"[^>]*>')
        assert strip.sub("", pushed) == strip.sub("", fresh)
        alert = await sync_to_async(Alert.objects.get)(conversation_id=cid)
        await sync_to_async(operator.post)(
            f"/c/{cid}/alerts/{alert.pk}/acknowledge", HTTP_HX_REQUEST="true"
        )
        cleared = alerts_of(await frame(ws))
        assert "open alert" not in cleared and 'data-open="0"' in cleared
        assert await ws.receive_nothing(QUIET)


@in_loop
async def test_the_list_row_gets_its_badge(operator: Client) -> None:  # noqa: F811
    await sync_to_async(alert_rule_create)(kind="tool_error")
    conversation = await sync_to_async(create)("Listed")
    cid = conversation.pk
    async with socket(routing.list_socket_url(), operator) as ws:
        await sync_to_async(error)(cid)
        await frame(ws)  # the new message's row
        row = await assert_row_is_fresh(await frame(ws), operator, cid)
        assert "1 open alert" in row


@in_loop
async def test_a_share_socket_hears_nothing_of_alerts() -> None:
    await sync_to_async(alert_rule_create)(kind="tool_error")
    conversation = await sync_to_async(create)("Shared")
    _, token = await sync_to_async(share_create)(conversation=conversation)
    async with share_socket(share_path(token)) as ws:
        await sync_to_async(error)(conversation.pk)
        frames = [await frame(ws)]
        assert await ws.receive_nothing(QUIET)
        assert all("alert" not in f for f in frames)


@in_loop
async def test_the_header_offers_acknowledging_only_to_who_may(operator: Client) -> None:  # noqa: F811
    """A socket's alerts carry the acknowledge button as the user's page does: not without
    conversations.change_alert, and once it is granted, with the next change."""
    await sync_to_async(alert_rule_create)(kind="tool_error")
    conversation = await sync_to_async(create)("Watched")
    cid = conversation.pk
    async with socket(conversation_path(cid), operator) as ws:
        await sync_to_async(error)(cid)
        frames = [await frame(ws), await frame(ws)]  # the message, then the alerts
        pushed = alerts_of(next(f for f in frames if 'id="alerts"' in f))
        assert "1 open alert" in pushed and "acknowledge" not in pushed
        assert pushed == alerts_of(await sync_to_async(page)(operator, f"/c/{cid}/"))
        await sync_to_async(may_acknowledge)()
        alert = await sync_to_async(Alert.objects.get)(conversation_id=cid)
        await sync_to_async(alert_acknowledge)(alert=alert, by="ops")
        assert 'data-open="0"' in alerts_of(await frame(ws))
        await sync_to_async(error)(cid)
        frames = [await frame(ws), await frame(ws)]
        pushed = alerts_of(next(f for f in frames if 'id="alerts"' in f))
        assert "1 open alert" in pushed and "/acknowledge" in pushed
