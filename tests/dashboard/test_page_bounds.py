"""A conversation page is at most 2 MB of HTML whatever is stored (docs/contract.md §4
Bounds): a message's blocks past the first hundred fold to one loader, and the window's
texts share one page-wide budget, each showing a shorter start and "load the rest"."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from conversations.dashboard.presenters.texts import water_level
from conversations.record.schemas import MessageIn, TextIn
from conversations.record.services.appending import messages_append
from conversations.record.services.conversations import conversation_create

PAGE_BYTES = 2 * 1024 * 1024


def message_html(page: str, seq: int) -> str:
    start = page.index(f'<article id="m-{seq}"')
    return page[start : page.index("</article>", start)]


@pytest.mark.django_db
def test_a_message_of_100000_blocks_is_a_page_within_2_mb(operator_client: Client) -> None:
    conversation = conversation_create(title="Many blocks")
    blocks = [TextIn(type="text", text=f"block {i} " * 40) for i in range(100_000)]
    messages_append(
        conversation=conversation, messages=[MessageIn(role="assistant", blocks=blocks)]
    )
    page = operator_client.get(f"/c/{conversation.pk}/")
    assert page.status_code == 200
    assert len(page.content) <= PAGE_BYTES, len(page.content)
    html = message_html(page.content.decode(), 0)
    record, projection = html.split('<div class="projection"', 1)
    shown = len(re.findall(r'<section class="block', record))
    assert 0 < shown <= 100
    assert record.count('class="load-blocks"') == 1  # one loader for the rest
    assert f'data-folded="{100_000 - shown}"' in record
    assert projection.count('class="load-rest"') == 1  # the projection's text: its start


@pytest.mark.django_db
@pytest.mark.parametrize(("count", "chars"), [(30, 3 * 1024 * 1024), (100, 100 * 1024)])
def test_a_window_of_long_texts_is_a_page_within_2_mb(
    operator_client: Client, count: int, chars: int
) -> None:
    conversation = conversation_create(title="Long texts")
    long = ("words of a long text " * (chars // 21 + 1))[:chars]  # one line: cut by size
    messages_append(
        conversation=conversation,
        messages=[
            MessageIn(role="user", blocks=[TextIn(type="text", text=long)]) for _ in range(count)
        ],
    )
    page = operator_client.get(f"/c/{conversation.pk}/")
    assert page.status_code == 200
    assert len(page.content) <= PAGE_BYTES, len(page.content)
    html = page.content.decode()
    for seq in range(count):  # every message, a start of its text on both panes
        record, projection = message_html(html, seq).split('<div class="projection"', 1)
        assert record.count('class="load-rest"') == 1, seq
        assert projection.count('class="load-rest"') == 1, seq
        assert "words of a long text" in record and "words of a long text" in projection
    # A deep link's window, loaded into the page, is bounded the same way.
    window = operator_client.get(f"/c/{conversation.pk}/messages", {"around": str(count // 2)})
    assert window.status_code == 200
    assert len(window.content) <= PAGE_BYTES, len(window.content)
    assert window.content.decode().count('class="load-rest"') == 2 * count


def test_past_the_budget_every_side_is_cut_to_one_level_and_short_sides_stay_whole() -> None:
    assert water_level([10, 20, 1000, 1000], 230) == 100  # 10 + 20 + 100 + 100
    assert water_level([10, 20, 30], 1000) == 30  # within the budget: nothing is cut
    assert water_level([500] * 4, 1000) == 250
    assert water_level([], 1000) == 1000
