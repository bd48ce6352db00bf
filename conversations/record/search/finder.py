"""Reads for the conversation page's finder (docs/guide/dashboard.md): search hits, the
next block of a kind or the next problem, and where a tool round's other half is.

Every read is bounded whatever the conversation holds: a step reads at most
`SCAN_MESSAGES` messages' blocks (through the message (conversation, seq) and block
(message, seq) indexes; only type, error flag and call id, no text) and answers where to
go on; call ids are looked up through the block `call_id` index, `ID_CHUNK` at a time;
search goes through the full-text index (`record.search.index`), a page of hits at a time,
counted up to `COUNT_CAP`. Everything is read inside `conversation.message_count`,
so a share link's scoped conversation (`dashboard.share_pages.scoped_conversation`) never
reveals a message past its last.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, assert_never

from django.db.models import Exists, Max, Min, OuterRef, Q, QuerySet
from django.db.models.functions import Substr

from conversations.core.blocks import ToolSide, kind_named, tool_side
from conversations.core.counting import compact
from conversations.core.finder import Cursor, FindKind
from conversations.core.search import SNIPPET_SCAN_CHARS, parse_query, snippet
from conversations.record.fulltext import Matches
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.search import FinderMark, SearchEntry
from conversations.record.notes import reads as note_reads
from conversations.record.reads.rows import Pairs, PreviewRow
from conversations.record.search.index import along_entries, through_index
from conversations.record.search.reads import searchable_text

SCAN_MESSAGES = 1000  # messages one step of the finder reads
SCAN_BLOCKS = 2000  # candidate blocks one step considers at most
ID_CHUNK = 1000  # call ids per lookup query
HITS_PAGE = 25  # search hits per answer
COUNT_CAP = 10_000  # hits counted at most (beyond: "10,000+")


def _chunks(items: Sequence[str], size: int = ID_CHUNK) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _blocks(conversation: Conversation) -> QuerySet[Block]:
    """The conversation's blocks, inside its (perhaps scoped) message count."""
    return Block.objects.filter(
        message__conversation=conversation, message__seq__lt=conversation.message_count
    )


def _with_ids(conversation: Conversation, block_type: str, ids: Sequence[str]) -> QuerySet[Block]:
    """The conversation's blocks of `block_type` with one of these call ids, found through
    the block `call_id` index: the conversation is checked per block found (a correlated
    EXISTS on the message's primary key), so no planner walks the conversation instead."""
    in_scope = Message.objects.filter(
        pk=OuterRef("message_id"),
        conversation=conversation,
        seq__lt=conversation.message_count,
    )
    return Block.objects.filter(Exists(in_scope), call_id__in=ids, type=block_type)


def _kind_condition(kind: FindKind) -> Q:
    """The blocks that may be what `kind` looks for (for "problem": every tool call, of
    which only those without a result count)."""
    match kind:
        case "problem":
            return Q(type="tool_use") | Q(type="tool_result", is_error=True)
        case "error":
            return Q(type="tool_result", is_error=True)
        case "tool":
            return Q(type__in=["tool_use", "tool_result"])
        case "reasoning":
            return Q(type="reasoning")
        case "image":
            return Q(type="image")
        case _:
            assert_never(kind)


class Found(NamedTuple):
    """A block the finder found: where it is, its type, and what it is ("error",
    "unanswered" for a tool call without a result, else its type)."""

    seq: int
    block: int
    type: str  # the block's stored type
    what: str
    call_id: str


class Step(NamedTuple):
    """One bounded step: the block found, or None and where to go on from (`resume`,
    None when this direction holds nothing more)."""

    found: Found | None
    resume: Cursor | None


def answered(conversation: Conversation, call_ids: Iterable[str]) -> set[str]:
    """The call ids among these that have a tool_result anywhere in the conversation."""
    ids = sorted(set(call_ids))
    out: set[str] = set()
    for chunk in _chunks(ids):
        out.update(
            _with_ids(conversation, "tool_result", chunk)
            .order_by()
            .values_list("call_id", flat=True)
            .distinct()
        )
    return out


