"""Context pressure in a real browser (docs/contract.md §7): the pressure view's counts
follow new blocks over the socket, the compaction preview's toggle and highlighting, and
the projection diff, each checked against the API's own numbers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from conversations.core.counting import compact
from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import conversation, off_loop

pytestmark = pytest.mark.live


def rounds(n: int) -> list[tuple[str, list[dict[str, Any]]]]:
    messages: list[tuple[str, list[dict[str, Any]]]] = [
        ("system", [{"type": "text", "text": "You are terse."}]),
        ("user", [{"type": "text", "text": "Read the files."}]),
    ]
    for i in range(n):
        messages.append(("assistant", [
            {"type": "reasoning", "text": f"file {i} next"},
            {"type": "tool_use", "id": f"c{i}", "name": "read", "input": {"path": f"/f{i}"}},
        ]))  # fmt: skip
        messages.append(("user", [
            {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"line of file {i}\n" * 20},
        ]))  # fmt: skip
    return messages


@pytest.fixture
def api(daphne: Any, transactional_db: None) -> Any:
    _, token = off_loop(lambda: api_token_create(label="browser"))
    with daphne.client(token) as client:
        yield client


def test_pressure_counts_follow_new_blocks_live(operator_page, api) -> None:
    page = operator_page
    c = conversation("Pressure", rounds(2))
    page.goto(f"/c/{c.id}/")
    expect(page.locator("#live-status")).to_have_text("live")
    before = api.get(f"/api/conversations/{c.id}/context").json()
    pressure = page.locator("#pressure")
    expect(pressure).to_have_attribute("data-total", str(before["total"]))
    expect(pressure.locator("code.tokenizer")).to_have_text("o200k_base")

    # The agent posts through the API of the same daphne, whose socket then pushes frames.
    last_seq = before["messages"][-1]["seq"]
    block = {"type": "text", "text": "and one more line"}
    assert (
        api.post(f"/api/conversations/{c.id}/messages/{last_seq}/blocks", json=block).status_code
        == 201
    )
    message = {"role": "assistant", "blocks": [{"type": "text", "text": "Done reading."}]}
    assert api.post(f"/api/conversations/{c.id}/messages", json=message).status_code == 201
    after = api.get(f"/api/conversations/{c.id}/context").json()
    assert after["total"] > before["total"]
    expect(page.locator(f"#m-{after['messages'][-1]['seq']}")).to_be_attached()
    expect(pressure).to_have_attribute("data-total", str(after["total"]))
    last = after["messages"][-1]
    expect(page.locator(f"#m-{last['seq']} .tokens")).to_have_attribute(
        "data-tokens", str(last["tokens"])
    )
    grown = after["messages"][-2]
    expect(page.locator(f"#m-{grown['seq']} .tokens")).to_have_attribute(
        "data-tokens", str(grown["tokens"])
    )
    tool_results = after["by_kind"]["tool_result"]
    expect(pressure.locator('[data-kind="tool_result"]')).to_have_attribute(
        "data-tokens", str(tool_results)
    )


def test_compaction_toggle_highlights_changes_and_the_payload_follows(operator_page, api):
    page = operator_page
    c = conversation("Compaction", rounds(4))
    query = {"compact": "microcompact", "keep": "1"}
    expected = api.get(f"/api/conversations/{c.id}/context", params=query).json()
    compacted = api.get(f"/api/conversations/{c.id}/replay", params=query).content
    full = api.get(f"/api/conversations/{c.id}/replay").content

    page.goto(f"/c/{c.id}/")
    page.get_by_role("link", name="Compaction preview").click()
    page.get_by_role("link", name="microcompact").click()
    page.get_by_label("keep").fill("1")
    page.get_by_role("button", name="Apply").click()
    summary = page.locator("#compaction-summary")
    expect(summary).to_have_attribute("data-after", str(expected["compact"]["after"]))
    expect(summary).to_have_attribute("data-before", str(expected["compact"]["before"]))
    changed = page.locator(".changed-block")
    expect(changed).to_have_count(len(expected["compact"]["changed"]))
    expect(changed.first).to_contain_text(compact.CLEARED_RESULT)
    expect(changed.first).to_have_css("outline-style", "solid")

    with page.expect_download() as download:
        page.get_by_role("link", name="Download payload").click()
    assert Path(download.value.path()).read_bytes() == compacted
    page.locator("#copy-payload").click()
    expect(page.locator("#copy-payload")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()").encode() == compacted

    page.get_by_role("link", name="Full payload").click()
    expect(page.get_by_role("link", name="Full payload")).to_have_attribute("aria-current", "true")
    expect(changed).to_have_count(len(expected["compact"]["changed"]))
    expect(changed.first).to_contain_text("the policy changes this")
    expect(changed.first).not_to_contain_text(compact.CLEARED_RESULT)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download payload").click()
    assert Path(download.value.path()).read_bytes() == full


def test_the_diff_view_shows_what_differs_inside_a_message(operator_page) -> None:
    page = operator_page
    c = conversation("Diff", rounds(3))
    page.goto(f"/c/{c.id}/")
    page.get_by_role("link", name="Diff").click()
    page.get_by_role("link", name="Full vs microcompact").click()
    rows = page.locator(".diff-row")
    expect(rows).to_have_count(2 + 2 * 3)
    changed = page.locator('.diff-row[data-status="changed"]')
    expect(changed).to_have_count(0)  # keep=3 of three results: nothing cleared
    page.goto(re.sub(r"$", "&b_keep=1", page.url))
    expect(changed).to_have_count(2)
    expect(changed.first.locator("ins.diff")).to_contain_text("Old tool result content cleared")
    expect(changed.first.locator("del.diff").first).to_contain_text("line of file 0")
    expect(page.locator("#diff-summary")).to_have_attribute("data-differing", "2")
