"""Zoom and reflow (docs/guide/dashboard.md, Accessibility; WCAG 2.1 1.4.10 and 2.4.7): at 200 %
zoom (a 720×450 viewport) and on a phone no Tab stop of a conversation page is hidden behind the
sticky header or the bottom toolbar, and at 320 px no page scrolls sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from conversations.sharing.services import share_create
from tests.browser.conftest import conversation, off_loop
from tests.browser.reading.test_compare import questions
from tests.browser.reading.test_layout import every_kind, sharer

pytestmark = pytest.mark.live

# The focused element: its box inside the viewport, and at its centre (and just inside its
# top and bottom edges) the topmost element is itself or inside it, not a bar over it.
FOCUSED = """
() => {
  const e = document.activeElement;
  if (!e || e === document.body) { return null; }
  const box = e.getBoundingClientRect();
  // An inline element's largest fragment (a link around a block image has empty ones).
  const part = Array.from(e.getClientRects())
    .reduce((a, b) => (b.width * b.height > a.width * a.height ? b : a), { width: 0, height: 0 });
  const x = part.left + part.width / 2;
  const name = (hit) => hit.tagName.toLowerCase() + (hit.id ? "#" + hit.id : "") +
    (typeof hit.className === "string" && hit.className ? "." + hit.className : "");
  const own = (hit) => e === hit || e.contains(hit) || (hit.tagName === "LABEL" && hit.contains(e));
  const covered = [part.top + part.height / 2, part.top + 1, part.bottom - 1]
    .map((y) => document.elementFromPoint(x, y))
    .filter((hit) => !hit || !own(hit))
    .map((hit) => (hit ? name(hit) : "nothing"));
  const inside = box.top >= 0 && box.left >= 0 && box.bottom <= window.innerHeight + 0.5 &&
    box.right <= window.innerWidth + 0.5;
  return {
    element: e.outerHTML.slice(0, 100), top: Math.round(box.top), bottom: Math.round(box.bottom),
    inside, covered,
  };
}
"""


@pytest.mark.parametrize(
    "viewport", [(720, 450), (390, 844), (1440, 900)], ids=["200%-zoom", "phone", "desktop"]
)
def test_no_tab_stop_of_a_conversation_hides_behind_a_sticky_bar(page, transactional_db, viewport):
    width, height = viewport
    c = every_kind()
    sharer(page)
    off_loop(lambda: share_create(conversation=c))  # the share links' table too
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    seen, hidden = [], []
    for _ in range(200):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if focused is None or (seen and focused["element"] == seen[0]["element"]):
            break  # out of the page, or round to the first stop again
        seen.append(focused)
        if not focused["inside"] or focused["covered"]:
            hidden.append(focused)
    assert len(seen) > 40, f"only {len(seen)} Tab stops"
    assert not hidden, f"{len(hidden)} of {len(seen)} Tab stops hidden:\n" + "\n".join(
        f"{h['element']} (top {h['top']}, bottom {h['bottom']}) under {h['covered']}"
        for h in hidden
    )


def test_no_page_scrolls_sideways_at_320_px(page, transactional_db):
    c = every_kind()
    a = conversation("Run A", questions(30))
    b = conversation("Run B", questions(30, {20: "a different answer " + "x" * 300}))
    _, token = off_loop(lambda: share_create(conversation=c))
    page.set_viewport_size({"width": 320, "height": 640})
    page.goto("/accounts/login/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 320
    sharer(page)
    wide = []
    for url in [
        f"/s/{token}/",
        "/",
        "/?q=deploy",
        f"/c/{c.id}/",
        f"/c/{c.id}/context",
        f"/c/{c.id}/context?compact=clear_tool_uses",
        f"/c/{c.id}/diff?b_vision=0",
        f"/c/{c.id}/diff?b_shape=anthropic",
        f"/c/{a.id}/diff?b_conversation={b.id}",
        f"/compare/?a={a.id}&b={b.id}",
        f"/compare/?a={a.id}",
    ]:
        page.goto(url)
        expect(page.locator("main")).to_be_visible()
        scroll = page.evaluate("document.documentElement.scrollWidth")
        if scroll > 320:
            culprits = page.evaluate(
                """() => Array.from(document.querySelectorAll("main *"))
                     .filter((e) => e.getBoundingClientRect().right > 320.5)
                     .slice(0, 3).map((e) => e.outerHTML.slice(0, 90))"""
            )
            wide.append(f"{url}: {scroll} px wide, {culprits}")
    assert not wide, "\n".join(wide)


STICKY = """() => {
  const head = document.querySelector(".conv-head");
  const summary = document.getElementById("next-summary");
  return [getComputedStyle(head).position, Math.ceil(head.getBoundingClientRect().height),
    getComputedStyle(document.documentElement).scrollPaddingTop,
    summary === null ? 0 : Math.ceil(summary.getBoundingClientRect().height)];
}"""


def test_the_header_sticks_only_where_it_leaves_room_and_pads_the_scroll(operator_page):
    page = operator_page
    c = conversation("Config hunt", [("user", [{"type": "text", "text": "Why?"}])] * 3)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/c/{c.id}/")
    position, height, padding, summary = page.evaluate(STICKY)
    assert position == "sticky" and height < 300 and 0 < summary < 100
    # The header's height, the sticky next-request line's below it, and a margin for the
    # focus ring.
    assert padding == f"{height + summary + 8}px"
    for short in [{"width": 720, "height": 450}, {"width": 1440, "height": 480}]:
        page.set_viewport_size(short)
        expect(page.locator(".conv-head")).to_have_css("position", "static")
        page.wait_for_function(
            "getComputedStyle(document.documentElement).scrollPaddingTop == "
            "`${Math.ceil(document.getElementById('next-summary')"
            ".getBoundingClientRect().height) + 8}px`"
        )
    # A header taller than a third of the window (a long title, wrapped) scrolls away.
    tall = every_kind()
    page.set_viewport_size({"width": 1024, "height": 768})
    page.goto(f"/c/{tall.id}/")
    position, height, padding, summary = page.evaluate(STICKY)
    assert height > 768 / 3 and (position, padding) == ("static", f"{summary + 8}px")
