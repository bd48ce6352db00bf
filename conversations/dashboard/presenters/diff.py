"""The projection diff: two projections (toggles, policies or conversations) aligned
message by message, a window of rows at a time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from conversations.core import diff as diff_core
from conversations.core import replay
from conversations.core.counting import compact as compact_core
from conversations.dashboard.presenters.texts import shown
from conversations.web.links import query, toggle
from conversations.web.protocols import ConversationLike


@dataclass(frozen=True)
class DiffSide:
    label: str
    vision: bool
    shape: replay.Shape
    policy: compact_core.Policy | None
    conversation: ConversationLike


@dataclass(frozen=True)
class DiffRowView:
    status: str
    left_label: str
    right_label: str
    left_text: str
    right_text: str
    segments: list[diff_core.Segment]


DIFF_WINDOW = 100


def describe_side(side: DiffSide) -> str:
    what = [
        side.conversation.title or str(side.conversation.id),
        "vision on" if side.vision else "vision off",
        "OpenAI" if side.shape == "openai" else "Anthropic",
        side.policy.describe() if side.policy is not None else "full",
    ]
    return " · ".join(what)


def diff_page(
    left: DiffSide,
    right: DiffSide,
    payloads: tuple[replay.Payload, replay.Payload],
    *,
    start: int,
    here_query: dict[str, str],
) -> dict[str, Any]:
    """Two projections (`payloads`: each side's, as the view read them) aligned message by
    message, a window of rows at a time."""
    rows = diff_core.diff(*payloads)
    start = max(0, min(start, max(0, len(rows) - 1)))
    return diff_window_page(
        left,
        right,
        rows[start : start + DIFF_WINDOW],
        total_rows=len(rows),
        differing=sum(1 for r in rows if r.status != "same"),
        start=start,
        here_query=here_query,
    )


def diff_window_page(
    left: DiffSide,
    right: DiffSide,
    window: Sequence[diff_core.Row],
    *,
    total_rows: int,
    differing: int,
    start: int,
    here_query: dict[str, str],
) -> dict[str, Any]:
    """One window of aligned rows (from row `start` of `total_rows`, `differing` of which
    differ), as the view aligned them."""
    cid = str(left.conversation.id)
    here = reverse("conversation-diff", args=[cid])

    def label(s: diff_core.Side | None) -> str:
        return f"{s.index}: {s.role}" if s is not None else "—"

    views = [
        DiffRowView(
            r.status,
            label(r.left),
            label(r.right),
            shown(r.left.text) if r.left else "",
            shown(r.right.text) if r.right else "",
            [diff_core.Segment(x.op, shown(x.text)) for x in r.segments],
        )
        for r in window
    ]
    base: dict[str, object] = {"vision": int(left.vision), "shape": left.shape}
    presets = [
        ("Vision on vs off", base | {"vision": 1, "b_vision": 0}),
        ("OpenAI vs Anthropic", base | {"shape": "openai", "b_shape": "anthropic"}),
        ("Full vs microcompact", base | {"b_compact": "microcompact"}),
        ("Full vs boundary", base | {"b_compact": "boundary"}),
    ]
    return {
        "conversation": left.conversation,
        "conversation_url": reverse("conversation", args=[cid]) + query(**base),
        "left": describe_side(left),
        "right": describe_side(right),
        "rows": views,
        "total_rows": total_rows,
        "differing": differing,
        "start": start,
        "presets": [toggle(name, here, params, False) for name, params in presets],
        "earlier_url": here + query(**(here_query | {"from": str(max(0, start - DIFF_WINDOW))}))
        if start > 0
        else "",
        "later_url": here + query(**(here_query | {"from": str(start + DIFF_WINDOW)}))
        if start + DIFF_WINDOW < total_rows
        else "",
        "other": str(right.conversation.id) if right.conversation != left.conversation else "",
        "left_vision": left.vision,
        "left_shape": left.shape,
    }
