"""The comparison of two runs (docs/contract.md §9): the summaries side by side, the line
saying what changed, and one page of aligned rows with differing words marked and unchanged
runs folded; and the picker that chooses the run to compare with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from conversations.core import compare as compare_core
from conversations.core import diff as diff_core
from conversations.core.compare import Fold, MessageText, Row, Shown, Summary
from conversations.core.counting import words
from conversations.core.options import ReplayOptions
from conversations.web.links import projection_toggles, query
from conversations.web.protocols import ConversationLike


@dataclass(frozen=True)
class CompareRead:
    """What the view read: both conversations, their summaries, the first divergence (and
    its row), the page's rows folded, and the texts of the rows shown."""

    a: ConversationLike
    b: ConversationLike
    options: ReplayOptions
    summaries: tuple[Summary, Summary]
    first_divergence: Row | None
    first_divergence_row: int | None
    changed: str
    minimal: bool
    page: int
    pages: int
    total_rows: int
    items: Sequence[Shown | Fold]
    tokens: Mapping[int, tuple[int | None, int | None]]  # row → (A's count, B's)
    texts: tuple[Mapping[int, MessageText], Mapping[int, MessageText]]


@dataclass(frozen=True)
class SideView:
    label: str  # "A #5"
    url: str  # the message in its conversation
    role: str
    tokens: str
    text: str
    cut: bool
    segments: list[diff_core.Segment] | None  # marked words, for a pair that differs


@dataclass(frozen=True)
class RowView:
    row: int
    fold: bool
    status: str  # same, changed, only-a, only-b, folded
    status_label: str
    first: bool
    a: SideView | None = None
    b: SideView | None = None
    fold_label: str = ""
    fold_a: str = ""
    fold_b: str = ""
    fold_a_url: str = ""
    fold_b_url: str = ""
    open_url: str = ""


def _message_url(conversation: ConversationLike, seq: int) -> str:
    return reverse("conversation", args=[str(conversation.id)]) + f"#m-{seq}"


def _side(
    name: str,
    conversation: ConversationLike,
    seq: int | None,
    tokens: int | None,
    texts: Mapping[int, MessageText],
) -> SideView | None:
    if seq is None:
        return None
    text = texts.get(seq)
    return SideView(
        label=f"{name} #{seq}",
        url=_message_url(conversation, seq),
        role=text.role if text else "",
        tokens=f"≈{tokens:,} tokens" if tokens is not None else "",
        text=text.text if text else "",
        cut=text.cut if text else False,
        segments=None,
    )


STATUS_LABELS = {
    "same": "same",
    "changed": "differs",
    "only-a": "only in A",
    "only-b": "only in B",
}


def _row_view(read: CompareRead, item: Shown, here: dict[str, object]) -> RowView:
    tokens_a, tokens_b = read.tokens.get(item.row, (None, None))
    a = _side("A", read.a, item.a_seq, tokens_a, read.texts[0])
    b = _side("B", read.b, item.b_seq, tokens_b, read.texts[1])
    if a is not None and b is not None:
        status = "same" if item.same else "changed"
        if not item.same:
            segments = list(diff_core.text_diff(a.text, b.text))
            a = SideView(**{**a.__dict__, "segments": segments})
            b = SideView(**{**b.__dict__, "segments": segments})
    else:
        status = "only-a" if a is not None else "only-b"
    return RowView(
        row=item.row,
        fold=False,
        status=status,
        status_label=STATUS_LABELS[status],
        first=item.row == read.first_divergence_row,
        a=a,
        b=b,
    )


def _fold_view(read: CompareRead, item: Fold, here: dict[str, object]) -> RowView:
    noun = "message" if item.count == 1 else "messages"
    return RowView(
        row=item.row,
        fold=True,
        status="folded",
        status_label="folded",
        first=False,
        fold_label=f"{item.count:,} identical {noun}",
        fold_a=f"A #{item.a_first}–#{item.a_last}",
        fold_b=f"B #{item.b_first}–#{item.b_last}",
        fold_a_url=_message_url(read.a, item.a_first),
        fold_b_url=_message_url(read.b, item.b_first),
        open_url=reverse("compare") + query(**(here | {"open": item.row})) + f"#row-{item.row}",
    )


