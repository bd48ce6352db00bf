"""What the dashboard templates print, computed in Python (templates loop and print).

The projection side of every message is `replay.project_message`'s output, laid out
as it is: a string stays one string, a list stays its parts in order.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, assert_never, cast
from urllib.parse import urlencode

from django.core.paginator import Page
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.timesince import timesince

from conversations.core import blocks, page_windows, preview, replay, tokens
from conversations.core import compact as compact_core
from conversations.core import diff as diff_core
from conversations.core.list_status import ListFilters
from conversations.core.options import ReplayOptions
from conversations.core.search import MAX_QUERY_CHARS
from conversations.dashboard import socket_urls
from conversations.record import finder_reads, selectors, token_counts
from conversations.record.models import Conversation, ShareLink

FOLD_LINES = 12
FOLD_CHARS = 1500
# Escaped UTF-8 bytes one side of one message may show (record; projection): both sides and
# their markup stay under one live frame (page_windows.FRAME_BYTES) whatever is stored.
SIDE_BYTES = 96 * 1024
BLOCK_MARKUP = 900  # bytes a block's markup costs, besides its name, id and text


def folds(text: str) -> bool:
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


def escaped_bytes(text: str) -> int:
    return len(escape(text).encode())


class Budget:
    """What is left of one side's bytes; `take` spends it on the longest prefix that fits."""

    def __init__(self, total: int = SIDE_BYTES) -> None:
        self.left = total

    def spend(self, cost: int) -> None:
        self.left -= cost

    def take(self, text: str) -> str:
        cost = escaped_bytes(text)
        while cost > max(self.left, 0):
            text = text[: int(len(text) * max(self.left, 0) / cost * 0.9)]
            cost = escaped_bytes(text)
        self.left -= cost
        return text


@dataclass(frozen=True)
class Truncation:
    """A text shown only in part: its full size (UTF-8 bytes) and where the rest is served."""

    size: int
    rest_url: str

    @property
    def size_label(self) -> str:
        return preview.human_size(self.size)


@dataclass(frozen=True)
class BlockView:
    seq: int
    type: str
    label: str
    text: str = ""
    name: str = ""
    call_id: str = ""
    is_error: bool = False
    image_url: str = ""
    media_type: str = ""
    folded: bool = False
    truncated: Truncation | None = None

    @property
    def size_note(self) -> str:
        return size_note(self.text, self.truncated)

    @property
    def fold_label(self) -> str:
        return fold_label(self.text, self.truncated)


@dataclass(frozen=True)
class PartView:
    kind: str  # "text" or "image"
    text: str = ""
    image_url: str = ""
    media_type: str = ""
    folded: bool = False
    truncated: Truncation | None = None

    @property
    def fold_label(self) -> str:
        return fold_label(self.text, self.truncated)


@dataclass(frozen=True)
class TokensView:
    """A message's margin count and what its metadata measured. Only what depends on this
    message alone: a live frame re-renders a message when it grows, not when an earlier
    one does (running totals and the input estimate live in the pressure header)."""

    tokens: int
    detail: str  # by kind and framing, for the title
    usage: str  # "measured 1,234 in · 56 out (×0.98 of ≈57)", or ""

    @property
    def label(self) -> str:
        return f"≈{self.tokens:,} tokens"


def tokens_view(counted: token_counts.Counted) -> TokensView:
    c = counted.count
    parts = [f"{tokens.KIND_LABELS[k]} {n:,}" for k, n in c.by_kind.items()]
    parts.append(f"framing {c.framing:,}")
    usage = ""
    if counted.usage is not None:
        said = []
        if counted.usage.input is not None:
            said.append(f"{counted.usage.input:,} in")
        if counted.usage.output is not None:
            out = c.tokens - c.framing
            r = tokens.ratio(counted.usage.output, out)
            said.append(f"{counted.usage.output:,} out" + (f" (×{r:.2f} of ≈{out:,})" if r else ""))
        usage = "measured " + " · ".join(said)
    return TokensView(c.tokens, " · ".join(parts), usage)


def measured_input(p: token_counts.Pressure) -> str:
    """The latest turn whose usage measured its input, beside the estimate of that input
    (everything before the message, plus the request overhead)."""
    for i in range(len(p.messages) - 1, -1, -1):
        usage = p.messages[i].usage
        if usage is not None and usage.input is not None:
            estimate = p.cumulative[i - 1] if i > 0 else p.payload.overhead
            r = tokens.ratio(usage.input, estimate)
            return (
                f"measured input of #{p.messages[i].seq}: {usage.input:,} tokens vs ≈{estimate:,}"
                + (f" estimated (×{r:.2f})" if r else " estimated")
            )
    return ""


@dataclass(frozen=True)
class KindView:
    kind: str
    label: str
    tokens: int
    share: str  # of the total, "12.5%"

    @property
    def tokens_label(self) -> str:
        return f"{self.tokens:,}"


@dataclass(frozen=True)
class Segment:
    kind: str
    x: int  # in a 0–1000 wide bar
    width: int


@dataclass(frozen=True)
class PressureView:
    """The pressure header: the total against the window, by kind, and the trigger's mark."""

    tokenizer: str
    total: int
    overhead: int
    window: int | None
    window_note: str
    percent: str
    over: bool
    kinds: list[KindView]
    segments: list[Segment]
    window_x: int | None  # where the window ends, when the total is past it
    trigger: int
    trigger_x: int | None
    trigger_seq: int | None
    measured: str
    total_messages: int
    total_blocks: int

    @property
    def total_label(self) -> str:
        return f"{self.total:,}"

    @property
    def trigger_label(self) -> str:
        return f"{self.trigger:,}"


