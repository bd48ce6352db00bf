"""The plain values the record's reads hand out: rows of messages and blocks, search hits,
tool rounds and token counts, with the pure functions over them.

No queries and no models: the dashboard's presenters are handed these values, so this is
all they import from the record. `selectors`, `finder_reads` and `token_counts` fill them
and re-export the names they always had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol, assert_never, cast

from conversations.core import list_status, replay, timestamps
from conversations.core.blocks import BlockKind
from conversations.core.counting import context_windows, preview, tokens
from conversations.core.counting import next_request as nr
from conversations.core.counting.compact import Compacted, Policy
from conversations.core.options import ReplayOptions

# Rows of messages and blocks.


class BlockRow(NamedTuple):
    message_id: int
    seq: int
    type: str
    text: str
    call_id: str
    name: str
    input_json: str
    is_error: bool
    media_type: str
    data: str
    origin: Any
    width: int | None = None
    height: int | None = None


class MessageRow(NamedTuple):
    id: int
    seq: int
    role: str
    created_at: datetime
    metadata: dict[str, Any]
    blocks: list[BlockRow]


class PreviewBlock(NamedTuple):
    """A block as pages and frames load it: long texts cut in SQL, no image data."""

    message_id: int
    seq: int
    type: str
    text: str  # at most `PREVIEW_CHARS` characters of the text (or result content)
    text_size: int  # of the whole text, in UTF-8 bytes
    call_id: str
    name: str
    input_json: str  # at most `PREVIEW_CHARS` characters of the input
    input_size: int  # in UTF-8 bytes
    is_error: bool
    media_type: str

    # An image's data and size are never read for a page: its value says so.
    @property
    def data(self) -> str:
        return ""

    @property
    def width(self) -> int | None:
        return None

    @property
    def height(self) -> int | None:
        return None


class PreviewRow(NamedTuple):
    id: int
    seq: int
    role: str
    created_at: datetime
    metadata: dict[str, Any]
    block_count: int
    blocks: list[PreviewBlock]  # the first `MESSAGE_BLOCKS` of `block_count`
    # Its stored token figures (`Message.counts`), read with `block_count`: one state.
    counts: dict[str, Any] | None = None


# One character more than a preview shows, so that a cut text is known to be cut.
PREVIEW_CHARS = preview.CHARS + 1


class StoredBlock(Protocol):
    """The columns `block_value` reads: a `BlockRow`, a `PreviewBlock` or a `Block`."""

    @property
    def type(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def call_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def input_json(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def media_type(self) -> str: ...
    @property
    def data(self) -> str: ...
    @property
    def width(self) -> int | None: ...
    @property
    def height(self) -> int | None: ...


def block_value(row: StoredBlock) -> replay.Block:
    """A stored row as its value; the row's columns are read as its kind defines them (a
    preview's texts are prefixes, and its image carries no data)."""
    kind = cast(BlockKind, row.type)
    match kind:
        case "text":
            return replay.TextBlock(row.text)
        case "tool_use":
            return replay.ToolUseBlock(row.call_id, row.name, row.input_json)
        case "tool_result":
            return replay.ToolResultBlock(row.call_id, row.name, row.text, row.is_error)
        case "reasoning":
            return replay.ReasoningBlock(row.text)
        case "image":
            return replay.ImageBlock(row.media_type, row.data, row.width, row.height)
        case _:
            assert_never(kind)


def shown_time(row: MessageRow) -> datetime:
    """The time a message is shown with: the source's own (`metadata.timestamp`) where it
    is stored as an ISO 8601 time with a zone, else when it was stored (docs/contract.md §6)."""
    return timestamps.source_time(row.metadata) or row.created_at


def stored_messages(rows: Iterable[MessageRow]) -> list[replay.StoredMessage]:
    """The projection's input for these rows."""
    return [
        replay.StoredMessage(cast(replay.Role, row.role), tuple(map(block_value, row.blocks)))
        for row in rows
    ]


class ModelNaming(Protocol):
    """What `conversation_model` reads of a conversation."""

    @property
    def model(self) -> str: ...
    @property
    def metadata(self) -> Any: ...