def find_step(
    conversation: Conversation,
    kind: FindKind,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
) -> Step:
    """The first block of `kind` after `after` (or from the start), or the last one before
    `before`, within one step of `SCAN_MESSAGES` messages. Problems (n / N) include the
    stored compaction boundaries, found at the first block of the message they precede.

    Errors and problems are one lookup of the finder's marks (`FinderMark`, docs/contract.md §3)
    from anywhere, never a step; but for problems under a share link's scope, where a
    call answered past the scope is unanswered, and which the steps answer."""
    if kind == "error" or (kind == "problem" and _whole(conversation)):
        step = Step(_mark(conversation, kind, after=after, before=before), None)
    else:
        step = _block_step(conversation, kind, after=after, before=before)
    if kind != "problem":
        return step
    # Open bounds (seq, block) of what this step looked at; a boundary on the found block's
    # own place yields to the block.
    far, near = (conversation.message_count, -1), (-1, LAST_BLOCK)
    found, resume = step.found, step.resume
    if before is None:
        low = near if after is None else _place(after, LAST_BLOCK)
        high = (found.seq, found.block) if found else far
        if not found and resume is not None:
            high = _place(resume, LAST_BLOCK, inclusive=True)
        marks = [(seq, 0) for seq in compact.boundary_seqs(conversation.metadata)]
        inside = sorted(m for m in marks if low < m < high)
    else:
        high = _place(before, -1)
        low = (found.seq, found.block) if found else near
        if not found and resume is not None:
            low = _place(resume, -1, inclusive=True, downward=True)
        marks = [(seq, 0) for seq in compact.boundary_seqs(conversation.metadata)]
        inside = sorted((m for m in marks if low < m < high), reverse=True)
    if inside:
        return Step(Found(inside[0][0], 0, "compaction", "compaction", ""), None)
    return step


LAST_BLOCK = 1 << 62  # past any block's seq


def _whole(conversation: Conversation) -> bool:
    """Whether `conversation` is the whole stored conversation (not scoped to a prefix)."""
    return Conversation.objects.filter(
        pk=conversation.pk, message_count=conversation.message_count
    ).exists()


def _mark(
    conversation: Conversation,
    kind: FindKind,
    *,
    after: Cursor | None,
    before: Cursor | None,
) -> Found | None:
    """The first mark after `after` (or the last before `before`): one query through the
    marks' (conversation, message seq, block seq) index."""
    marks = FinderMark.objects.filter(
        conversation=conversation, message_seq__lt=conversation.message_count
    )
    if kind == "error":
        marks = marks.filter(kind=FinderMark.Kind.ERROR)
    if before is not None:
        marks = marks.filter(_before(before)).order_by("-message_seq", "-block_seq")
    else:
        marks = marks.filter(_after(after)) if after is not None else marks
        marks = marks.order_by("message_seq", "block_seq")
    found = marks.values_list("message_seq", "block_seq", "kind", "call_id").first()
    if found is None:
        return None
    seq, block, what, call_id = found
    error = what == FinderMark.Kind.ERROR
    return Found(seq, block, "tool_result" if error else "tool_use", what, call_id)


def _place(
    cursor: Cursor, whole: int, *, inclusive: bool = False, downward: bool = False
) -> tuple[int, int]:
    """A cursor as an open bound: a message cursor stands for the message `whole`-ly; an
    `inclusive` one (where a step goes on from) reaches one place further."""
    if cursor.block is None:
        if inclusive:
            return (cursor.seq - 1, LAST_BLOCK) if downward else (cursor.seq + 1, -1)
        return (cursor.seq, whole)
    if inclusive:
        return (cursor.seq, cursor.block - 1) if downward else (cursor.seq, cursor.block + 1)
    return (cursor.seq, cursor.block)


def _block_step(
    conversation: Conversation,
    kind: FindKind,
    *,
    after: Cursor | None,
    before: Cursor | None,
) -> Step:
    end = conversation.message_count
    rows = _blocks(conversation).filter(_kind_condition(kind))
    forward = before is None
    if forward:
        start = 0 if after is None else after.seq + (1 if after.block is None else 0)
        stop = min(start + SCAN_MESSAGES, end)
        if start >= stop:
            return Step(None, None)
        rows = rows.filter(message__seq__gte=start, message__seq__lt=stop)
        if after is not None and after.block is not None:
            rows = rows.exclude(message__seq=after.seq, seq__lte=after.block)
        rows = rows.order_by("message__seq", "seq")
        more = Cursor(stop - 1) if stop < end else None
    else:
        assert before is not None
        last = min(before.seq - (1 if before.block is None else 0), end - 1)
        first = max(0, last - SCAN_MESSAGES + 1)
        if last < 0:
            return Step(None, None)
        rows = rows.filter(message__seq__gte=first, message__seq__lte=last)
        if before.block is not None:
            rows = rows.exclude(message__seq=before.seq, seq__gte=before.block)
        rows = rows.order_by("-message__seq", "-seq")
        more = Cursor(first) if first > 0 else None
    candidates = list(
        rows.values_list("message__seq", "seq", "type", "is_error", "call_id")[:SCAN_BLOCKS]
    )
    calls = [call_id for _, _, kind_, _, call_id in candidates if _side(kind_) == "call"]
    have_results = answered(conversation, calls) if kind == "problem" else set()
    for seq, block, block_type, is_error, call_id in candidates:
        what = block_type
        if kind == "problem":
            if _side(block_type) == "call" and call_id in have_results:
                continue
            what = "error" if is_error else "unanswered"
        elif is_error:
            what = "error"
        return Step(Found(seq, block, block_type, what, call_id), None)
    if len(candidates) == SCAN_BLOCKS:  # the step ended inside the range: go on from there
        seq, block = candidates[-1][0], candidates[-1][1]
        return Step(None, Cursor(seq, block))
    return Step(None, more)