BAR = 1000


def pressure_view(p: token_counts.Pressure, total_blocks: int) -> PressureView:
    by_kind = p.payload.by_kind()
    window = p.window.tokens
    # The bar spans the window, or the total when it is past the window (or none is known).
    scale = max(window or 0, p.total, 1)
    segments, x = [], 0
    for kind in tokens.COUNT_KINDS:
        width = round(by_kind[kind] * BAR / scale)
        if width:
            segments.append(Segment(kind, x, width))
            x += width
    where = {"view": "this view", "conversation": "the conversation", "table": "genai-prices"}
    note = (
        f"{window:,} ({p.window.model or 'no model'}, from {where[p.window.source]})"
        if window
        else f"unknown for {p.window.model!r}"
        if p.window.model
        else "unknown (no model named)"
    )
    return PressureView(
        tokenizer=tokens.TOKENIZER,
        total=p.total,
        overhead=p.payload.overhead,
        window=window,
        window_note=note,
        percent=f"{p.total / window:.1%}" if window else "",
        over=bool(window and p.total > window),
        kinds=[
            KindView(
                k,
                tokens.KIND_LABELS[k],
                by_kind[k],
                f"{by_kind[k] / p.total:.1%}" if p.total else "0%",
            )
            for k in tokens.COUNT_KINDS
        ],  # fmt: skip
        segments=segments,
        window_x=round(window * BAR / scale) if window and window < scale else None,
        trigger=p.trigger,
        trigger_x=round(p.trigger * BAR / scale) if p.trigger <= scale else None,
        trigger_seq=p.trigger_seq,
        measured=measured_input(p),
        total_messages=len(p.messages),
        total_blocks=total_blocks,
    )


def counted_of(p: token_counts.Pressure, seq: int) -> token_counts.Counted | None:
    """Message `seq`'s count in the pressure, if it was counted."""
    # Seqs are dense from 0, so a message's position is its seq (checked, not assumed).
    if seq < len(p.messages) and p.messages[seq].seq == seq:
        return p.messages[seq]
    return next((c for c in p.messages if c.seq == seq), None)


def margin_counts(
    conversation: Conversation, p: token_counts.Pressure, rows: Sequence[selectors.PreviewRow]
) -> dict[int, TokensView]:
    """The margin counts of the messages shown (a page's window, a frame's messages).

    A message may grow between reading the conversation's row (which keys the pressure)
    and reading its own: its margin then counts exactly the blocks shown, or a live
    frame would hold a count its next event never corrects.
    """
    out: dict[int, TokensView] = {}
    for row in rows:
        counted = counted_of(p, row.seq)
        if counted is None or counted.blocks != row.block_count:
            counted = token_counts.counted_at(conversation, row.seq, row.block_count, p.options)
        if counted is not None:
            out[row.seq] = tokens_view(counted)
    return out


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    created_at: datetime
    blocks: list[BlockView]
    wire_role: str
    lifted: bool  # anthropic shape: a system message crosses in the request's `system`
    text: str | None  # the wire content when it is one string (perhaps only its start)
    parts: list[PartView] = field(default_factory=list)
    folded: bool = False
    meta: list[MetaItem] = field(default_factory=list)  # model, tokens, stop, latency
    source_time: datetime | None = None  # the source's own timestamp (imports), parsed
    source_time_text: str = ""  # … or as stored, when it is not an ISO 8601 time
    boundary: str = ""  # a compaction boundary before this message, described
    tokens: TokensView | None = None
    block_count: int = 0  # stored blocks: the message's live position
    hidden_blocks: int = 0  # stored blocks past the ones shown
    truncated: Truncation | None = None  # of `text`
    record_url: str = ""  # this message as the API's record has it (operators only)
    projection_url: str = ""  # this message's wire message for the page's toggles

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"

    @property
    def fold_label(self) -> str:
        return fold_label(self.text or "", self.truncated)


def ago(when: datetime, now: datetime) -> str:
    """ "just now" within a minute, else "3 hours ago" (the largest unit only); the page's
    script keeps it current and says it in the viewer's zone on hover."""
    if (now - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, now).split(',')[0]} ago"


@dataclass(frozen=True)
class ConversationRow:
    conversation: Conversation
    url: str
    relative: str
    exact: str
    unanswered: bool
    model: str = ""  # the latest message's model, else the conversation's own
    messages: str = "0"  # the message count with thousands separators
    errors: str = ""  # the error results' count with separators; "" for none
    # With a search: the first matching block's message link and text around the match.
    hit_url: str = ""
    hit_label: str = ""
    snippet: str = ""


def image_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return reverse("block-image", args=[str(conversation_id), message_seq, block_seq])


def block_text_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return reverse("block-text", args=[str(conversation_id), message_seq, block_seq])


def wire_text_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str, part: int | None
) -> str:
    params: dict[str, object] = {"vision": int(vision), "shape": shape}
    if part is not None:
        params["part"] = part
    return reverse("wire-text", args=[str(conversation_id), message_seq]) + query(**params)


def pretty_input(input_json: str) -> str:
    return json.dumps(json.loads(input_json), indent=2, ensure_ascii=False)