def conversation_model(conversation: ModelNaming) -> str:
    """The model the conversation's latest message names, else the one its own metadata
    names (an imported request body's `model`), else ""."""
    return conversation.model or list_status.model_of(conversation.metadata)


# What the finder and the search found.


class SearchHit(NamedTuple):
    """The first block of a conversation that a search found, and its text around it; or,
    when only a note held the words, the note's place and its text around them (`note`)."""

    message_seq: int
    block_seq: int
    snippet: str
    note: bool = False


class Pairs(NamedTuple):
    """Where the other half of a tool round is, for the calls and results of a window whose
    other half it does not hold: call id → message seq."""

    results: dict[str, int]  # a call's id → the message holding its result
    calls: dict[str, int]  # a result's id → the message holding its call


# Token counts (docs/contract.md §7).


@dataclass(frozen=True, slots=True)
class Counted:
    """One stored message's count for one set of toggles, with what its metadata measured."""

    seq: int
    role: str
    count: tokens.MessageCount
    usage: tokens.Usage | None
    model: str
    blocks: int = -1  # how many of the message's blocks were counted (-1: not said)
    turn: str | None = None  # the provider's response id: messages split from one response
    summary: bool = False  # the summary a compaction left for the model to continue from

    def figure(self, *, measured: bool = True) -> nr.MessageFigure:
        usage = self.usage if measured else None
        role = cast(replay.Role, self.role)
        return nr.MessageFigure(self.seq, role, self.count.tokens, usage, self.turn, self.summary)


@dataclass(frozen=True, slots=True)
class Headline:
    """What docs/contract.md §7 leads with, for the request after message `upto`: its
    size, what the provider counts that the record lacks, the heaviest blocks, and each
    stored compaction boundary with the figures around it."""

    upto: int | None
    boundary: int | None  # the last compaction boundary at or before `upto`
    next: nr.NextRequest
    unrecorded: nr.Unrecorded
    largest: tuple[nr.HeavyBlock, ...]
    compactions: tuple[nr.Compaction, ...]


@dataclass(frozen=True, slots=True)
class MeasuredInput:
    """The latest turn at or before `upto` whose provider measured its input, beside the
    estimate of that input (everything before the message, plus the request overhead)."""

    seq: int
    input: int
    estimate: int


@dataclass(frozen=True, slots=True)
class Pressure:
    """How much of the window the next turn takes: the request's total by kind against the
    window, with the message at which the compaction trigger is reached. Read from the
    stored figures, it holds no per-message counts (`messages` is empty; a page asks for
    its window's); a compaction preview's record is counted whole (`messages`)."""

    options: ReplayOptions
    payload: tokens.PayloadCount
    window: context_windows.Window
    trigger: int
    trigger_seq: int | None
    headline: Headline
    message_total: int  # messages counted: those up to `upto`
    measured: MeasuredInput | None
    dropped: dict[int, int]  # boundary seq → overhead + every message before it
    messages: tuple[Counted, ...] = ()
    cumulative: tuple[int, ...] = ()  # with `messages`: overhead + each up to and including it
    # A compaction preview's `after`: the messages counted start at `first` (a boundary
    # leaves out those before it), and the ones the policy changed count their stored
    # figures moved by `moved` (by seq: tokens, and tokens by kind).
    first: int = 0
    moved: Mapping[int, tuple[int, Mapping[str, int]]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.payload.total


def counted_of(p: Pressure, seq: int) -> Counted | None:
    """Message `seq`'s count in a pressure that holds its messages (a preview's)."""
    # Seqs are dense from 0, so a message's position is its seq (checked, not assumed).
    if seq < len(p.messages) and p.messages[seq].seq == seq:
        return p.messages[seq]
    return next((c for c in p.messages if c.seq == seq), None)


@dataclass(frozen=True, slots=True)
class Preview:
    """A compaction preview: the pressure before and after, and the compacted record."""

    before: Pressure
    after: Pressure
    compacted: Compacted  # its `changed`, `dropped` and `note` (of the whole record)
    policy: Policy
    # Message `seq` as a window read it (its blocks from block `offset`) after the policy:
    # what a page shows of the compacted record, a window at a time.
    rewrite: Callable[[int, replay.StoredMessage, int], replay.StoredMessage] | None = None