def _summary_rows(a: Summary, b: Summary) -> list[dict[str, str]]:
    def tools(s: Summary) -> str:
        if not s.tool_calls:
            return "none"
        return " · ".join(f"{name} {count:,}" for name, count in s.tool_calls.items())

    def took(s: Summary) -> str:
        return _duration(s.duration_s)

    return [
        {"label": "Messages", "a": f"{a.messages:,}", "b": f"{b.messages:,}"},
        {"label": "Next request", "a": f"≈{a.tokens:,} tokens", "b": f"≈{b.tokens:,} tokens"},
        {"label": "Tool calls", "a": tools(a), "b": tools(b)},
        {"label": "Errors", "a": f"{a.errors:,}", "b": f"{b.errors:,}"},
        {"label": "Duration", "a": took(a), "b": took(b)},
    ]


def _duration(seconds: float | None) -> str:
    """ "1 h 2 min", "3 min 20 s", "4.5 s"; "—" when there are no messages."""
    if seconds is None:
        return "—"
    whole = int(abs(seconds))
    sign = "-" if seconds < 0 else ""
    if whole >= 3600:
        return f"{sign}{whole // 3600} h {whole % 3600 // 60} min"
    if whole >= 60:
        return f"{sign}{whole // 60} min {whole % 60} s"
    return f"{seconds:.1f} s"


def compare_page(read: CompareRead) -> dict[str, Any]:
    """The compare page's context: the header, the summaries, the what-changed line, the
    page's rows (folded runs as one line each) and the pager."""
    options = read.options.query()
    base: dict[str, object] = {"a": str(read.a.id), "b": str(read.b.id)} | options
    here = base | {"page": read.page}
    path = reverse("compare")
    items: list[RowView] = []
    for item in read.items:
        if isinstance(item, Fold):
            items.append(_fold_view(read, item, here))
        else:
            items.append(_row_view(read, item, here))
    first = read.first_divergence

    def page_url(n: int) -> str:
        return path + query(**(base | {"page": n}))

    return {
        "a": read.a,
        "b": read.b,
        "a_url": reverse("conversation", args=[str(read.a.id)]),
        "b_url": reverse("conversation", args=[str(read.b.id)]),
        "toggles": projection_toggles(
            path, base, vision=read.options.vision, shape=read.options.shape
        ),
        "summaries": _summary_rows(*read.summaries),
        "changed": read.changed,
        "minimal": read.minimal,
        "first": None
        if first is None
        else {
            "a": f"A #{first[0]}" if first[0] is not None else "",
            "b": f"B #{first[1]}" if first[1] is not None else "",
            "a_url": _message_url(read.a, first[0]) if first[0] is not None else "",
            "b_url": _message_url(read.b, first[1]) if first[1] is not None else "",
            "row": read.first_divergence_row,
            "url": path + query(**base) + f"#row-{read.first_divergence_row}",
        },
        "rows": items,
        "page": read.page,
        "pages": read.pages,
        "total_rows": read.total_rows,
        "earlier_url": page_url(read.page - 1) if read.page > 1 else "",
        "later_url": page_url(read.page + 1) if read.page < read.pages else "",
        "swap_url": path + query(**(base | {"a": str(read.b.id), "b": str(read.a.id)})),
        "api_url": reverse("api-compare") + query(**here),
    }


@dataclass(frozen=True)
class Candidate:
    title: str
    url: str
    note: str


def pick_page(
    a: ConversationLike,
    *,
    q: str,
    nearby: Sequence[ConversationLike],
    nearby_label: str,
    found: Sequence[ConversationLike] | None,
) -> dict[str, Any]:
    """The picker: conversations that share this one's `source` or `cwd` (most recent first)
    and, for a search `q`, those it finds; each links to the comparison."""

    def candidates(rows: Sequence[ConversationLike]) -> list[Candidate]:
        return [
            Candidate(
                c.title or str(c.id),
                reverse("compare") + query(a=str(a.id), b=str(c.id)),
                f"{words.count(c.message_count, 'message')}"
                f" · updated {c.updated_at:%Y-%m-%d %H:%M}",
            )
            for c in rows
        ]

    return {
        "a": a,
        "a_url": reverse("conversation", args=[str(a.id)]),
        "q": q,
        "nearby": candidates(nearby),
        "nearby_label": nearby_label,
        "found": None if found is None else candidates(found),
        "limit": compare_core.PICK_LIMIT,
    }