def message_record_url(conversation_id: object, message_seq: int) -> str:
    return reverse("message-record", args=[str(conversation_id), message_seq])


def message_projection_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str
) -> str:
    return reverse("message-projection", args=[str(conversation_id), message_seq]) + query(
        vision=int(vision), shape=shape
    )


def block_full_text(row: selectors.BlockRow) -> str:
    """The whole text a block view shows the start of ("" for an image)."""
    value = selectors.block_value(row)
    match value:
        case replay.ToolUseBlock():
            return input_text(value.input_json)
        case replay.ToolResultBlock():
            return value.content
        case replay.TextBlock() | replay.ReasoningBlock():
            return value.text
        case replay.ImageBlock():
            return ""
        case _:
            assert_never(value)


def block_view(
    conversation_id: object, message_seq: int, row: selectors.PreviewBlock, budget: Budget
) -> BlockView:
    """A block's record side: a text past 64 K characters, 400 lines or the budget shows
    its start."""
    value = selectors.block_value(row)
    kind, label = blocks.kind_of(value), blocks.label(value)
    budget.spend(BLOCK_MARKUP + 2 * (escaped_bytes(row.name) + escaped_bytes(row.call_id)))
    rest = block_text_url(conversation_id, message_seq, row.seq)

    def shown(start: str, size: int) -> tuple[str, Truncation | None]:
        text = budget.take(preview.cut(start))
        return text, (Truncation(size, rest) if preview.size(text) < size else None)

    match value:
        case replay.ToolUseBlock():
            if len(value.input_json) < selectors.PREVIEW_CHARS:  # loaded whole
                pretty = input_text(value.input_json)
                text, cut = shown(pretty, preview.size(pretty))
            else:  # only the start is loaded: show it as stored
                text, cut = shown(value.input_json, row.input_size)
            return BlockView(
                row.seq, kind, label, text, value.name, value.id, folded=folds(text), truncated=cut
            )
        case replay.ToolResultBlock():
            text, cut = shown(value.content, row.text_size)
            return BlockView(
                row.seq, kind, label, text, value.name, value.tool_use_id,
                value.is_error, folded=folds(text), truncated=cut,
            )  # fmt: skip
        case replay.ImageBlock():
            url = image_url(conversation_id, message_seq, row.seq)
            return BlockView(row.seq, kind, label, image_url=url, media_type=value.media_type)
        case replay.TextBlock() | replay.ReasoningBlock():
            text, cut = shown(value.text, row.text_size)
            return BlockView(row.seq, kind, label, text, folded=folds(text), truncated=cut)
        case _:
            assert_never(value)


def _cut_values(
    row: selectors.PreviewRow, shown: int, marks: str
) -> tuple[list[replay.Block], dict[str, int]]:
    """The shown blocks as values, each cut one followed by a unique mark.

    The projection of these values is the true projection up to the first mark, so a page
    can show that much of it; mark → characters missing there. A last mark stands for the
    blocks not loaded at all.
    """
    values: list[replay.Block] = []
    missing: dict[str, int] = {}
    for i, block in enumerate(row.blocks[:shown]):
        value = selectors.block_value(block)
        mark = f"{marks}{i}\ue001"
        match value:
            case replay.TextBlock() | replay.ReasoningBlock():
                if block.text_size > preview.size(block.text):
                    missing[mark] = block.text_size - preview.size(block.text)
                    value = dataclasses.replace(value, text=block.text + mark)
            case replay.ToolResultBlock():
                if block.text_size > preview.size(block.text):
                    missing[mark] = block.text_size - preview.size(block.text)
                    value = dataclasses.replace(value, content=block.text + mark)
            case replay.ToolUseBlock():
                if block.input_size > preview.size(block.input_json):
                    missing[mark] = block.input_size - preview.size(block.input_json)
                    value = dataclasses.replace(value, input_json=block.input_json + mark)
            case replay.ImageBlock():
                pass
            case _:
                assert_never(value)
        values.append(value)
    if shown < row.block_count:
        mark = f"{marks}rest\ue001"
        missing[mark] = 0
        values.append(replay.TextBlock(mark))
    return values, missing


def _wire_shown(
    text: str, missing: dict[str, int], budget: Budget, rest: str
) -> tuple[str, Truncation | None]:
    """The start of a wire text to show (up to its first mark, 64 KB, 400 lines, the budget)."""
    marks = [(text.find(mark), mark, n) for mark, n in missing.items() if mark in text]
    size = preview.size(text) + sum(n - preview.size(mark) for _, mark, n in marks)
    first = min((at for at, _, _ in marks), default=len(text))
    start = budget.take(preview.cut(text[:first]))
    return start, (Truncation(size, rest) if len(start) < len(text) or marks else None)


