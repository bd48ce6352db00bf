"""The live fragments: the page's own partials, rendered for a socket (one rendering path)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import NamedTuple

from django.template.loader import render_to_string

from conversations.core import replay
from conversations.core.options import ReplayOptions
from conversations.dashboard import presenters
from conversations.record import counts, selectors


def block_counts(conversation_id: str, start: int) -> dict[int, int] | None:
    """Message seq → block count from `start` on; None when there is no such conversation."""
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        return None
    return selectors.block_counts(conversation, start=start)


def held_counts(conversation_id: str) -> dict[int, int]:
    """Message seq → block count of a conversation known to exist: one query."""
    return selectors.block_counts(uuid.UUID(conversation_id))


class Frame(NamedTuple):
    html: str
    counts: dict[int, int]  # message seq → block count, as rendered


def messages_frame(
    conversation_id: str,
    seqs: Sequence[int],
    vision: bool,
    shape: replay.Shape,
    view: tuple[tuple[str, str], ...] = (),
) -> Frame:
    """The `message` partial for each seq, in order, and the conversation's new totals and
    pressure (`view`: the page's model and window overrides). Counting is cached, so only
    the messages that grew are recounted."""
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None or not seqs:
        return Frame("", {})
    wanted = set(seqs)
    rows = [
        row
        for row in selectors.message_rows(conversation, start=min(wanted), stop=max(wanted) + 1)
        if row.seq in wanted
    ]
    total_blocks = selectors.block_total(conversation)
    pressure = counts.pressure(
        conversation, ReplayOptions(vision, shape), query=dict(view), total_blocks=total_blocks
    )
    margin = presenters.margin_counts(pressure, wanted)
    views = presenters.message_views(conversation, rows, vision=vision, shape=shape, margin=margin)
    parts = [render_to_string("conversations/detail.html#message", {"m": m}) for m in views]
    parts.append(
        render_to_string(
            "conversations/detail.html#totals",
            {"total_messages": conversation.message_count, "total_blocks": total_blocks},
        )
    )
    parts.append(
        render_to_string(
            "conversations/detail.html#pressure",
            {"pressure": presenters.pressure_view(pressure, total_blocks)},
        )
    )
    return Frame("".join(parts), {m.seq: m.block_count for m in views})


def row_html(conversation_id: str) -> str:
    """The list page's row for one conversation."""
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        return ""
    (row,) = presenters.conversation_rows([conversation])
    return render_to_string("conversations/list.html#row", {"row": row})


def removed_row_html(conversation_id: str) -> str:
    """What tells the list page to drop a deleted conversation's row."""
    return render_to_string("conversations/list.html#removed", {"id": conversation_id})
