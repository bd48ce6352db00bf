"""The next-request figure stays in view (docs/guide/context-pressure.md): a conversation
opened and read at its tail, on a phone and on a desktop, still shows it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import conversation

pytestmark = pytest.mark.live


def long_run() -> Any:
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for i in range(30):
        turns.append(("user", [{"type": "text", "text": f"question {i} " + "words " * 60}]))
        turns.append(("assistant", [{"type": "text", "text": f"answer {i} " + "more " * 60}]))
    return conversation("Long run", turns)


@pytest.mark.parametrize("width", [390, 1440])
def test_the_next_request_stays_in_view_at_the_tail(operator_page, width) -> None:
    c = long_run()
    page = operator_page
    page.set_viewport_size({"width": width, "height": 844})
    page.goto(f"/c/{c.id}/")
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.locator("#m-59").wait_for()
    summary = page.locator("#next-summary")
    box = summary.bounding_box()
    assert box is not None and box["height"] > 0
    assert box["y"] >= 0 and box["y"] + box["height"] <= 844
    # Nothing covers it: the point at its middle belongs to it.
    middle = (box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    assert page.evaluate(
        "([x, y]) => document.getElementById('next-summary').contains("
        "document.elementFromPoint(x, y))",
        list(middle),
    )
    assert "tokens next request" in summary.inner_text()
