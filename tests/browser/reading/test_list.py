"""The conversation list in a real browser (docs/guide/dashboard.md): its filters, its number
columns and its search box, at desktop (1440 px) and phone (390 px) widths."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import MessageIn
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create
from tests.browser.conftest import conversation, off_loop

pytestmark = pytest.mark.live

WIDTHS = [pytest.param(1440, id="1440px"), pytest.param(390, id="390px")]


def three() -> None:
    conversation(
        "Deploy failed",
        [
            ("assistant", [{"type": "tool_use", "id": "a", "name": "deploy", "input": {}}]),
            (
                "user",
                [{"type": "tool_result", "tool_use_id": "a", "content": "boom", "is_error": True}],
            ),  # fmt: skip
        ],
    )
    conversation(
        "Deploy waiting",
        [("assistant", [{"type": "tool_use", "id": "b", "name": "deploy", "input": {}}])],
    )
    conversation("Deploy fine", [("user", [{"type": "text", "text": "all good"}])])


def many_messages(count: int) -> Conversation:
    def store() -> Conversation:
        created = conversation_create(title=f"{count} messages")
        batch = [MessageIn(role="user", blocks=[]) for _ in range(count)]
        messages_append(conversation=created, messages=batch)
        return created

    return off_loop(store)


def query(page: Any) -> dict[str, list[str]]:
    return parse_qs(urlsplit(page.url).query)


def inside_the_viewport(page: Any, locator: Any) -> None:
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (box, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_filters_narrow_the_list_and_the_url_follows(operator_page: Any, width: int) -> None:
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    three()
    page.goto("/")
    rows = page.locator("#results tr.row")
    expect(rows).to_have_count(3)
    errors = page.get_by_label("has errors")
    unanswered = page.get_by_label("unanswered tool call")
    for box in (errors, unanswered):
        inside_the_viewport(page, box)
    errors.check()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Deploy failed")
    expect(page).to_have_url("/?q=&has_errors=1")
    unanswered.check()
    expect(rows).to_have_count(0)
    expect(page.locator("#results .empty")).to_have_text("No conversation matches these filters.")
    errors.uncheck()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Deploy waiting")
    assert query(page) == {"unanswered": ["1"]}  # parse_qs leaves out the empty q
    page.get_by_role("searchbox", name="Search").fill("fine")
    expect(page.locator("#results .empty")).to_have_text(
        "No conversation matches “fine” with these filters."
    )
    page.reload()  # the URL holds the view: a reload (or a copied link) shows it again
    expect(page.get_by_label("unanswered tool call")).to_be_checked()
    expect(page.get_by_label("has errors")).not_to_be_checked()
    expect(page.get_by_role("searchbox", name="Search")).to_have_value("fine")
    expect(rows).to_have_count(0)


@pytest.mark.parametrize("width", WIDTHS)
def test_number_columns_are_right_aligned_with_thousands_separators(
    operator_page: Any, width: int
) -> None:
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    big = many_messages(1234)
    page.goto("/")
    row = page.locator(f"#c-{big.id}")
    count = row.locator("td.num").first
    expect(count).to_have_text("1,234")
    errors = row.locator("td.errors")
    for cell in (count, errors, *page.locator("th.num").all()):
        assert cell.evaluate("e => getComputedStyle(e).textAlign") == "right"
    # Measured, not only declared: the figures end at the cell's right padding.
    text_right, cell_right, padding = count.evaluate(
        """e => { const r = document.createRange(); r.selectNodeContents(e);
                  return [r.getBoundingClientRect().right, e.getBoundingClientRect().right,
                          parseFloat(getComputedStyle(e).paddingRight)]; }"""
    )
    assert abs(cell_right - padding - text_right) < 1.5, (text_right, cell_right, padding)
    inside_the_viewport(page, count)


def test_typing_a_search_replaces_the_url_without_adding_history(operator_page: Any) -> None:
    page = operator_page
    three()
    page.goto("/")
    before = page.evaluate("history.length")
    search = page.get_by_role("searchbox", name="Search")
    rows = page.locator("#results tr.row")
    for typed, expected in (("dep", 3), ("deploy wait", 1), ("deploy fa", 1)):
        search.fill(typed)  # each a pause long enough for its own request
        expect(rows).to_have_count(expected)
        page.wait_for_function(
            "q => new URLSearchParams(location.search).get('q') === q", arg=typed
        )
    page.get_by_label("has errors").check()
    expect(rows).to_have_count(1)
    page.wait_for_function("() => new URLSearchParams(location.search).get('has_errors') === '1'")
    expect(page.get_by_label("has errors")).to_be_checked()
    page.get_by_label("has errors").uncheck()
    page.wait_for_function("() => !new URLSearchParams(location.search).has('has_errors')")
    expect(rows.first).to_contain_text("Deploy failed")
    assert page.evaluate("history.length") == before
    assert query(page) == {"q": ["deploy fa"]}


def test_last_activity_is_relative_and_says_the_viewers_time_and_utc_on_hover(
    operator_page: Any,
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    page = operator_page
    old = conversation("Three hours ago", [("user", [{"type": "text", "text": "then"}])])
    when = timezone.now() - timedelta(hours=3, minutes=5)
    off_loop(lambda: Conversation.objects.filter(pk=old.pk).update(updated_at=when))
    conversation("Just now", [("user", [{"type": "text", "text": "now"}])])
    page.clock.install()  # the page's clock, moved forward below
    page.goto("/")
    fresh = page.locator("#results tr.row", has_text="Just now").locator("time")
    older = page.locator("#results tr.row", has_text="Three hours ago").locator("time")
    expect(fresh).to_have_text("just now")  # not "0 minutes ago"
    expect(older).to_have_text("3\xa0hours ago")
    title = older.get_attribute("title") or ""
    assert when.strftime("%Y-%m-%d %H:%M:%S UTC") in title, title
    page.clock.fast_forward("02:10")
    expect(fresh).to_have_text("2\xa0minutes ago")