def tool_pairs(conversation: Conversation, rows: Sequence[PreviewRow]) -> Pairs:
    """For a window's rows: the results (first after the window, else the first anywhere)
    of its calls that have none in it, and the calls (last before the window, else the
    first anywhere) of its results that have none in it. One grouped query per
    `ID_CHUNK` ids, none when every round is whole in the window."""
    if not rows:
        return Pairs({}, {})
    first, last = rows[0].seq, rows[-1].seq
    call_ids = {b.call_id for r in rows for b in r.blocks if _side(b.type) == "call"}
    result_ids = {b.call_id for r in rows for b in r.blocks if _side(b.type) == "result"}
    results = _other_halves(
        conversation,
        "tool_result",
        call_ids - result_ids,
        Min("message__seq", filter=Q(message__seq__gt=last)),
    )
    calls = _other_halves(
        conversation,
        "tool_use",
        result_ids - call_ids,
        Max("message__seq", filter=Q(message__seq__lt=first)),
    )
    return Pairs(results, calls)


def _other_halves(
    conversation: Conversation, kind: str, ids: set[str], nearest: Min | Max
) -> dict[str, int]:
    """Call id → the seq of the message holding its other half (`kind`): the `nearest`
    one to the window, else the first anywhere. One grouped query per `ID_CHUNK` ids."""
    found: dict[str, int] = {}
    for chunk in _chunks(sorted(ids)):
        grouped = (
            _with_ids(conversation, kind, chunk)
            .order_by()
            .values("call_id")
            .annotate(near=nearest, anywhere=Min("message__seq"))
            .values_list("call_id", "near", "anywhere")
        )
        for call_id, near, anywhere in grouped:
            found[call_id] = near if near is not None else anywhere
    return found


class Hit(NamedTuple):
    seq: int
    block: int
    type: str  # the block's stored type
    is_error: bool
    snippet: str


class HitPage(NamedTuple):
    """A page of search hits in (message, block) order; `offset` hits come before the
    first (None when more than COUNT_CAP do); `total` is capped at COUNT_CAP (`capped`)."""

    hits: list[Hit]
    offset: int | None
    total: int
    capped: bool
    more: bool  # further hits in the direction asked


def _after(cursor: Cursor) -> Q:
    if cursor.block is None:
        return Q(message_seq__gt=cursor.seq)
    return Q(message_seq__gt=cursor.seq) | Q(message_seq=cursor.seq, block_seq__gt=cursor.block)


def _before(cursor: Cursor) -> Q:
    if cursor.block is None:
        return Q(message_seq__lt=cursor.seq)
    return Q(message_seq__lt=cursor.seq) | Q(message_seq=cursor.seq, block_seq__lt=cursor.block)


def _capped_count(entries: QuerySet[SearchEntry]) -> int:
    with through_index():
        return entries.order_by()[: COUNT_CAP + 1].count()


