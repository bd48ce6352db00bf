"""The context and diff pages hold one window of messages (docs/contract.md §7, §4 Bounds),
with the figures of the whole request: the diff of a conversation against itself, read a
window at a time, shows what aligning the two whole projections shows."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conversations.core.counting import compact
from conversations.core.options import ReplayOptions
from conversations.dashboard.presenters.context import PREVIEW_WINDOW
from conversations.dashboard.presenters.diff import DiffSide, diff_page
from conversations.dashboard.views import context as views
from conversations.record.counting import token_counts
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_update
from tests.builders import png, stored, text, tool_result, tool_use


def record(turns: int = 60) -> Any:
    messages: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
        ("system", [text("You are careful.")], {})
    ]
    for i in range(turns):
        messages.append(
            (
                "assistant",
                [
                    {
                        "type": "reasoning",
                        "text": compact.CLEARED_REASONING if i == 9 else f"step {i}",
                    },
                    tool_use(f"c{i}", "grep" if i % 3 else "ls", q=str(i)),
                ],
                {},
            )
        )
        said = compact.CLEARED_RESULT if i == 7 else f"result {i} " * 5  # once already cleared
        user = [tool_result(f"c{i}", said)]
        if i % 17 == 4:
            user.append(png())
        messages.append(("user", user, {}))
    conversation = stored("windowed", *messages)
    return conversation_update(
        conversation=conversation,
        title=conversation.title,
        metadata={"compact_boundaries": [{"seq": 41, "trigger": "auto"}]},
    )


SIDES = [
    ({}, {"compact": "microcompact"}),
    ({}, {"compact": "microcompact", "keep": "0"}),
    ({}, {"compact": "microcompact", "keep": "500"}),
    ({}, {"compact": "clear_thinking", "keep": "0"}),
    ({}, {"compact": "clear_thinking"}),
    ({}, {"compact": "boundary"}),
    (
        {"compact": "microcompact", "keep": "5"},
        {"compact": "clear_tool_uses", "trigger": "10", "exclude_tools": "ls"},
    ),
    ({"vision": True}, {"vision": False}),
    ({"compact": "boundary"}, {"vision": False}),
]


@pytest.mark.sqlite
@pytest.mark.django_db
@pytest.mark.parametrize(("a", "b"), SIDES)
def test_the_diff_read_a_window_at_a_time_equals_the_whole_alignment(a, b) -> None:
    conversation = record()

    def side(label: str, spec: dict[str, Any]) -> DiffSide:
        policy = compact.Policy.from_query({k: v for k, v in spec.items() if k != "vision"})
        return DiffSide(label, spec.get("vision", True), "openai", policy, conversation)

    left, right = side("A", a), side("B", b)
    payloads = (views._side_payload(conversation, left), views._side_payload(conversation, right))
    for start in (0, 50, 100):
        whole = diff_page(left, right, payloads, start=start, here_query={})
        window = views._diff_window(conversation, left, right, start, {})
        for key in ("total_rows", "differing", "start", "earlier_url", "later_url"):
            assert window[key] == whole[key], (key, start)
        assert window["rows"] == whole["rows"], start


@pytest.mark.django_db
def test_the_context_page_holds_one_window_and_the_whole_requests_figures(
    operator_client,
) -> None:
    conversation = record(200)  # 401 messages
    p = token_counts.pressure(conversation, ReplayOptions())
    for path, first in (("", 0), ("?from=150", 150), ("?from=400", 301)):
        html = operator_client.get(f"/c/{conversation.pk}/context{path}").content.decode()
        shown = [int(seq) for seq in re.findall(r'<article id="m-(\d+)"', html)]
        assert shown == list(range(first, first + PREVIEW_WINDOW))
        assert f'data-before="{p.total}"' in html  # the whole request's figures
        assert ('class="later"' in html) == (first < 301)
        assert ('class="earlier"' in html) == (first > 0)


@pytest.mark.django_db
def test_the_diff_kept_for_a_record_state_is_not_the_next_states() -> None:
    conversation = record(10)
    left = DiffSide("A", True, "openai", None, conversation)
    right = DiffSide(
        "B", True, "openai", compact.Policy.from_query({"compact": "microcompact"}), conversation
    )
    before = views._diff_window(conversation, left, right, 0, {})
    for call in ("c10", "c11"):  # the latest three results are no longer c7 (cleared), c8, c9
        message_append(
            conversation=conversation,
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(tool_result(call, "one more result"))],
        )
    conversation.refresh_from_db()
    payloads = (views._side_payload(conversation, left), views._side_payload(conversation, right))
    after = views._diff_window(conversation, left, right, 0, {})
    whole = diff_page(left, right, payloads, start=0, here_query={})
    assert after["total_rows"] == whole["total_rows"] == before["total_rows"] + 2
    assert after["differing"] == whole["differing"] == before["differing"] + 1  # c8
    assert after["rows"] == whole["rows"]
