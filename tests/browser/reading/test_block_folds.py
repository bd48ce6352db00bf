"""A message of many blocks in a real browser (docs/contract.md §4 Bounds): the conversation
page and the compaction preview show its first 100 blocks and load the rest on demand, each
block once, hostile text as text."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import conversation, off_loop

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


def test_a_live_block_keeps_the_blocks_the_reader_loaded(operator_page, daphne):
    """A message folded past 100 blocks, 200 of them loaded, grows live: the frame's message
    comes folded again, and the page loads back what the reader had, each block once."""
    from tests.browser.live.test_live import WATCH_SOCKETS

    page = operator_page
    cid = many_blocks()
    _, token = off_loop(lambda: api_token_create(label="agent"))
    page.add_init_script(WATCH_SOCKETS)
    page.goto(f"/c/{cid}/")
    expect(page.locator("#live-status")).to_have_text("live")
    sections = page.locator("#m-1 .record section.block")
    page.locator("#m-1 .record .block-fold").get_by_role("button", name="Load more blocks").click()
    expect(sections).to_have_count(200)
    with daphne.client(token) as agent:
        block = {"type": "text", "text": "one more, live"}
        response = agent.post(f"/api/conversations/{cid}/messages/1/blocks", json=block)
        assert response.status_code == 201, response.text
    expect(page.locator("#m-1")).to_have_attribute("data-blocks", "251")
    expect(sections).to_have_count(200)
    expect(page.locator("#m-1 .record .block-fold")).to_contain_text("51 more blocks")
    seqs = sections.evaluate_all("(all) => all.map((s) => Number(s.dataset.block))")
    assert seqs == list(range(200))
