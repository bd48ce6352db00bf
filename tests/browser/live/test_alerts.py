"""Alerts in a real browser (docs/contract.md §11): an alert fired by what an agent posts
through the API appears live as a badge in the conversation's header and on its list row,
and is acknowledged from the page (an htmx form with CSRF, under the page's CSP)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from conversations.alerts.models import Alert
from conversations.alerts.services import alert_rule_create
from tests.browser.conftest import conversation, off_loop
from tests.browser.live.test_live import (
    agent,  # noqa: F401 (the agent's API client)
    api_token,  # noqa: F401
    open_list,
    open_live,
    post_message,
)

pytestmark = pytest.mark.live

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


def may_acknowledge(username: str) -> None:
    user = get_user_model().objects.get(username=username)
    user.user_permissions.add(Permission.objects.get(codename="change_alert"))


def error(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "boom", "is_error": True}


def test_an_alert_appears_live_and_is_acknowledged_from_the_page(
    operator_page: Any,
    operator: Any,
    agent: Any,  # noqa: F811
    console: Any,
) -> None:
    page = operator_page
    off_loop(lambda: may_acknowledge(operator.username))
    off_loop(lambda: alert_rule_create(kind="tool_error"))
    watched = conversation(HOSTILE, [("user", [{"type": "text", "text": "hello"}])])
    open_live(page, f"/c/{watched.id}/")
    expect(page.locator("#alert-badge")).to_have_count(0)

    post_message(agent, watched, "user", [error("t1")])
    badge = page.locator("#alert-badge")
    expect(badge).to_have_text("1 open alert")
    badge.click()  # opens the list
    expect(page.locator(".alert-item")).to_contain_text("1 tool error in message #1")
    page.get_by_role("button", name="Acknowledge").click()
    expect(page.locator("#alerts")).to_have_attribute("data-open", "0")
    expect(page.locator("#alert-badge")).to_have_count(0)
    alert = off_loop(lambda: Alert.objects.get(conversation_id=watched.id))
    assert alert.acknowledged_at is not None and alert.acknowledged_by == operator.username
    assert page.evaluate("window.__pwned") is None
    assert page.locator("h1").text_content() == HOSTILE
    assert console.unexpected() == []


def test_the_list_row_gets_its_badge_live_and_filters_by_it(
    operator_page: Any,
    agent: Any,  # noqa: F811
    console: Any,
) -> None:
    page = operator_page
    off_loop(lambda: alert_rule_create(kind="tool_error"))
    quiet = conversation("quiet run", [("user", [{"type": "text", "text": "hello"}])])
    watched = conversation("alerted run", [("user", [{"type": "text", "text": "hello"}])])
    open_list(page)
    post_message(agent, watched, "user", [error("t1")])
    row = page.locator(f"#c-{watched.id}")
    expect(row.locator(".badge.alert")).to_have_text("1 open alert")
    expect(page.locator(f"#c-{quiet.id} .badge.alert")).to_have_count(0)

    page.get_by_label("open alerts").check()
    expect(page).to_have_url(re.compile(r"[?&]alerts=open"))
    expect(page.locator(f"#c-{quiet.id}")).to_have_count(0)
    expect(page.locator(f"#c-{watched.id}")).to_have_count(1)
    assert console.unexpected() == []
