"""The conversation page's context (and a window load's): the messages of a window beside
their projections, the pressure header, and the controls around them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from conversations.core import page_windows, replay
from conversations.core.search import MAX_QUERY_CHARS
from conversations.dashboard import socket_urls
from conversations.dashboard.presenters.messages import (
    compaction_views,
    message_views,
    tool_pairs_view,
)
from conversations.dashboard.presenters.metadata import conversation_meta, import_view
from conversations.dashboard.presenters.pressure import margin_counts, pressure_view
from conversations.dashboard.presenters.texts import PAGE_BYTES
from conversations.record.reads.rows import Counted, Pairs, Pressure, PreviewRow
from conversations.web.links import projection_toggles, query
from conversations.web.protocols import ConversationLike


@dataclass(frozen=True)
class PageRead:
    """What a page's window was read as (the view fetches it; `conversation_page` presents
    it): the window's rows, the conversation's block total and pressure, the margin
    counts of the rows shown and the window's tool rounds whose other half is outside it."""

    rows: Sequence[PreviewRow]
    total_blocks: int
    pressure: Pressure
    counted: Mapping[int, Counted]  # `token_counts.counted_shown` of `rows`
    pairs: Pairs  # `finder_reads.tool_pairs` of `rows`


def conversation_page(
    conversation: ConversationLike,
    read: PageRead,
    *,
    window: range,
    vision: bool,
    shape: replay.Shape,
    view: dict[str, str] | None = None,
    earlier: bool = True,
    later: bool = True,
) -> dict[str, Any]:
    """A page's (or a window load's) context: the messages at `window` (as `read`), with
    controls to load the windows before (`earlier`) and after it (`later`) when there are
    any; `view` overrides the model and window of the pressure view."""
    rows, total_blocks, pressure = read.rows, read.total_blocks, read.pressure
    detail = reverse("conversation", args=[str(conversation.id)])
    options: dict[str, object] = {"vision": int(vision), "shape": shape}
    windows = reverse("earlier-messages", args=[str(conversation.id)]) + query(**options)
    first = rows[0].seq if rows else window.start
    last = rows[-1].seq if rows else window.start - 1
    total = conversation.message_count
    tools_query = query(**options, **(view or {}))
    return {
        "pressure": pressure_view(pressure, total_blocks),
        "conversation_meta": conversation_meta(
            conversation.metadata, model="" if "model" in (view or {}) else pressure.window.model
        ),
        "context_url": reverse("conversation-context", args=[str(conversation.id)]) + tools_query,
        "diff_url": reverse("conversation-diff", args=[str(conversation.id)])
        + query(**options, b_vision=int(not vision)),
        "messages": message_views(
            conversation,
            rows,
            vision=vision,
            shape=shape,
            margin=margin_counts(read.counted, pressure.window.tokens),
            compactions=compaction_views(
                conversation.id, pressure.headline.compactions, pressure.dropped
            ),
            page_bytes=PAGE_BYTES,
        ),
        "conversation": conversation,
        "vision": vision,
        "shape": shape,
        "total_messages": total,
        "total_blocks": total_blocks,
        "self_url": detail + query(**options),
        "socket_url": socket_urls.conversation_socket_url(
            conversation.id, vision=vision, shape=shape, view=view, report=True
        ),
        "download_url": reverse("replay-download", args=[str(conversation.id)]) + query(**options),
        "windows_url": windows,
        # Read by the page scripts (static/replay-windows.js, replay-finding.js): no JS copy.
        "document_limit": page_windows.DOCUMENT,
        "before_end": page_windows.LAST,
        "markdown_url": reverse("markdown-download", args=[str(conversation.id)])
        + query(**options),
        "earlier_url": (
            windows + "&" + urlencode({"before": first}) if earlier and first > 0 else ""
        ),
        "later_url": (
            windows + "&" + urlencode({"after": last}) if later and last + 1 < total else ""
        ),
        "first_seq": first,
        "tool_pairs": tool_pairs_view(read.pairs),
        "find_url": reverse("conversation-find", args=[str(conversation.id)]),
        "find_max_query": MAX_QUERY_CHARS,
        "imported": import_view(conversation),
        "last_seq": last,
        "toggles": projection_toggles(detail, options, vision=vision, shape=shape),
    }
