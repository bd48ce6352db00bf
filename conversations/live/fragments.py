"""The live fragments: the page's own partials, rendered for a socket (one rendering path).

Each fragment reads through the record's selectors and counts, then hands the rows to the
dashboard's presenters and renders their partial, as the page's views do."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from cachetools import LRUCache
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from conversations.alerts import presenters as alerts_presenter
from conversations.alerts import reads as alert_reads
from conversations.core import page_windows, replay
from conversations.core.notes import MessageNotes
from conversations.core.options import ReplayOptions
from conversations.dashboard import share_pages
from conversations.dashboard.presenters.listing import conversation_rows
from conversations.dashboard.presenters.messages import (
    compaction_views,
    message_views,
    read_only,
    with_notes,
)
from conversations.dashboard.presenters.notes import notes_view
from conversations.dashboard.presenters.pressure import margin_counts, pressure_view
from conversations.record.counting import token_counts
from conversations.record.models.conversation import Conversation
from conversations.record.notes import reads as note_reads
from conversations.record.reads import selectors
from conversations.record.reads.rows import Pressure
from conversations.record.search import reads as search_reads
from conversations.record.services.api_tokens import token_digest
from conversations.sharing import reads as sharing_reads
from conversations.sharing.models import ShareLink
from conversations.web.links import query


def tail_counts(conversation_id: str) -> tuple[int, dict[int, int]]:
    """(first seq, seq → block count) of the last `page_windows.DOCUMENT` messages of a
    conversation known to exist: one query."""
    counts = selectors.last_block_counts(uuid.UUID(conversation_id), page_windows.DOCUMENT)
    return min(counts, default=0), counts


def block_counts_between(conversation_id: str, seqs: range) -> dict[int, int] | None:
    """Message seq → block count within `seqs`; None when there is no such conversation."""
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        return None
    return selectors.block_counts_between(conversation, seqs)


# A frame's reads are tried again (up to this many times in all) when an append lands
# between them, so that its totals and pressure view never name two states of the record.
READS = 3


class Frame(NamedTuple):
    html: str
    counts: dict[int, int]  # message seq → block count, as rendered


def messages_frame(
    conversation_id: str,
    seqs: Sequence[int],
    vision: bool,
    shape: replay.Shape,
    view: tuple[tuple[str, str], ...] = (),
    *,
    images: bool = True,
    share: bool = False,
    notes: bool = True,
) -> Frame:
    """The `message` partial for each seq, in order, and the conversation's new totals and
    pressure (`view`: the page's model and window overrides).

    Blocks travel as the page shows them (long texts cut), so a one-message frame stays
    under `page_windows.FRAME_BYTES` whatever is stored; counting is cached, so only the
    messages that grew are recounted.
    `images` False: a share link's, with no image URL on the record side; `share`: a
    share link's, with no link to a message's record JSON, its notes read-only and only
    with `notes`.
    """
    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        return Frame("", {})
    if not seqs:
        return Frame("", {})
    wanted = sorted(set(seqs))
    # The messages first, then the totals and pressure: a frame's totals are never older
    # than its messages (a client skips a later frame of messages it already holds). An
    # unknown conversation has no rows, and no state below.
    rows = selectors.preview_rows(key, wanted)
    state = _state(conversation_id, vision, shape, view)
    if state is None:
        return Frame("", {})
    conversation, total_blocks, pressure, noted = state
    shown = token_counts.counted_shown(conversation, pressure, rows)
    margin = margin_counts(shown, pressure.window.tokens)
    compactions = compaction_views(conversation.id, pressure.headline.compactions, pressure.dropped)
    views = message_views(
        conversation, rows, vision=vision, shape=shape, margin=margin, compactions=compactions
    )
    # Most conversations hold no note: their frames read none (nor does a share link's
    # frame that shows none).
    read = noted and (notes or not share)
    views = with_notes(
        conversation.id, views, note_reads.notes_at(conversation.id, wanted) if read else {}
    )
    if share:
        views = read_only(share_pages.without_records(views), notes)
    if not images:
        views = share_pages.withhold_images(views)
    parts: list[str] = [
        render_to_string("conversations/detail.html#message", {"m": m}) for m in views
    ]
    parts.append(_tail(conversation.message_count, total_blocks, pressure))
    return Frame("".join(parts), {m.seq: m.block_count for m in views})


# The totals and pressure partials a frame ends with, by record state: a resync's frames or
# a batch's split in one-message frames each end with the same ones. Keyed by the pressure
# (`token_counts.pressure` answers one object per state; each entry holds it, so its id
# stays its own) and the totals.
_tails: LRUCache[int, tuple[Pressure, int, int, str]] = LRUCache(maxsize=32)
_tails_lock = threading.Lock()  # frames render in the server's threads


def _tail(total_messages: int, total_blocks: int, pressure: Pressure) -> str:
    with _tails_lock:
        found = _tails.get(id(pressure))
    if found is not None and found[0] is pressure and found[1:3] == (total_messages, total_blocks):
        return found[3]
    totals = {"total_messages": total_messages, "total_blocks": total_blocks}
    shown = {"pressure": pressure_view(pressure, total_blocks)}
    html = (
        render_to_string("conversations/detail.html#totals", totals)
        + render_to_string("conversations/detail.html#pressure", shown)
        + render_to_string("conversations/detail.html#next_summary", shown)
    )
    with _tails_lock:
        _tails[id(pressure)] = (pressure, total_messages, total_blocks, html)
    return html


def notes_frame(conversation_id: str, seq: int, *, share: bool = False) -> str:
    """One message's `notes` partial as they now are (read-only for a share link's page):
    sent on `conversation.note_changed`; bounded by the notes a message may hold."""
    conversation = selectors.conversation_get(conversation_id)
    message = selectors.message_get(conversation, seq) if conversation else None
    if conversation is None or message is None:
        return ""
    view = notes_view(
        conversation.id,
        seq,
        message.block_count,
        note_reads.notes_at(conversation.id, [seq]).get(seq, MessageNotes()),
        readonly=share,
    )
    return render_to_string("conversations/detail.html#notes", {"n": view})


def _state(
    conversation_id: str, vision: bool, shape: replay.Shape, view: tuple[tuple[str, str], ...]
) -> tuple[Conversation, int, Pressure, bool] | None:
    """The conversation, its block total, its pressure and whether it holds any note, read
    as one state of the record: read again (up to READS times) when an append lands
    between the reads."""
    for attempt in range(1, READS + 1):
        found = selectors.conversation_noted(conversation_id)
        if found is None:
            return None
        conversation, noted = found
        total_blocks = selectors.block_total(conversation)
        pressure = token_counts.pressure(
            conversation, ReplayOptions(vision, shape), query=dict(view), total_blocks=total_blocks
        )
        # Stored figures are read as of the conversation's row (token_counts.Stored): one
        # state by construction. A pressure that counted its messages (a preview's) says so.
        consistent = not pressure.messages or len(pressure.messages) == conversation.message_count
        if consistent or attempt == READS:
            return conversation, total_blocks, pressure, noted
    return None


def reload_frame(conversation_id: str, vision: bool, shape: replay.Shape) -> Frame:
    """ "Reload your window": where the page fetches the conversation's tail over HTTP."""
    url = reverse("earlier-messages", args=[conversation_id]) + query(
        vision=int(vision), shape=shape, before=page_windows.LAST
    )
    return Frame(render_to_string("conversations/detail.html#reload", {"url": url}), {})


