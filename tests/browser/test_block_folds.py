"""A message of many blocks in a real browser (docs/contract.md §4 Bounds): the conversation
page and the compaction preview show its first 100 blocks and load the rest on demand, each
block once, hostile text as text."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import conversation

pytestmark = pytest.mark.live

HOSTILE = '<img src=x onerror="window.pwned=1"><b hx-get="/">bold</b>'


def many_blocks() -> str:
    results = [
        {"type": "tool_result", "tool_use_id": f"c{i}", "name": "read",
         "content": HOSTILE if i == 180 else f"out {i}"}
        for i in range(250)
    ]  # fmt: skip
    stored = conversation(
        "Many blocks", [("user", [{"type": "text", "text": "go"}]), ("user", results)]
    )
    return str(stored.id)


def test_the_conversation_page_loads_a_messages_other_blocks_on_demand(operator_page):
    page = operator_page
    cid = many_blocks()
    page.goto(f"/c/{cid}/")
    sections = page.locator("#m-1 .record section.block")
    expect(sections).to_have_count(100)
    fold = page.locator("#m-1 .record .block-fold")
    expect(fold).to_contain_text("150 more blocks not shown here")
    fold.get_by_role("button", name="Load more blocks").click()
    expect(sections).to_have_count(200)
    expect(fold).to_contain_text("50 more blocks not shown here")
    fold.get_by_role("button", name="Load more blocks").click()
    expect(sections).to_have_count(250)
    expect(fold).to_have_count(0)
    seqs = sections.evaluate_all("(all) => all.map((s) => Number(s.dataset.block))")
    assert seqs == list(range(250))
    expect(page.locator('#m-1 [data-block="180"] pre')).to_have_text(HOSTILE)
    assert page.evaluate("window.pwned") is None


def test_the_compaction_preview_loads_a_messages_other_blocks_on_demand(operator_page):
    page = operator_page
    cid = many_blocks()
    page.goto(f"/c/{cid}/context?compact=microcompact")
    sections = page.locator("#m-1 section.block")
    expect(sections).to_have_count(100)
    fold = page.locator("#m-1 .block-fold")
    expect(fold).to_contain_text("150 more blocks folded (from block 100), 147 of them changed")
    fold.get_by_role("button", name="Load more blocks").click()
    expect(sections).to_have_count(200)
    fold.get_by_role("button", name="Load more blocks").click()
    expect(sections).to_have_count(250)
    expect(fold).to_have_count(0)
    expect(page.locator("#m-1 section.block[data-changed]")).to_have_count(247)
    assert page.evaluate("window.pwned") is None
