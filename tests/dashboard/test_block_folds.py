"""Pages hold a bounded number of blocks per message (docs/contract.md §4 Bounds): on the
conversation page and the compaction preview the rest are folded, counted (on the preview
with how many of them the policy changed) and loaded on demand, a fragment at a time, each
block exactly once; a share page says how many it leaves out."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER, TextIn, ToolResultIn
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from conversations.sharing.services import share_create

RESULTS = 250


@pytest.fixture
def many_results(db: None) -> Conversation:
    """A user message of 250 tool results: microcompact (keep 3) changes the first 247."""
    conversation = conversation_create(title="Many results")
    message_append(conversation=conversation, role="user", blocks=[TextIn(type="text", text="go")])
    results = [
        ToolResultIn(type="tool_result", tool_use_id=f"c{i}", name="read", content=f"out {i}")
        for i in range(RESULTS)
    ]
    message_append(conversation=conversation, role="user", blocks=results)
    return conversation


def services_block(fields: dict[str, Any]) -> Any:
    return BLOCK_ADAPTER.validate_python(fields)


def message_html(page: str, seq: int) -> str:
    start = page.index(f'<article id="m-{seq}"')
    return page[start : page.index("</article>", start)]


def block_seqs(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'<section class="block[^"]*" data-block="(\d+)"', html)]


def changed_seqs(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-block="(\d+)" data-changed="1"', html)]


def fold(html: str) -> dict[str, Any] | None:
    found = re.search(
        r'class="truncated block-fold" data-from="(\d+)" data-folded="(\d+)" '
        r'data-changed="(\d+)">([^<]*)<button type="button" hx-get="([^"]+)"',
        html,
    )
    if found is None:
        return None
    start, count, changed, label, url = found.groups()
    return {
        "from": int(start),
        "count": int(count),
        "changed": int(changed),
        "label": label.strip(),
        "url": unescape(url),
    }


def test_a_message_of_many_blocks_is_folded_and_loaded_on_demand(
    operator_client: Client, many_results: Conversation
) -> None:
    page = operator_client.get(f"/c/{many_results.pk}/context", {"compact": "microcompact"})
    assert page.status_code == 200
    html = message_html(page.content.decode(), 1)
    seen, changed = block_seqs(html), changed_seqs(html)
    assert seen == list(range(100))
    first = fold(html)
    assert first is not None
    assert (first["from"], first["count"], first["changed"]) == (100, 150, 147)
    assert (
        first["label"]
        == "150 more blocks folded (from block 100), 147 of them changed by the policy."
    )
    url = first["url"]
    while (more := fold(html)) is not None:
        assert more["from"] == len(seen)
        assert more["changed"] == max(0, RESULTS - 3 - more["from"])
        fragment = operator_client.get(more["url"])
        assert fragment.status_code == 200
        html = fragment.content.decode()
        seen += block_seqs(html)
        changed += changed_seqs(html)
    assert seen == list(range(RESULTS))  # every block once, in order
    assert changed == list(range(RESULTS - 3))  # every change marked, folded or not
    assert "compact=microcompact" in url and "blocks_of=1" in url


def test_the_fold_follows_the_full_payload_toggle_and_refuses_what_is_not_there(
    operator_client: Client, many_results: Conversation
) -> None:
    base = {"compact": "microcompact", "payload": "full", "blocks_of": "1"}
    fragment = operator_client.get(f"/c/{many_results.pk}/context", base | {"blocks_from": "240"})
    assert block_seqs(fragment.content.decode()) == list(range(240, 250))
    assert "the policy changes this" in fragment.content.decode()  # the full payload's words
    for query, status in (
        ({"blocks_from": "250"}, 404),
        ({"blocks_of": "7", "blocks_from": "0"}, 404),
        ({"blocks_from": "<b>1</b>"}, 400),
        ({"blocks_from": ""}, 400),
    ):
        answer = operator_client.get(f"/c/{many_results.pk}/context", base | query)
        assert answer.status_code == status, query
        assert b"<b>1</b>" not in answer.content


def test_a_fragment_needs_an_operator(
    client: Client, outsider_client: Client, many_results: Conversation
) -> None:
    path = f"/c/{many_results.pk}/context?blocks_of=1&blocks_from=100"
    assert client.get(path).status_code == 302
    assert outsider_client.get(path).status_code == 403


def test_one_message_never_takes_more_than_2_mb_of_the_page(
    operator_client: Client, db: None
) -> None:
    """Quotes escape to six bytes each: 100 blocks of 4,000 would be 2.4 MB."""
    conversation = conversation_create(title="Quotes")
    blocks = [TextIn(type="text", text='"' * 5000) for _ in range(150)]
    message_append(conversation=conversation, role="user", blocks=blocks)
    page = operator_client.get(f"/c/{conversation.pk}/context").content.decode()
    html = message_html(page, 0)
    assert len(html.encode()) <= 2 * 1024 * 1024
    shown = block_seqs(html)
    found = fold(html)
    assert found is not None
    assert found["from"] == len(shown) < 100
    assert found["count"] == 150 - len(shown)


def test_a_message_of_20000_blocks_keeps_the_page_small(operator_client: Client, db: None) -> None:
    conversation = conversation_create(title="Letters")
    blocks = [TextIn(type="text", text="a")] * 20_000
    message_append(conversation=conversation, role="assistant", blocks=blocks)
    page = operator_client.get(f"/c/{conversation.pk}/context")
    assert len(page.content) < 200_000  # it was 3 MB (160,000 elements)
    assert fold(message_html(page.content.decode(), 0))["count"] == 19_900


def record_html(page: str, seq: int) -> str:
    html = message_html(page, seq)
    return html[html.index('<div class="record"') : html.index('<div class="projection"')]


def record_fold(html: str) -> tuple[int, str | None] | None:
    found = re.search(
        r'class="truncated block-fold" data-folded="(\d+)">[^<]*(<button[^>]*>)?', html
    )
    if found is None:
        return None
    url = re.search(r'data-url="([^"]+)"', found.group(2) or "")
    return int(found.group(1)), unescape(url.group(1)) if url else None


def test_the_conversation_page_loads_a_messages_other_blocks_on_demand(
    operator_client: Client, many_results: Conversation
) -> None:
    page = operator_client.get(f"/c/{many_results.pk}/").content.decode()
    html = record_html(page, 1)
    seen = block_seqs(html)
    assert seen == list(range(100))
    while (found := record_fold(html)) is not None:
        count, url = found
        assert count == RESULTS - len(seen)
        assert url is not None and url.endswith(f"/m/1/blocks?from={len(seen)}")
        html = operator_client.get(url).content.decode()
        seen += block_seqs(html)
    assert seen == list(range(RESULTS))


def test_the_blocks_fragment_refuses_what_is_not_there_and_needs_an_operator(
    client: Client, operator_client: Client, outsider_client: Client, many_results: Conversation
) -> None:
    path = f"/c/{many_results.pk}/m/1/blocks"
    assert operator_client.get(path, {"from": "250"}).status_code == 404
    assert operator_client.get(f"/c/{many_results.pk}/m/9/blocks", {"from": "0"}).status_code == 404
    assert operator_client.get(path).status_code == 404
    refused = operator_client.get(path, {"from": "<b>1</b>"})
    assert refused.status_code == 400
    assert b"<b>1</b>" not in refused.content
    assert client.get(path, {"from": "100"}).status_code == 302
    assert outsider_client.get(path, {"from": "100"}).status_code == 403


def test_a_share_page_loads_a_messages_other_blocks_inside_its_scope(
    many_results: Conversation,
) -> None:
    _, token = share_create(conversation=many_results, up_to_seq=1, images=False)
    reader = Client()
    page = reader.get(f"/s/{token}/").content.decode()
    html = record_html(page, 1)
    seen = block_seqs(html)
    assert seen == list(range(100))
    while (found := record_fold(html)) is not None:
        _, url = found
        assert url is not None and url.startswith(f"/s/{token}/c/{many_results.pk}/m/1/blocks?")
        answer = reader.get(url)
        assert answer["Referrer-Policy"] == "no-referrer"
        html = answer.content.decode()
        seen += block_seqs(html)
    assert seen == list(range(RESULTS))
    outside = reader.get(f"/s/{token}/c/{many_results.pk}/m/2/blocks", {"from": "0"})
    assert outside.status_code == 404


def test_a_share_link_without_images_withholds_them_from_loaded_blocks(db: None) -> None:
    from tests.builders import png

    conversation = conversation_create(title="Pictures")
    blocks = [services_block(png()) for _ in range(120)]
    message_append(conversation=conversation, role="user", blocks=blocks)
    _, without = share_create(conversation=conversation, images=False)
    _, with_images = share_create(conversation=conversation)
    path = f"c/{conversation.pk}/m/0/blocks?from=100"
    assert "/image" not in Client().get(f"/s/{without}/{path}").content.decode()
    assert f"/s/{with_images}/c/" in Client().get(f"/s/{with_images}/{path}").content.decode()


def test_a_blocks_text_is_read_without_its_message(operator_client: Client, db: None) -> None:
    conversation = conversation_create(title="Letters")
    blocks = [TextIn(type="text", text=str(i)) for i in range(3000)]
    message_append(conversation=conversation, role="user", blocks=blocks)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        answer = operator_client.get(f"/c/{conversation.pk}/m/0/b/2999/text")
    assert answer.content == b"2999"
    reads = [q["sql"] for q in queries if 'FROM "conversations_block"' in q["sql"]]
    assert reads and all('"conversations_block"."seq" = 2999' in sql for sql in reads)