def message_views(
    conversation: Conversation,
    rows: Sequence[selectors.PreviewRow],
    *,
    vision: bool,
    shape: replay.Shape,
    margin: dict[int, TokensView] | None = None,
) -> list[MessageView]:
    """Each message beside its projection, bounded: a side shows at most `SIDE_BYTES`."""
    views = []
    marks = f"\ue000{secrets.token_hex(8)}:"
    for row in rows:
        record = Budget()
        block_views = []
        for block in row.blocks:
            if record.left <= 0:
                break
            block_views.append(block_view(conversation.id, row.seq, block, record))
        values, missing = _cut_values(row, len(block_views), marks)
        stored = replay.StoredMessage(cast(replay.Role, row.role), tuple(values))
        wire = replay.project_message(stored, vision=vision, shape=shape)
        content = wire["content"]
        projection = Budget()
        parts: list[PartView] = []
        text: str | None = None
        cut: Truncation | None = None
        if isinstance(content, str):
            rest = wire_text_url(conversation.id, row.seq, vision=vision, shape=shape, part=None)
            text, cut = _wire_shown(content, missing, projection, rest)
        else:
            images = iter([b for b in row.blocks[: len(block_views)] if b.type == "image"])
            for index, part in enumerate(content):
                if part["type"] == "text":
                    rest = wire_text_url(
                        conversation.id, row.seq, vision=vision, shape=shape, part=index
                    )
                    shown, part_cut = _wire_shown(part["text"], missing, projection, rest)
                    parts.append(PartView("text", shown, folded=folds(shown), truncated=part_cut))
                    if part_cut is not None:
                        break  # what follows a cut part is past the first mark
                else:
                    image = next(images)
                    url = image_url(conversation.id, row.seq, image.seq)
                    parts.append(PartView("image", image_url=url, media_type=image.media_type))
        margin_view = (margin or {}).get(row.seq)
        stamp, stamp_text = source_time(row.metadata)
        views.append(
            MessageView(
                seq=row.seq,
                role=row.role,
                created_at=row.created_at,
                blocks=block_views,
                wire_role="system" if row.role == "system" else wire["role"],
                lifted=shape == "anthropic" and row.role == "system",
                text=text,
                parts=parts,
                meta=message_meta(
                    row.metadata, usage_shown=margin_view is not None and bool(margin_view.usage)
                ),
                source_time=stamp,
                source_time_text=stamp_text,
                boundary=boundary(row.metadata),
                tokens=margin_view,
                folded=text is not None and folds(text),
                block_count=row.block_count,
                hidden_blocks=row.block_count - len(block_views),
                truncated=cut,
                record_url=message_record_url(conversation.id, row.seq),
                projection_url=message_projection_url(
                    conversation.id, row.seq, vision=vision, shape=shape
                ),
            )
        )
    return views


def boundary(metadata: dict[str, Any]) -> str:
    marker = metadata.get("compact_boundary")
    if not isinstance(marker, dict):
        return ""
    words = ["Compacted here"]
    if marker.get("trigger"):
        words.append(f"({marker['trigger']})")
    if marker.get("preTokens"):
        words.append(f"from {marker['preTokens']} tokens")
    return " ".join(words) + ": the model receives what follows"


GAPS_SHOWN = 50


@dataclass(frozen=True)
class GapView:
    text: str
    url: str  # the deep link to the marked block's message, when it has one


def import_view(conversation: Conversation) -> dict[str, Any] | None:
    """What an imported conversation's page says about its source: the format and file,
    the gaps (the first GAPS_SHOWN, with the total), and conversations linked to it."""
    metadata = conversation.metadata if isinstance(conversation.metadata, dict) else {}
    source = metadata.get("import")
    if not isinstance(source, dict):
        return None
    gaps = metadata.get("gaps") if isinstance(metadata.get("gaps"), list) else []
    assert isinstance(gaps, list)
    views = []
    for gap in gaps[:GAPS_SHOWN]:
        if not isinstance(gap, dict):
            continue
        text = (
            f"{gap.get('kind')}: {gap.get('detail')}" if gap.get("detail") else str(gap.get("kind"))
        )
        if gap.get("where"):
            text += f" ({gap['where']})"
        seq = gap.get("message")
        views.append(GapView(text, f"#m-{seq}" if isinstance(seq, int) else ""))
    linked_ids = [str(i) for i in (metadata.get("linked") or [])][:GAPS_SHOWN]
    parent = metadata.get("linked_from")
    links = [{"url": reverse("conversation", args=[i]), "label": "sidechain"} for i in linked_ids]
    if isinstance(parent, str):
        links.insert(
            0, {"url": reverse("conversation", args=[parent]), "label": "main conversation"}
        )
    return {
        "format": source.get("format"),
        "file_name": source.get("file_name"),
        "gaps": views,
        "gaps_total": len(gaps),
        "gaps_more": max(0, len(gaps) - GAPS_SHOWN),
        "partial_payload": source.get("format") == "claude-code",
        "links": links,
    }


def query(**params: Any) -> str:
    return "?" + urlencode(params)


def toggle(label: str, path: str, options: dict[str, object], active: bool) -> dict[str, object]:
    return {"label": label, "url": path + query(**options), "active": active}


def projection_toggles(
    path: str, options: dict[str, object], *, vision: bool, shape: replay.Shape
) -> list[dict[str, object]]:
    """The page's two choices as two groups, each with exactly one option active. An
    option's `prefix` (the group's name, visually hidden) makes its accessible name whole:
    "Vision on", not "on"."""
    return [
        {
            "key": "vision",
            "label": "Vision",
            "options": [
                toggle("on", path, options | {"vision": 1}, vision) | {"prefix": "Vision "},
                toggle("off", path, options | {"vision": 0}, not vision) | {"prefix": "Vision "},
            ],
        },
        {
            "key": "shape",
            "label": "Shape",
            "options": [
                toggle("OpenAI", path, options | {"shape": "openai"}, shape == "openai"),
                toggle("Anthropic", path, options | {"shape": "anthropic"}, shape == "anthropic"),
            ],
        },
    ]


