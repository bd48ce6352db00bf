"""Comparing two runs in a real browser (docs/contract.md §9): the page opens at the first
divergence, identical runs are folded and open on demand, rows link to their messages, and
"Compare with…" leads from a conversation to the comparison."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import conversation

pytestmark = pytest.mark.live


def questions(n: int, changed: dict[int, str] | None = None) -> list[tuple[str, list[Any]]]:
    changed = changed or {}
    return [
        (
            "user" if i % 2 == 0 else "assistant",
            [{"type": "text", "text": changed.get(i, f"line {i}")}],
        )
        for i in range(n)
    ]


def in_view(page: Any, selector: str) -> bool:
    return bool(
        page.evaluate(
            """(selector) => {
                const box = document.querySelector(selector).getBoundingClientRect();
                return box.top >= 0 && box.top < window.innerHeight;
            }""",
            selector,
        )
    )


def test_the_page_opens_at_the_first_divergence(operator_page) -> None:
    page = operator_page
    # Far enough down that the row is below the first screen unless the page scrolls.
    a = conversation("Run A", questions(460))
    b = conversation("Run B", questions(460, {430: "a different answer", 450: "and another"}))
    page.goto(f"/compare/?a={a.id}&b={b.id}")
    first = page.locator(".compare-row.first-divergence")
    expect(first).to_have_attribute("id", "row-430")
    expect(first).to_be_in_viewport()
    assert in_view(page, "#row-430")
    assert page.evaluate("window.scrollY") > 0
    expect(first.locator("del.diff")).to_have_text("line 430")
    expect(first.locator("ins.diff")).to_have_text("a different answer")
    # A row's link leads to that message in its conversation.
    first.locator(".side-b a.seq-link").click()
    page.wait_for_url(f"**/c/{b.id}/#m-430")
    expect(page.locator("#m-430")).to_be_visible()


def test_identical_runs_fold_and_open_on_demand(operator_page) -> None:
    page = operator_page
    a = conversation("Same A", questions(40))
    b = conversation("Same B", questions(40, {20: "changed"}))
    page.goto(f"/compare/?a={a.id}&b={b.id}")
    folds = page.locator(".compare-fold")
    expect(folds).to_have_count(2)
    expect(folds.nth(0).locator(".fold-label")).to_have_text("19 identical messages")
    expect(folds.nth(1).locator(".fold-label")).to_have_text("18 identical messages")
    expect(page.locator(".compare-row")).to_have_count(3)
    folds.nth(0).locator("a.open-fold").click()
    expect(page.locator(".compare-fold")).to_have_count(1)
    expect(page.locator(".compare-row")).to_have_count(22)
    expect(page.locator("#row-0")).to_be_in_viewport()


def test_compare_with_leads_from_a_conversation_to_the_comparison(operator_page) -> None:
    page = operator_page
    a = conversation("Original run", questions(6))
    conversation("Second run", questions(6, {3: "otherwise"}))
    page.goto(f"/c/{a.id}/")
    page.locator("#compare-link").click()
    page.locator("#pick-form input[name=q]").fill("Second")
    page.locator("#pick-form button[type=submit]").click()
    page.locator("#pick-found a", has_text="Second run").click()
    expect(page.locator("#what-changed")).to_contain_text("The runs part at A #3 and B #3")
    expect(page.locator(".compare-row.first-divergence")).to_have_attribute("id", "row-3")
