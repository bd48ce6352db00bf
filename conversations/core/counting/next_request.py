"""The next request's size (docs/contract.md §7): what the provider will count as input for
the request that follows a message, and what it counts that the record does not hold.
Pure (no Django); the caller hands in each message's estimate and measured usage.

The headline is anchored on the provider's own measurement wherever the record has one:
the measured input of the latest measured turn, plus the estimate of what the record
added after that input (the turn's own messages and everything after them). Only the
added part is estimated, so the error of the whole is the error on a few messages, not on
a system prompt and tool definitions the record never saw.

The estimate of the added part is o200k_base's count scaled by a tokenizer factor: 1.0
for models that use o200k_base, a prior for Claude models (whose tokenizer is not public
and counts more tokens for the same text), and, once a conversation's own measured turns
span enough estimated tokens, the ratio they show.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from conversations.core.blocks import Role
from conversations.core.counting.tokens import CountKind, MessageCount, Usage, whole_number

Basis = Literal["measured", "estimated"]

# Claude's tokenizer counts about a tenth more tokens than o200k_base on the prose and
# code agents exchange (fitted on the real Claude Code sessions in tests/fixtures/real;
# tests/core/test_next_request.py measures the resulting accuracy on them).
CLAUDE_FACTOR = 1.1
# A conversation's own measured deltas replace the prior once they span this many
# estimated tokens: below it, per-message framing the record cannot see dominates.
CALIBRATION_MIN_TOKENS = 2_000
FACTOR_BOUNDS = (0.8, 1.5)
# The stored record calibrates on its latest measured messages only (a bounded read at any
# length; the tokenizer's ratio does not drift over a conversation).
CALIBRATION_MESSAGES = 1_000
LARGEST = 10


@dataclass(frozen=True, slots=True)
class MessageFigure:
    """One stored message as the next-request arithmetic sees it.

    `tokens` is the projection's estimate for the message; `usage` what the provider
    measured for the turn that produced it (assistant messages); `turn` the provider's
    response id, so stored messages split from one response count as one turn;
    `compact_summary` marks the message a compaction left for the model to continue from.
    """

    seq: int
    role: Role
    tokens: int
    usage: Usage | None = None
    turn: str | None = None
    compact_summary: bool = False


@dataclass(frozen=True, slots=True)
class NextRequest:
    """`tokens` = `measured` (the basis turn's input) + `since` (estimated, scaled by
    `factor`); with no measured turn, `tokens` = the estimate + the inferred unrecorded."""

    tokens: int
    basis: Basis
    measured_seq: int | None
    measured: int | None
    since: int
    factor: float

    def as_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "basis": self.basis, "measured_seq": self.measured_seq}


@dataclass(frozen=True, slots=True)
class Unrecorded:
    """What the provider counted that the record does not hold (a system prompt and tool
    definitions a transcript never wrote), inferred at the first measured turn."""

    tokens: int | None
    measured_seq: int | None

    def as_json(self) -> dict[str, object]:
        return {"tokens": self.tokens, "measured_seq": self.measured_seq}


@dataclass(frozen=True, slots=True)
class _Turn:
    start: int  # index of the turn's first stored message
    last: int  # index of its latest usage-bearing message
    input: int


def measured_turns(figures: Sequence[MessageFigure]) -> list[_Turn]:
    """Assistant messages with a measured input, one per provider turn, in order.

    Stored messages sharing a `turn` id are one response (Claude Code writes parallel
    tool calls apart, with their results between them): the turn starts at its first
    message, and its input is the one measurement the response carried.
    """
    first: dict[str, int] = {}
    turns: list[_Turn] = []
    for i, figure in enumerate(figures):
        if figure.turn is not None:
            first.setdefault(figure.turn, i)
        usage = figure.usage
        if figure.role != "assistant" or usage is None or not usage.input:
            continue
        start = first[figure.turn] if figure.turn is not None else i
        if turns and turns[-1].start == start:
            turns[-1] = _Turn(start, i, turns[-1].input)
        else:
            turns.append(_Turn(start, i, usage.input))
    return turns


def turn_of(metadata: Mapping[str, object]) -> str | None:
    """The provider's response id a message's metadata keeps (Anthropic and Claude Code
    `id`, OpenTelemetry GenAI `gen_ai.response.id`), or None."""
    for key in ("id", "gen_ai.response.id"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def prior_factor(model: str | None) -> float:
    """The tokenizer factor before a conversation has shown its own."""
    return CLAUDE_FACTOR if model and model.lower().startswith("claude") else 1.0


def calibrated_factor(
    figures: Sequence[MessageFigure], turns: Sequence[_Turn], prior: float
) -> float:
    """The ratio of measured to estimated growth between consecutive measured turns, once
    those spans hold `CALIBRATION_MIN_TOKENS` estimated tokens; else `prior`."""
    measured = estimated = 0
    for a, b in zip(turns, turns[1:], strict=False):
        grew = b.input - a.input
        if grew < 0:  # the provider dropped context between them: not a tokenizer figure
            continue
        measured += grew
        estimated += sum(f.tokens for f in figures[a.start : b.start])
    if estimated < CALIBRATION_MIN_TOKENS:
        return prior
    low, high = FACTOR_BOUNDS
    return min(high, max(low, measured / estimated))


def unrecorded(figures: Sequence[MessageFigure], overhead: int) -> Unrecorded:
    """The first measured turn's input minus the estimate of everything before it
    (`overhead` + the messages before the turn started), never below zero.

    `figures` are the messages after the last compaction boundary up to the message asked
    about (never a later one); with no measured turn among them, the caller carries the
    latest earlier stretch's across the boundary (docs/contract.md §7).
    """
    turns = measured_turns(figures)
    if not turns:
        return Unrecorded(None, None)
    turn = turns[0]
    before = overhead + sum(f.tokens for f in figures[: turn.start])
    return Unrecorded(max(0, turn.input - before), figures[turn.last].seq)


def next_request(
    figures: Sequence[MessageFigure],
    *,
    overhead: int,
    model: str | None,
    unrecorded_tokens: int | None,
) -> NextRequest:
    """The input of the request that would follow the last of `figures` (the messages
    after the last compaction boundary, up to the message asked about)."""
    turns = measured_turns(figures)
    if not turns:
        estimate = overhead + sum(f.tokens for f in figures)
        return NextRequest(estimate + (unrecorded_tokens or 0), "estimated", None, None, 0, 1.0)
    factor = calibrated_factor(figures, turns, prior_factor(model))
    basis = turns[-1]
    since = round(factor * sum(f.tokens for f in figures[basis.start :]))
    return NextRequest(
        basis.input + since, "measured", figures[basis.last].seq, basis.input, since, factor
    )


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    """A measured assistant message as the stored figures give it: its seq, the input the
    provider measured, the seq its response began at, and the estimate of every message
    before that start (a running total from the record's first message)."""

    seq: int
    input: int
    start: int
    before: int


@dataclass(frozen=True, slots=True)
class Turn:
    """One provider turn from `MeasuredRow`s: its start, its latest measured message, its
    input and the running estimate before its start."""

    start: int
    last: int
    input: int
    before: int


def turns_of(rows: Iterable[MeasuredRow]) -> list[Turn]:
    """`measured_turns` from the measured messages alone (in seq order): consecutive rows of
    one response are one turn, measured once."""
    turns: list[Turn] = []
    for row in rows:
        if turns and turns[-1].start == row.start:
            turns[-1] = Turn(row.start, row.seq, turns[-1].input, turns[-1].before)
        else:
            turns.append(Turn(row.start, row.seq, row.input, row.before))
    return turns


def calibration(turns: Sequence[Turn]) -> tuple[int, int]:
    """(measured, estimated) growth between consecutive turns whose input grew: what
    `calibrated_factor` weighs."""
    measured = estimated = 0
    for a, b in zip(turns, turns[1:], strict=False):
        grew = b.input - a.input
        if grew < 0:  # the provider dropped context between them: not a tokenizer figure
            continue
        measured += grew
        estimated += b.before - a.before
    return measured, estimated


def factor_of(sums: tuple[int, int], model: str | None) -> float:
    """The tokenizer factor from `calibration`'s sums, else the model's prior."""
    measured, estimated = sums
    if estimated < CALIBRATION_MIN_TOKENS:
        return prior_factor(model)
    low, high = FACTOR_BOUNDS
    return min(high, max(low, measured / estimated))


def next_request_at(
    basis: Turn | None,
    factor: float,
    *,
    overhead: int,
    since: int,
    through: int,
    unrecorded_tokens: int | None,
) -> NextRequest:
    """`next_request` from running totals: `basis` the latest measured turn after the last
    boundary up to the message asked about, `since` the running estimate before that
    boundary, `through` the running estimate up to and including the message asked about.
    Equal to `next_request` over the messages between (tests/core/test_next_request.py)."""
    if basis is None:
        estimate = overhead + through - since
        return NextRequest(estimate + (unrecorded_tokens or 0), "estimated", None, None, 0, 1.0)
    added = round(factor * (through - basis.before))
    return NextRequest(basis.input + added, "measured", basis.last, basis.input, added, factor)


def next_request_of(
    turns: Sequence[Turn],
    *,
    overhead: int,
    since: int,
    through: int,
    model: str | None,
    unrecorded_tokens: int | None,
) -> NextRequest:
    """`next_request_at` from every measured turn after the last boundary."""
    return next_request_at(
        turns[-1] if turns else None,
        factor_of(calibration(turns), model),
        overhead=overhead,
        since=since,
        through=through,
        unrecorded_tokens=unrecorded_tokens,
    )


def unrecorded_of(first: Turn | None, *, overhead: int, since: int) -> Unrecorded:
    """`unrecorded` from running totals: the first measured turn of a stretch between
    boundaries, and `since` the running estimate before that stretch began."""
    if first is None:
        return Unrecorded(None, None)
    return Unrecorded(max(0, first.input - (overhead + first.before - since)), first.last)


@dataclass(frozen=True, slots=True)
class HeavyBlock:
    seq: int
    block: int
    kind: CountKind
    tokens: int

    def as_json(self) -> dict[str, object]:
        return {"seq": self.seq, "block": self.block, "kind": self.kind, "tokens": self.tokens}


def heavy_blocks(seq: int, count: MessageCount) -> Iterator[HeavyBlock]:
    """Message `seq`'s blocks with what each sends (a block's seq is its place: dense)."""
    for block, (tokens, kind) in enumerate(zip(count.sent, count.kinds, strict=True)):
        if tokens:
            yield HeavyBlock(seq, block, kind, tokens)


def largest(blocks: Iterable[HeavyBlock], n: int = LARGEST) -> list[HeavyBlock]:
    """The `n` heaviest blocks, heaviest first; ties in record order. Memory is O(n)."""
    return heapq.nsmallest(n, blocks, key=lambda b: (-b.tokens, b.seq, b.block))


@dataclass(frozen=True, slots=True)
class Compaction:
    """One stored compaction boundary with the figures around it: what the source recorded
    before it (`pre_tokens`, null when it recorded none) and what the provider measured at
    the first turn after it (`post_tokens`)."""

    seq: int
    trigger: str | None
    pre_tokens: int | None
    post_tokens: int | None
    post_seq: int | None
    summary_seq: int | None

    def as_json(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "trigger": self.trigger,
            "pre_tokens": self.pre_tokens,
            "post_tokens": self.post_tokens,
            "summary_seq": self.summary_seq,
        }


def boundary_marks(metadata: object) -> list[Mapping[str, object]]:
    """The stored boundary marks (docs/contract.md §6.5) that name a seq, in seq order."""
    if not isinstance(metadata, dict):
        return []
    marks = metadata.get("compact_boundaries")
    if not isinstance(marks, list):
        return []
    named = [m for m in marks if isinstance(m, dict) and whole_number(m.get("seq")) is not None]
    return sorted(named, key=lambda m: whole_number(m.get("seq")) or 0)


def compactions(
    marks: Sequence[Mapping[str, object]], after: Mapping[int, Sequence[MessageFigure]]
) -> list[Compaction]:
    """One `Compaction` per mark. `after[seq]` holds the figures from the boundary at `seq`
    up to the next boundary (or the end): its summary and its first measured turn."""
    found = []
    for mark in marks:
        seq = whole_number(mark.get("seq"))
        if seq is None:
            continue
        figures = after.get(seq, ())
        turns = measured_turns(figures)
        post = figures[turns[0].last] if turns else None
        summary = next((f.seq for f in figures if f.compact_summary), None)
        trigger = mark.get("trigger")
        found.append(
            Compaction(
                seq,
                trigger if isinstance(trigger, str) else None,
                whole_number(mark.get("preTokens", mark.get("pre_tokens"))),
                turns[0].input if turns else None,
                post.seq if post is not None else None,
                summary,
            )
        )
    return found