def conversation_page(
    conversation: Conversation,
    *,
    window: range,
    vision: bool,
    shape: replay.Shape,
    view: dict[str, str] | None = None,
    earlier: bool = True,
    later: bool = True,
) -> dict[str, Any]:
    """A page's (or a window load's) context: the messages at `window`, with controls to
    load the windows before (`earlier`) and after it (`later`) when there are any; `view`
    may override the model and window of the pressure view (OptionError on a bad value)."""
    window = range(max(0, window.start), min(window.stop, window.start + page_windows.DOCUMENT))
    rows = selectors.preview_rows(conversation, window)
    detail = reverse("conversation", args=[str(conversation.id)])
    options: dict[str, object] = {"vision": int(vision), "shape": shape}
    windows = reverse("earlier-messages", args=[str(conversation.id)]) + query(**options)
    first = rows[0].seq if rows else window.start
    last = rows[-1].seq if rows else window.start - 1
    total = conversation.message_count
    total_blocks = selectors.block_total(conversation)
    pressure = token_counts.pressure(
        conversation, ReplayOptions(vision, shape), query=view or {}, total_blocks=total_blocks
    )
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
            margin=margin_counts(conversation, pressure, rows),
        ),
        "conversation": conversation,
        "vision": vision,
        "shape": shape,
        "total_messages": total,
        "total_blocks": total_blocks,
        "self_url": detail + query(**options),
        "socket_url": socket_urls.conversation_socket_url(
            conversation.id, vision=vision, shape=shape, view=view
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
        "tool_pairs": tool_pairs_view(conversation, rows),
        "find_url": reverse("conversation-find", args=[str(conversation.id)]),
        "find_max_query": MAX_QUERY_CHARS,
        "imported": import_view(conversation),
        "last_seq": last,
        "toggles": projection_toggles(detail, options, vision=vision, shape=shape),
    }


def list_query(*, q: str, filters: ListFilters, page: int | None = None) -> str:
    """The list's query string for this search, these filters and `page` ("?…")."""
    query = {"q": q} | filters.query() | ({"page": str(page)} if page else {})
    return "?" + urlencode(query)


@dataclass(frozen=True)
class Pager:
    newer: str  # the newer page's URL query, or ""
    older: str
    label: str


def list_pager(page: Page[Conversation], *, q: str, filters: ListFilters) -> Pager | None:
    """Links to the newer and older pages, keeping the search and the filters; None when
    there is only one page."""
    if page.paginator.num_pages <= 1:
        return None
    newer = page.previous_page_number() if page.has_previous() else None
    older = page.next_page_number() if page.has_next() else None
    return Pager(
        newer=list_query(q=q, filters=filters, page=newer) if newer else "",
        older=list_query(q=q, filters=filters, page=older) if older else "",
        label=f"Page {page.number:,} of {page.paginator.num_pages:,}",
    )


def list_empty(*, q: str, filters: ListFilters) -> str:
    """What the list says when nothing is found (the template escapes it)."""
    if q and filters:
        return f"No conversation matches “{q}” with these filters."
    if q:
        return f"No conversation matches “{q}”."
    if filters:
        return "No conversation matches these filters."
    return "No conversations yet. Post one to the API (see the README)."


def conversation_rows(conversations: list[Conversation], *, q: str = "") -> list[ConversationRow]:
    """List rows, with whether each conversation's last message ends in unanswered tool
    calls, its model and error count (all read from its row) and, for a search `q`, where
    in the conversation it matched."""
    hits = selectors.search_hits(conversations, q) if q else {}
    now = timezone.now()
    rows = []
    for c in conversations:
        hit = hits.get(c.id)
        rows.append(
            ConversationRow(
                conversation=c,
                url=c.get_absolute_url(),
                relative=ago(c.updated_at, now),
                exact=c.updated_at.isoformat(timespec="seconds"),
                unanswered=c.unanswered_calls > 0,
                model=selectors.conversation_model(c),
                messages=f"{c.message_count:,}",
                errors=f"{c.error_count:,}" if c.error_count else "",
                hit_url=f"{c.get_absolute_url()}#m-{hit.message_seq}" if hit else "",
                hit_label=f"message {hit.message_seq}" if hit else "",
                snippet=hit.snippet if hit else "",
            )
        )
    return rows


# The compaction preview and the projection diff (docs/contract.md §7).

PREVIEW_WINDOW = 100
SHOWN_CHARS = 4000  # per text on these pages; the payload download has it whole


