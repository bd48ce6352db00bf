"""The server's final answers reach the page (docs/contract.md §4, Socket closes): after a sign-out
the page stops reconnecting and offers the sign-in page; a deleted conversation's page says so and
stops; the list drops a deleted conversation's row. Real Chromium, real daphne."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest
from playwright.sync_api import expect

from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import conversation, off_loop
from tests.conftest import Server

pytestmark = pytest.mark.live

WATCH = 4.0  # seconds of watching for reconnect attempts (the first retry comes within 1 s)


@pytest.fixture
def agent(daphne: Server, transactional_db: None) -> Iterator[httpx.Client]:
    _, clear = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(clear) as client:
        yield client


def sockets_opened(page: Any, path: str) -> list[str]:
    """Every socket to `path` the page tries to open from now on, refused or not."""
    opened: list[str] = []
    page.on("websocket", lambda ws: opened.append(ws.url) if path in ws.url else None)
    return opened


def test_after_signing_out_the_page_stops_reconnecting_and_offers_the_sign_in_page(
    operator_page: Any,
) -> None:
    page = operator_page
    c = conversation("watched", [("user", [{"type": "text", "text": "hello"}])])
    opened = sockets_opened(page, f"/ws/conversations/{c.id}/")
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    assert len(opened) == 1

    other = page.context.new_page()  # the same session, signing out in another tab
    other.goto("/")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url("**/accounts/login/")

    notice = page.locator("#live-notice")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("you are signed out")
    expect(page.locator("#live-status")).to_have_text("stopped")
    link = notice.get_by_role("link", name="Sign in")
    assert link.get_attribute("href") == f"/accounts/login/?next=%2Fc%2F{c.id}%2F"
    time.sleep(WATCH)
    assert len(opened) == 1, f"the page kept reconnecting: {opened}"
    expect(page.locator("#m-0")).to_be_visible()  # what it showed stays

    link.click()
    page.wait_for_url("**/accounts/login/?next=*")


def test_a_deleted_conversations_open_page_is_told_and_stops(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    c = conversation("doomed", [("user", [{"type": "text", "text": "soon gone"}])])
    kept = conversation("kept", [])
    listing = page.context.new_page()
    listing.goto("/")
    expect(listing.locator(f"#c-{c.id}")).to_be_visible()
    expect(listing.locator(f"#c-{kept.id}")).to_be_visible()

    opened = sockets_opened(page, f"/ws/conversations/{c.id}/")
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")

    assert agent.delete(f"/api/conversations/{c.id}").status_code == 204

    notice = page.locator("#live-notice")
    expect(notice).to_contain_text("This conversation was deleted")
    expect(notice.get_by_role("link")).to_have_count(0)
    expect(page.locator("#live-status")).to_have_text("stopped")
    expect(listing.locator(f"#c-{c.id}")).to_have_count(0)  # dropped live from the list
    expect(listing.locator(f"#c-{kept.id}")).to_be_visible()
    time.sleep(WATCH)
    assert len(opened) == 1, f"the page kept reconnecting: {opened}"


def test_a_deletion_is_told_where_the_reader_is_and_its_actions_are_disabled(
    operator_page: Any, agent: httpx.Client
) -> None:
    page = operator_page
    blocks = [{"type": "text", "text": f"line {n}\n" * 30} for n in range(40)]
    c = conversation("long and doomed", [("user", [b]) for b in blocks])
    page.goto(f"/c/{c.id}/#m-20")  # deep in the page, far from its top
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")

    assert agent.delete(f"/api/conversations/{c.id}").status_code == 204

    notice = page.locator("#live-notice")
    expect(notice).to_contain_text("This conversation was deleted")
    box = notice.bounding_box()
    viewport = page.viewport_size
    assert box is not None and viewport is not None
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], box  # in view
    expect(notice).to_be_in_viewport()
    expect(page.locator("#copy-payload")).to_be_disabled()
    for link in ("#download-payload", "#context-link", "#diff-link"):
        expect(page.locator(link)).to_have_attribute("aria-disabled", "true")
        assert page.locator(link).get_attribute("href") is None
    expect(page.locator("#m-20 .copy-projection")).to_be_disabled()
