"""Share links in Chromium (docs/contract.md §8): a stakeholder with no account opens the link,
watches it grow, and sees it stop and say so when the operator revokes it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import expect

from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import (
    Account,
    conversation,
    make_user,
    off_loop,
    sign_in,
    watched_context,
)
from tests.conftest import Server


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


@pytest.fixture
def agent(daphne: Server, transactional_db: None) -> Iterator[httpx.Client]:
    _, clear = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(clear) as client:
        yield client


def test_signed_out_share_page_goes_live_then_says_it_was_revoked(
    page: Any, agent: Any, console: Any
) -> None:
    console.allow("status of 410 (Gone)")  # the reload at the end
    c = conversation("shared run", [("user", [text("Deploy the fix.")])])
    made = agent.post(f"/api/conversations/{c.id}/shares", json={})
    assert made.status_code == 201, made.text
    page.goto(made.json()["url"])
    expect(page.locator("#share-notice")).to_contain_text("Shared read-only view (live)")
    expect(page.locator("#m-0 .record")).to_contain_text("Deploy the fix.")
    expect(page.locator("#live-status")).to_have_text("live")
    expect(page.locator("#shares")).to_have_count(0)

    body = {"role": "assistant", "blocks": [text("Deploying now.")]}
    assert agent.post(f"/api/conversations/{c.id}/messages", json=body).status_code == 201
    expect(page.locator("#m-1 .projection")).to_contain_text("Deploying now.")

    assert agent.delete(f"/api/shares/{made.json()['id']}").status_code == 204
    notice = page.locator("#share-notice")
    expect(notice).to_have_attribute("data-state", "revoked")
    expect(notice).to_contain_text("This share link was revoked; the page no longer updates.")
    expect(page.locator("#live-status")).to_have_text("stopped")
    # The socket's close (4410) is final: the page does not reconnect, and says why.
    expect(page.locator("#live-notice")).to_contain_text("revoked or has expired")

    body = {"role": "user", "blocks": [text("Not for the stakeholder.")]}
    assert agent.post(f"/api/conversations/{c.id}/messages", json=body).status_code == 201
    page.wait_for_timeout(1500)
    expect(page.locator("#m-2")).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text("Not for the stakeholder.")
    socket_url = page.url.replace("http", "ws", 1).replace("/s/", "/ws/s/", 1)
    assert [e for e in console.sockets if e.startswith("open")] == [
        f"open {socket_url}?vision=1&shape=openai&report=1"
    ], console.sockets  # one socket, never reopened after the 4410

    page.reload()
    expect(page.locator("h1")).to_have_text("This link is no longer valid")


def test_operator_shares_the_first_messages_and_copies_the_link_once(
    context: Any, page: Any, daphne: Server, console: Any
) -> None:
    account: Account = off_loop(lambda: make_user(operator=True))

    def grant() -> None:
        User.objects.get(username=account.username).user_permissions.add(
            Permission.objects.get(
                content_type__app_label="conversations", codename="share_conversation"
            )
        )

    off_loop(grant)
    c = conversation("long run", [("user", [text(f"step {n}")]) for n in range(45)])
    page.goto("/accounts/login/")
    sign_in(page, account)
    page.wait_for_url("/")
    page.goto(f"/c/{c.id}/")
    shares = page.locator("#shares")
    shares.get_by_label("Up to message #").fill("39")
    shares.get_by_role("button", name="Share").click()
    field = page.locator("#new-share-url")
    expect(field).to_be_visible()
    url = field.input_value()
    assert url.startswith(f"{daphne.url}/s/")
    page.get_by_role("button", name="Copy link").click()
    assert page.evaluate("navigator.clipboard.readText()") == url
    expect(page.locator("#shares tbody tr")).to_have_count(1)
    expect(page.locator("#shares tbody tr")).to_contain_text("frozen, #0 to #39")

    # Watched as every page is: a console error (a CSP violation) on the shared page fails.
    with watched_context(context.browser, daphne, console) as stranger:
        shared = stranger.new_page()
        shared.goto(url)
        expect(shared.locator("#messages > article.message")).to_have_count(40)
        expect(shared.locator("#live-status")).to_have_text("frozen")

    page.reload()
    expect(page.locator("#shares tbody tr")).to_contain_text("1")  # one view
    assert url not in page.content()  # shown once
    page.locator("#shares").get_by_role("button", name="Revoke").click()
    expect(page.locator("#shares tbody tr")).to_have_attribute("data-state", "revoked")