def shown(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + f"\n… ({len(text) - SHOWN_CHARS:,} more characters)"


@dataclass(frozen=True)
class PreviewBlock:
    seq: int
    label: str
    text: str
    changed: bool


@dataclass(frozen=True)
class PreviewMessage:
    seq: int
    role: str
    before: int | None
    after: int | None
    blocks: list[PreviewBlock]
    wire: str
    changed: bool

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"


def compact_query(policy: compact_core.Policy | None) -> dict[str, str]:
    return policy.query() if policy is not None else {}


def context_page(
    conversation: Conversation,
    options: ReplayOptions,
    policy: compact_core.Policy | None,
    *,
    view: dict[str, str],
    effective: bool,
    start: int | None,
) -> dict[str, Any]:
    """The compaction preview: tokens before → after, the full or effective payload (a
    window of it), each block the policy changed marked, copy and download following."""
    cid = str(conversation.id)
    here = reverse("conversation-context", args=[cid])
    base: dict[str, object] = {"vision": int(options.vision), "shape": options.shape, **view}
    rows = selectors.message_rows(conversation)
    stored = selectors.stored_messages(rows)
    if policy is not None:
        result = token_counts.preview(conversation, options, policy, query=view)
        before, after, compacted = result.before, result.after, result.compacted
    else:
        before = after = token_counts.pressure(conversation, options, query=view)
        compacted = compact_core.unchanged(stored, [r.seq for r in rows], "")
    effective = effective and policy is not None
    before_by = {c.seq: c.count.tokens for c in before.messages}
    after_by = {c.seq: c.count.tokens for c in after.messages}
    if effective:
        seqs, messages = list(compacted.seqs), list(compacted.messages)
    else:
        seqs, messages = [r.seq for r in rows], stored
    changed_seqs = sorted({s for s, _ in compacted.changed})
    first = start if start is not None else (changed_seqs[0] if changed_seqs else 0)
    index = next((i for i, s in enumerate(seqs) if s >= first), len(seqs))
    index = max(0, min(index, max(0, len(seqs) - PREVIEW_WINDOW)))
    window = range(index, min(len(seqs), index + PREVIEW_WINDOW))
    shown_messages = []
    for i in window:
        seq, message = seqs[i], messages[i]
        blocks_shown = [
            PreviewBlock(j, blocks.label(b), shown(replay.prose(b)), (seq, j) in compacted.changed)
            for j, b in enumerate(message.blocks)
        ]
        wire = replay.project_message(message, vision=options.vision, shape=options.shape)
        shown_messages.append(
            PreviewMessage(
                seq, message.role, before_by.get(seq), after_by.get(seq),
                blocks_shown, shown(diff_core.content_text(wire)),
                any(b.changed for b in blocks_shown),
            )
        )  # fmt: skip
    policy_query = compact_query(policy)
    payload_query = base | (policy_query if effective else {})
    policies = [
        toggle("No compaction", here, base, policy is None),
        *(
            toggle(name, here, base | {"compact": name}, policy is not None and policy.name == name)
            for name in compact_core.POLICIES
        ),
    ]
    modes = []
    if policy is not None:
        modes = [
            toggle("Full payload", here, base | policy_query | {"payload": "full"}, not effective),
            toggle("Effective payload", here, base | policy_query, effective),
        ]

    def page_url(at: int) -> str:
        mode = {} if effective or policy is None else {"payload": "full"}
        return here + query(**(base | policy_query | mode), **{"from": at})

    return {
        "conversation": conversation,
        "conversation_url": reverse("conversation", args=[cid]) + query(**base),
        "policy": policy,
        "policy_line": policy.describe() if policy is not None else "none",
        "params": {
            "keep": str(policy.keep) if policy is not None else "",
            "trigger": str(policy.trigger) if policy is not None else "",
            "clear_at_least": str(policy.clear_at_least) if policy is not None else "",
            "exclude_tools": ",".join(sorted(policy.exclude_tools)) if policy else "",
            "clear_tool_inputs": policy_query.get("clear_tool_inputs", "") if policy else "",
        },
        "policies": policies,
        "modes": modes,
        "effective": effective,
        "before": f"{before.total:,}",
        "after": f"{after.total:,}",
        "before_total": before.total,
        "after_total": after.total,
        "saved": f"{before.total - after.total:,}",
        "changed_count": len(compacted.changed),
        "dropped": compacted.dropped,
        "note": compacted.note,
        "pressure": pressure_view(after if effective else before, 0),
        "messages": shown_messages,
        "vision": options.vision,
        "shape": options.shape,
        "download_url": reverse("replay-download", args=[cid]) + query(**payload_query),
        "earlier_url": page_url(seqs[max(0, index - PREVIEW_WINDOW)]) if index > 0 else "",
        "later_url": page_url(seqs[window.stop]) if window.stop < len(seqs) else "",
        "diff_url": reverse("conversation-diff", args=[cid])
        + query(**base, **{f"b_{k}": v for k, v in policy_query.items()}),
    }


@dataclass(frozen=True)
class DiffSide:
    label: str
    vision: bool
    shape: replay.Shape
    policy: compact_core.Policy | None
    conversation: Conversation


@dataclass(frozen=True)
class DiffRowView:
    status: str
    left_label: str
    right_label: str
    left_text: str
    right_text: str
    segments: list[diff_core.Segment]


DIFF_WINDOW = 100


def side_payload(side: DiffSide) -> replay.Payload:
    options = ReplayOptions(side.vision, side.shape)
    if side.policy is None:
        return selectors.replay_payload(side.conversation, vision=side.vision, shape=side.shape)
    return token_counts.compacted_payload(side.conversation, options, side.policy)


def describe_side(side: DiffSide) -> str:
    what = [
        side.conversation.title or str(side.conversation.id),
        "vision on" if side.vision else "vision off",
        "OpenAI" if side.shape == "openai" else "Anthropic",
        side.policy.describe() if side.policy is not None else "full",
    ]
    return " · ".join(what)


def diff_page(
    left: DiffSide, right: DiffSide, *, start: int, here_query: dict[str, str]
) -> dict[str, Any]:
    """Two projections aligned message by message, a window of rows at a time."""
    rows = diff_core.diff(side_payload(left), side_payload(right))
    start = max(0, min(start, max(0, len(rows) - 1)))
    window = rows[start : start + DIFF_WINDOW]
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
        "total_rows": len(rows),
        "differing": sum(1 for r in rows if r.status != "same"),
        "start": start,
        "presets": [toggle(name, here, params, False) for name, params in presets],
        "earlier_url": here + query(**(here_query | {"from": str(max(0, start - DIFF_WINDOW))}))
        if start > 0
        else "",
        "later_url": here + query(**(here_query | {"from": str(start + DIFF_WINDOW)}))
        if start + DIFF_WINDOW < len(rows)
        else "",
        "other": str(right.conversation.id) if right.conversation != left.conversation else "",
        "left_vision": left.vision,
        "left_shape": left.shape,
    }