def search_page(
    conversation: Conversation,
    q: str,
    *,
    after: Cursor | None = None,
    before: Cursor | None = None,
    notes: bool = True,
) -> HitPage:
    """The blocks holding every word of `q` (as the list's search finds them), a page
    after `after` (or from the start) or the page just before `before`, with snippets;
    with `notes`, the notes holding them too (docs/contract.md §10).
    Raises QueryError for a `q` the list refuses.

    Bounded whether the words are rare or common here (docs/contract.md §3): the index (conversation
    and words) gives up to HITS_HELD places, which are all of them when fewer, and the
    page, total and offset are taken from them; else the words are common here, the page
    is a walk along the conversation's entries in order from the cursor (each checked,
    a match every few entries), and the counts, from the index, stop at COUNT_CAP."""
    query = parse_query(q)
    if query.empty:
        return HitPage([], None, 0, False, False)
    entries = SearchEntry.objects.filter(
        conversation=conversation,
        message_seq__isnull=False,
        message_seq__lt=conversation.message_count,
    )
    indexed = entries.filter(Matches(query))
    most = min(HITS_HELD, COUNT_CAP)
    with through_index():
        held = sorted(
            (int(seq or 0), int(block or 0))
            for seq, block in indexed.order_by().values_list("message_seq", "block_seq")[: most + 1]
        )
    # Notes found are hits at their block (their message's first) (docs/contract.md §10):
    # when any note holds the words, the page merges them on the walk's path.
    noted = note_reads.NotePlaces(conversation, query, shown=notes)
    notes_found = noted.count()
    if len(held) <= most and not notes_found:
        return _page_of(conversation, q, held, after=after, before=before)
    walk = entries.filter(Matches(query, indexed=False))
    if before is not None:
        wanted = walk.filter(_before(before)).order_by("-message_seq", "-block_seq")
    else:
        wanted = walk.filter(_after(after)) if after is not None else walk
        wanted = wanted.order_by("message_seq", "block_seq")
    with along_entries():
        places = [
            (int(seq or 0), int(block or 0))
            for seq, block in wanted.values_list("message_seq", "block_seq")[: HITS_PAGE + 1]
        ]
    blocks_found = set(places)
    places = noted.merged(places, after=after, before=before, limit=HITS_PAGE + 1)
    more = len(places) > HITS_PAGE
    places = places[:HITS_PAGE]
    if before is not None:
        places.reverse()
    # The blocks' hits: all held when `most` or fewer; else, when `most` is COUNT_CAP, the
    # total is already known capped.
    if len(held) <= most:
        total = len(held)
    else:
        total = COUNT_CAP + 1 if most == COUNT_CAP else _capped_count(indexed)
    total += notes_found
    offset: int | None = None
    if places and after is None and before is None:
        offset = 0  # from the start: nothing is ahead, and nothing need count it
    elif places:
        ahead = _capped_count(indexed.filter(_before(Cursor(*places[0]))))
        ahead += noted.count(before=Cursor(*places[0]))
        offset = ahead if ahead <= COUNT_CAP else None
    return HitPage(
        noted.hits(_hits(conversation, [p for p in places if p in blocks_found], q), places),
        offset,
        min(total, COUNT_CAP),
        total > COUNT_CAP,
        more,
    )


# Places of a search read from the index before walking instead: as many as are counted,
# so that a word with fewer hits is paged and counted from one read of the index.
HITS_HELD = COUNT_CAP


def _page_of(
    conversation: Conversation,
    q: str,
    held: list[tuple[int, int]],
    *,
    after: Cursor | None,
    before: Cursor | None,
) -> HitPage:
    """A page of hits from all the places there are, in order (fewer than COUNT_CAP)."""
    if before is not None:
        edge = bisect_left(held, _point(before, low=True))
        places, more = held[max(0, edge - HITS_PAGE) : edge], edge > HITS_PAGE
        start = max(0, edge - HITS_PAGE)
    else:
        start = 0 if after is None else bisect_right(held, _point(after, low=False))
        places, more = held[start : start + HITS_PAGE], start + HITS_PAGE < len(held)
    offset = start if places else None
    return HitPage(_hits(conversation, places, q), offset, len(held), False, more)


def _point(cursor: Cursor, *, low: bool) -> tuple[int, int]:
    """A cursor as a place to bisect at: a message cursor stands for all of its message."""
    if cursor.block is not None:
        return (cursor.seq, cursor.block)
    return (cursor.seq, -1) if low else (cursor.seq, LAST_BLOCK)


def _hits(conversation: Conversation, places: list[tuple[int, int]], q: str) -> list[Hit]:
    """The blocks at these places with a snippet of each, read to the start a snippet
    looks at (one query)."""
    if not places:
        return []
    query = parse_query(q)
    where = Q()
    for seq, block in places:
        where |= Q(message__seq=seq, seq=block)
    head = SNIPPET_SCAN_CHARS + 1  # one more: a longer text gets its closing "…"
    rows = (
        _blocks(conversation)
        .filter(where)
        .annotate(head=Substr("text", 1, head), input_head=Substr("input_json", 1, head))
        .values_list("message__seq", "seq", "type", "is_error", "head", "name", "input_head")
    )
    found = {}
    for seq, block, block_type, is_error, text, name, input_head in rows:
        found[(seq, block)] = Hit(
            seq,
            block,
            block_type,
            is_error,
            snippet(searchable_text(block_type, text, name, input_head), query),
        )
    return [found[place] for place in places if place in found]


def _side(stored_type: str) -> ToolSide | None:
    """Which half of a tool round a stored block is (its type, through the registry)."""
    return tool_side(kind_named(stored_type))
