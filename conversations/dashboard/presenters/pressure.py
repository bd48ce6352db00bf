"""Token counts as the page shows them (docs/contract.md §7): the pressure header, led by
the next request's size (measured where the record holds the provider's usage), the
record's estimate by kind plus what the provider counts that the record lacks, the
heaviest blocks and the trigger's mark; and each message's margin count and share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import assert_never

from conversations.core.counting import tokens
from conversations.core.counting.context_windows import Window
from conversations.record.reads.rows import Counted, Pressure


@dataclass(frozen=True)
class TokensView:
    """A message's margin count and what its metadata measured. Only what depends on this
    message alone: a live frame re-renders a message when it grows, not when an earlier
    one does (running totals and the input estimate live in the pressure header)."""

    tokens: int
    detail: str  # by kind and framing, for the title
    usage: str  # "measured 1,234 in · 58 out (1.02 times the ≈57 estimated)", or ""
    share: str = ""  # of the window, "4.2%" ("" when no window is known)
    share_width: float = 0.0  # the margin bar's width in percent, at least visible

    @property
    def label(self) -> str:
        return f"≈{self.tokens:,} tokens"


def tokens_view(counted: Counted, window: int | None = None) -> TokensView:
    c = counted.count
    parts = [f"{tokens.KIND_LABELS[k]} {n:,}" for k, n in c.by_kind.items()]
    parts.append(f"framing {c.framing:,}")
    usage = ""
    if counted.usage is not None:
        said = []
        if counted.usage.input is not None:
            said.append(f"{counted.usage.input:,} in")
        out = c.tokens - c.framing
        trusted = tokens.trusted_output(counted.usage, out)
        if trusted is not None:
            r = tokens.ratio(trusted, out)
            of = f" ({r:.2f} times the ≈{out:,} estimated)" if r else ""
            said.append(f"{trusted:,} out{of}")
        elif counted.usage.output is not None:  # below the reply's own estimate: not a count
            said.append(f"out recorded as {counted.usage.output:,}, not trusted")
        usage = "measured " + " · ".join(said)
    share, width = "", 0.0
    if window:
        share = f"{c.tokens / window:.1%}"
        width = min(100.0, max(0.5, round(100 * c.tokens / window, 2))) if c.tokens else 0.0
    return TokensView(c.tokens, " · ".join(parts), usage, share, width)


def measured_input(p: Pressure) -> str:
    """The latest turn whose usage measured its input, beside the estimate of that input
    (everything before the message, plus the request overhead)."""
    m = p.measured
    if m is None:
        return ""
    r = tokens.ratio(m.input, m.estimate)
    return f"measured input of #{m.seq}: {m.input:,} tokens vs ≈{m.estimate:,}" + (
        f" estimated ({r:.2f} times the estimate)" if r else " estimated"
    )


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
class HeavyView:
    seq: int
    block: int
    label: str  # the block kind's label
    tokens: int

    @property
    def tokens_label(self) -> str:
        return f"{self.tokens:,}"


@dataclass(frozen=True)
class PressureView:
    """The pressure header: the next request against the window, the record by kind and
    what it lacks, the heaviest blocks, and the trigger's mark."""

    next_tokens: int
    next_basis: str  # "measured" or "estimated"
    next_note: str  # how the figure was made, for the reader
    next_percent: str
    next_over: bool
    unrecorded: int | None
    unrecorded_seq: int | None
    largest: list[HeavyView]
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
    shape: str  # the shape the figures are counted in

    @property
    def total_label(self) -> str:
        return f"{self.total:,}"

    @property
    def next_label(self) -> str:
        return f"{self.next_tokens:,}"

    @property
    def unrecorded_label(self) -> str:
        return f"{self.unrecorded:,}" if self.unrecorded is not None else ""

    @property
    def trigger_label(self) -> str:
        return f"{self.trigger:,}"


BAR = 1000