EXPIRY_CHOICES = [
    ("3600", "in 1 hour"),
    ("86400", "in 1 day"),
    ("259200", "in 3 days"),
    ("604800", "in 7 days"),
    ("1209600", "in 14 days"),
    ("2592000", "in 30 days"),
    ("", "never"),
]


@dataclass(frozen=True)
class ShareRow:
    id: int
    created_at: datetime
    scope: str
    toggles: str
    expires_at: datetime | None
    view_count: int
    last_viewed_at: datetime | None
    state: str
    revoke_url: str


def share_rows(conversation: Conversation, links: Sequence[ShareLink]) -> list[ShareRow]:
    """The conversation page's list of its share links (never their tokens)."""
    now = timezone.now()
    rows = []
    for link in links:
        rows.append(
            ShareRow(
                id=link.pk,
                created_at=link.created_at,
                scope="live, whole"
                if link.up_to_seq is None
                else f"frozen, #0 to #{link.up_to_seq}",
                toggles=link.toggles_label,
                expires_at=link.expires_at,
                view_count=link.view_count,
                last_viewed_at=link.last_viewed_at,
                state=link.state(now),
                revoke_url=reverse("share-revoke", args=[str(conversation.id), link.pk]),
            )
        )
    return rows


def shares_panel(conversation: Conversation, **extra: Any) -> dict[str, Any]:
    """The context of the page's `shares` partial: the form and the links."""
    return {
        "conversation": conversation,
        "can_share": True,
        "share_rows": share_rows(conversation, selectors.share_list(conversation)),
        "shares_url": reverse("share-create", args=[str(conversation.id)]),
        "expiry_choices": EXPIRY_CHOICES,
        "last_seq_stored": max(conversation.message_count - 1, 0),
    } | extra


# Reading a conversation (issue 11): fold labels that say how much is folded, tool inputs on
# one line when short, and the metadata operators look for, in the message header and the
# page header. Every value read from metadata is checked for its type and cut to a bound;
# anything else is left out (never "None"), and the templates escape what is shown.

ONE_LINE_INPUT = 80  # characters: a tool input this short is shown as one line
META_CHARS = 80  # characters of a metadata value shown in a header
META_TITLE_CHARS = 300  # … and in its title
CONVERSATION_META_ITEMS = 8
# Conversation metadata shown elsewhere on the page, or not worth a header chip.
MODEL_KEYS = ("model", "gen_ai.response.model", "gen_ai.request.model")
CONVERSATION_META_HIDDEN = frozenset(
    {*MODEL_KEYS, "import", "gaps", "linked", "linked_from", "compact_boundaries", "context_window"}
)


def input_text(input_json: str) -> str:
    """A tool input as the record shows it: one line of JSON when that fits in
    `ONE_LINE_INPUT` characters, else indented (key order kept either way)."""
    value = json.loads(input_json)
    one = json.dumps(value, ensure_ascii=False)  # newlines in strings stay escaped
    if len(one) <= ONE_LINE_INPUT:
        return one
    return json.dumps(value, indent=2, ensure_ascii=False)


def line_count(text: str) -> int:
    """Lines as an editor counts them: a final newline ends the last line, starts none."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def size_note(text: str, cut: Truncation | None) -> str:
    """How much a text is: "40 lines, 1.2 kB" when it is shown whole, "first 400 lines,
    65.5 kB of 81.2 kB" for its start (`cut`: its truncation); one line says its size."""
    lines = line_count(text)
    size = preview.human_size(preview.size(text))
    what = f"{lines:,} lines, {size}" if lines > 1 else size
    if cut is None:
        return what
    return f"first {what} of {preview.human_size(cut.size)}"


def fold_label(text: str, cut: Truncation | None) -> str:
    """The label of a fold's button: "show all 40 lines, 1.2 kB" (or, for a text shown in
    part, "show the first 400 lines, 65.5 kB of 81.2 kB")."""
    note = size_note(text, cut)
    return f"show the {note}" if cut is not None else f"show all {note}"