def pack(frames: Sequence[Frame], limit: int = page_windows.FRAME_BYTES) -> list[Frame]:
    """Consecutive frames joined into as few as fit in `limit` bytes each (in order)."""
    packed: list[Frame] = []
    html: list[str] = []
    counts: dict[int, int] = {}
    size = 0
    for frame in frames:
        n = len(frame.html.encode())
        if html and size + n > limit:
            packed.append(Frame("".join(html), counts))
            html, counts, size = [], {}, 0
        html.append(frame.html)
        counts = counts | frame.counts
        size += n
    if html:
        packed.append(Frame("".join(html), counts))
    return packed


LIST_ROWS = 25  # rows a list page shows: the most a list socket sends when it opens


def rows_since(since: datetime) -> str:
    """The list rows of the conversations active after `since`, oldest first (each row moves
    to the top as it is applied), at most a page of them."""
    changed = list(search_reads.conversation_list().filter(updated_at__gt=since)[:LIST_ROWS])
    labels = note_reads.labels_of([c.pk for c in changed])
    return "".join(
        render_to_string("conversations/list.html#row", {"row": row})
        for row in reversed(
            conversation_rows(
                changed,
                labels=labels,
                alerts=alert_reads.open_alert_counts(c.pk for c in changed),
            )
        )
    )


def row_html(conversation_id: str) -> str:
    """The list page's row for one conversation."""
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        return ""
    (row,) = conversation_rows(
        [conversation],
        labels=note_reads.labels_of([conversation.pk]),
        alerts=alert_reads.open_alert_counts([conversation.pk]),
    )
    return render_to_string("conversations/list.html#row", {"row": row})


def removed_row_html(conversation_id: str) -> str:
    """What tells the list page to drop a deleted conversation's row."""
    return render_to_string("conversations/list.html#removed", {"id": conversation_id})


def share_link(token: str) -> ShareLink | None:
    """The link this token opens, if any (one query, by its digest)."""
    return sharing_reads.share_get(token_digest(token))


def share_state(share_id: int) -> str:
    """The link's state now: "active", "revoked" or "expired"; "deleted" when it is gone
    (with its conversation)."""
    link = sharing_reads.share_by_id(share_id)
    return "deleted" if link is None else link.state(timezone.now())


def share_notice(state: str) -> str:
    """The share page's notice, saying the link is gone and the page no longer updates."""
    return render_to_string("conversations/detail.html#share_notice", {"share_state": state})


def alerts_html(conversation_id: str, *, acknowledge: bool) -> str:
    """The conversation header's open alerts (docs/contract.md §11), as the page renders them
    for a reader who may (or may not) acknowledge them."""
    found, total = alert_reads.open_alerts(conversation_id)
    panel = alerts_presenter.alerts_panel(conversation_id, found, total, acknowledge=acknowledge)
    return render_to_string("conversations/alerts.html#alerts", {"alerts": panel})