def next_note(p: Pressure) -> str:
    """How the next request's size was made, in the reader's words."""
    head = p.headline
    if head.next.basis == "measured":
        factor = (
            f", scaled by {head.next.factor:.2f} for the tokenizer" if head.next.factor != 1 else ""
        )
        return f"measured at #{head.next.measured_seq} + ≈{head.next.since:,} since{factor}"
    if head.unrecorded.tokens:
        return (
            f"estimated: the record ≈{head.next.tokens - head.unrecorded.tokens:,} + "
            f"≈{head.unrecorded.tokens:,} unrecorded (inferred from usage at "
            f"#{head.unrecorded.measured_seq})"
        )
    if head.boundary is not None:  # only a compacted record has a last boundary to name
        return "estimated from the record alone (no measured usage after the last boundary)"
    return "estimated from the record alone (no measured usage)"


def window_origin(window: Window) -> str:
    """Where the window's figure came from, in the reader's words (docs/contract.md §7)."""
    model = f" ({window.model})" if window.model else ""
    match window.source:
        case "view":
            return "from ?window="
        case "conversation":
            return "set on this conversation"
        case "claude-code":
            return f"Claude Code's default{model}"
        case "claude-code-1m":
            return f"Claude Code's 1M context, as the session says{model}"
        case "compaction":
            return (
                f"Claude Code's 1M context (it compacted at {window.pre_tokens or 0:,} tokens, "
                f"past the default 200,000){model}"
            )
        case "table":
            return f"from the model table{model}"
        case _:
            assert_never(window.source)


def pressure_view(p: Pressure, total_blocks: int) -> PressureView:
    by_kind = p.payload.by_kind()
    window = p.window.tokens
    head = p.headline
    unrecorded = head.unrecorded.tokens or 0
    # The bar spans the window, or what it holds when that is past the window (or none is
    # known): the record by kind, then what the provider counted that the record lacks.
    scale = max(window or 0, p.total + unrecorded, head.next.tokens, 1)
    segments, x = [], 0
    for kind, n in [*((k, by_kind[k]) for k in tokens.COUNT_KINDS), ("unrecorded", unrecorded)]:
        width = round(n * BAR / scale)
        if width:
            segments.append(Segment(kind, x, width))
            x += width
    note = (
        f"{window:,} — {window_origin(p.window)}"
        if window
        else f"unknown for {p.window.model!r}"
        if p.window.model
        else "unknown (no model named)"
    )
    return PressureView(
        shape=p.options.shape,
        next_tokens=head.next.tokens,
        next_basis=head.next.basis,
        next_note=next_note(p),
        next_percent=f"{head.next.tokens / window:.1%}" if window else "",
        next_over=bool(window and head.next.tokens > window),
        unrecorded=head.unrecorded.tokens,
        unrecorded_seq=head.unrecorded.measured_seq,
        largest=[
            HeavyView(b.seq, b.block, tokens.KIND_LABELS[b.kind], b.tokens) for b in head.largest
        ],
        tokenizer=tokens.TOKENIZER,
        total=p.total,
        overhead=p.payload.overhead,
        window=window,
        window_note=note,
        percent=f"{p.total / window:.1%}" if window else "",
        over=bool(window and p.total > window),
        kinds=[
            KindView(
                kind=k,
                label=tokens.KIND_LABELS[k],
                tokens=by_kind[k],
                share=f"{by_kind[k] / p.total:.1%}" if p.total else "0%",
            )
            for k in tokens.COUNT_KINDS
        ],
        segments=segments,
        window_x=round(window * BAR / scale) if window and window < scale else None,
        trigger=p.trigger,
        trigger_x=round(p.trigger * BAR / scale) if p.trigger <= scale else None,
        trigger_seq=p.trigger_seq,
        measured=measured_input(p),
        total_messages=p.message_total,
        total_blocks=total_blocks,
    )


def margin_counts(
    counted: Mapping[int, Counted], window: int | None = None
) -> dict[int, TokensView]:
    """The margin counts of the messages shown (a page's window, a frame's messages), from
    their counts as read for exactly the blocks shown (`token_counts.counted_shown`), each
    with its share of the context `window`."""
    return {seq: tokens_view(c, window) for seq, c in counted.items()}