@dataclass(frozen=True)
class MetaItem:
    """One fact in a header: `kind` names it (a CSS hook), `text` is shown, `title` on hover."""

    kind: str
    text: str
    title: str = ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: object) -> str | None:
    """A metadata value worth a header: a non-empty string or a number (booleans as JSON
    spells them); None for anything else (objects, lists, null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    return None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _item(kind: str, text: str, title: str) -> MetaItem:
    return MetaItem(kind, _cut(text, META_CHARS), _cut(title, META_TITLE_CHARS))


def _usage_title(metadata: dict[str, Any], tokens_in: int | None, tokens_out: int | None) -> str:
    usage = metadata.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    parts = []
    if tokens_in is not None:
        cache = [
            f"{label} {n:,}"
            for key, label in (
                ("cache_read_input_tokens", "cache read"),
                ("cache_creation_input_tokens", "cache write"),
            )
            if (n := _count(usage.get(key)))
        ]
        parts.append(f"input {tokens_in:,}" + (f" (of which {', '.join(cache)})" if cache else ""))
    if tokens_out is not None:
        parts.append(f"output {tokens_out:,}")
    return "Tokens the provider measured: " + "; ".join(parts)


def latency_label(ms: float) -> str:
    """850 ms, 2.4 s, 3 min 5 s."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def message_meta(metadata: object, *, usage_shown: bool = False) -> list[MetaItem]:
    """What a message's metadata says about its turn, in header order: model, tokens in and
    out (unless the margin count already shows the measured usage: `usage_shown`), stop
    reason, latency. Keys of every importer and of OTel GenAI; absent or odd values give
    nothing."""
    if not isinstance(metadata, dict):
        return []
    items = []
    model = _model(metadata)
    if model is not None:
        items.append(_item("model", model, f"model: {model}"))
    measured = tokens.usage_of(metadata)
    tokens_in = _count(measured.input) if measured is not None else None
    tokens_out = _count(measured.output) if measured is not None else None
    if tokens_in is None:
        tokens_in = _count(metadata.get("gen_ai.usage.input_tokens"))
    if tokens_out is None:
        tokens_out = _count(metadata.get("gen_ai.usage.output_tokens"))
    if not usage_shown and (tokens_in is not None or tokens_out is not None):
        sides = ((tokens_in, "in"), (tokens_out, "out"))
        said = " · ".join(f"{n:,} {side}" for n, side in sides if n is not None)
        items.append(_item("tokens", said, _usage_title(metadata, tokens_in, tokens_out)))
    stop = _scalar(metadata.get("stop_reason")) or _scalar(metadata.get("finish_reason"))
    reasons = metadata.get("gen_ai.response.finish_reasons")
    if stop is None and isinstance(reasons, list):
        named = [r for r in reasons if isinstance(r, str) and r.strip()]
        stop = ", ".join(named) or None
    if stop is not None:
        items.append(_item("stop", f"stop: {stop}", f"stop reason: {stop}"))
    for key in ("latency_ms", "duration_ms"):
        ms = metadata.get(key)
        if isinstance(ms, int | float) and not isinstance(ms, bool) and 0 <= ms < 1e12:
            items.append(_item("latency", latency_label(ms), f"latency: {ms:,} ms ({key})"))
            break
    return items


def _model(metadata: dict[str, Any]) -> str | None:
    return next((m for key in MODEL_KEYS if (m := _scalar(metadata.get(key))) is not None), None)


def source_time(metadata: object) -> tuple[datetime | None, str]:
    """The source's own timestamp of a message (`metadata.timestamp`, as imports keep it):
    (the time in UTC, "") when it is ISO 8601 with a zone, else (None, the value as text)."""
    if not isinstance(metadata, dict):
        return None, ""
    value = metadata.get("timestamp")
    if not isinstance(value, str) or not value.strip():
        return None, ""
    try:
        parsed = datetime.fromisoformat(value) if len(value) <= 64 else None
        # At the ends of the calendar ("0001-01-01T00:00:00+01:00") UTC is out of range.
        in_utc = parsed.astimezone(UTC) if parsed is not None and parsed.tzinfo else None
    except (ValueError, OverflowError):
        in_utc = None
    if in_utc is None:
        return None, _cut(value, META_CHARS)
    return in_utc, ""


def conversation_meta(metadata: object, *, model: str = "") -> list[MetaItem]:
    """The page header's facts about the conversation: its model (`model`: the one a
    message names, when the conversation names none), its source format, then up to
    `CONVERSATION_META_ITEMS` other plain values of its metadata, by key."""
    meta = metadata if isinstance(metadata, dict) else {}
    items = []
    named = _model(meta) or _scalar(model)
    if named is not None:
        items.append(_item("model", f"model {named}", f"model: {named}"))
    source = meta.get("import")
    if isinstance(source, dict) and (fmt := _scalar(source.get("format"))) is not None:
        items.append(_item("source", f"source {fmt}", f"imported from {fmt}"))
    shown = 0
    for key in sorted(k for k in meta if isinstance(k, str)):
        if shown == CONVERSATION_META_ITEMS:
            break
        value = _scalar(meta[key])
        if key in CONVERSATION_META_HIDDEN or value is None:
            continue
        label = _cut(key, 40)
        items.append(_item("key", f"{label} {value}", f"{key}: {value}"))
        shown += 1
    return items


# The finder (issue 11): tool rounds whose other half is outside a window.


@dataclass(frozen=True)
class ToolPairsView:
    """JSON objects (call id → message seq) for the window partial's data attributes:
    where the results of its unanswered-here calls are, and the calls of its results."""

    results: str
    calls: str


def tool_pairs_view(
    conversation: Conversation, rows: Sequence[selectors.PreviewRow]
) -> ToolPairsView | None:
    """The window's tool rounds that it holds only one half of, resolved by the record
    (bounded: `finder_reads.tool_pairs`); None when there are none to tell."""
    pairs = finder_reads.tool_pairs(conversation, rows)
    if not pairs.results and not pairs.calls:
        return None
    return ToolPairsView(json.dumps(pairs.results), json.dumps(pairs.calls))
