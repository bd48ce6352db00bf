"""Token counts as the page shows them: the pressure header (the total against the window,
by kind, the trigger's mark) and each message's margin count (docs/contract.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from conversations.core import tokens
from conversations.record.rows import Counted, Pressure


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


def tokens_view(counted: Counted) -> TokensView:
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
            said.append(f"{trusted:,} out" + (f" (×{r:.2f} of ≈{out:,})" if r else ""))
        elif counted.usage.output is not None:  # below the reply's own estimate: not a count
            said.append(f"out recorded as {counted.usage.output:,}, not trusted")
        usage = "measured " + " · ".join(said)
    return TokensView(c.tokens, " · ".join(parts), usage)


def measured_input(p: Pressure) -> str:
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


def pressure_view(p: Pressure, total_blocks: int) -> PressureView:
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


def margin_counts(counted: Mapping[int, Counted]) -> dict[int, TokensView]:
    """The margin counts of the messages shown (a page's window, a frame's messages), from
    their counts as read for exactly the blocks shown (`token_counts.counted_shown`)."""
    return {seq: tokens_view(c) for seq, c in counted.items()}
