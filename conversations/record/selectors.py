"""Reads that shape the record for its consumers, in a fixed number of queries.

`stored_messages` is the only bridge from the database to the pure projection;
`shapes.record_data` is the API's view of the same rows.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple

import orjson
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Count,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    TextField,
    Value,
)
from django.db.models.functions import Substr

from conversations.core import live_sources, markdown, replay
from conversations.core.search import INDEXED_CHARS, Query, block_text, parse_query, snippet
from conversations.record import note_reads
from conversations.record.models import (
    Block,
    Conversation,
    Message,
    RejectedSpan,
    SearchEntry,
    ShareLink,
    TailCursor,
)

# The row types and pure functions over them, as they were always read from here.
from conversations.record.rows import PREVIEW_CHARS as PREVIEW_CHARS
from conversations.record.rows import BlockRow as BlockRow
from conversations.record.rows import MessageRow as MessageRow
from conversations.record.rows import PreviewBlock as PreviewBlock
from conversations.record.rows import PreviewRow as PreviewRow
from conversations.record.rows import SearchHit as SearchHit
from conversations.record.rows import block_value as block_value
from conversations.record.rows import conversation_model as conversation_model
from conversations.record.rows import stored_messages as stored_messages
from conversations.record.search import Matches, along_entries, as_text, through_index

BLOCK_COLUMNS = (
    "message_id", "seq", "type", "text", "call_id", "name", "input_json", "is_error",
    "media_type", "data", "origin", "width", "height",
)  # fmt: skip


def conversation_get(conversation_id: str | uuid.UUID) -> Conversation | None:
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return Conversation.objects.filter(pk=pk).first()


def conversation_list(
    *, q: str = "", has_errors: bool = False, unanswered: bool = False, label: str = ""
) -> QuerySet[Conversation]:
    """Conversations, newest activity first; with a `q`, those whose title or one of whose
    blocks holds all its words (`core.search.parse_query`, which may raise QueryError),
    found through the full-text index. `has_errors`: only those holding an error result;
    `unanswered`: only those whose last message leaves a tool call unanswered (each read
    from the conversation's row, through a partial index in this order). Notes count too
    (docs/contract.md §10): `q` finds their text, `label` keeps conversations with a note
    so labelled.

    A rare word costs no more than a common one (issue 18). Common words (`_common`: most
    of the newest conversations hold them near their start) are found by walking:
    conversations newest first, each checked along its own entries for a first one
    holding the words, until the page is full. Other words are asked of the index, for at
    most SEARCH_ENTRIES entries; when those are all there are, the answer is their
    conversations, by id; else they are walked too. Count it with `CappedPaginator`,
    which stops at SEARCH_COUNT_CAP."""
    conversations = Conversation.objects.order_by("-updated_at", "-created_at", "id")
    if label:
        conversations = conversations.filter(pk__in=note_reads.conversations_labelled(label))
    if has_errors:
        conversations = conversations.filter(error_count__gt=0)
    if unanswered:
        conversations = conversations.filter(unanswered_calls__gt=0)
    query = parse_query(q)
    if not q.strip():
        return conversations
    if query.empty:
        return conversations.none()  # only punctuation: no word to find
    noted = Q(pk__in=note_reads.conversations_with_note_words(q))  # its notes' own index
    if not _common(conversations, query):
        with through_index():
            found, total = _conversations_of(SearchEntry.objects.filter(Matches(query)))
        if _within(total, SEARCH_ENTRIES):
            return conversations.filter(Q(pk__in=sorted(found)) | noted)
    # A first entry per conversation, asked per row (a subplan, never a join over every
    # entry), along the conversation's (message, block) index.
    one = (
        SearchEntry.objects.filter(Matches(query, indexed=False), conversation_id=OuterRef("pk"))
        .order_by("message_seq", "block_seq")
        .values("id")[:1]
    )
    # Annotated, not only filtered: `search_hits` reads the first match it found.
    return conversations.annotate(first_entry=Subquery(one)).filter(
        Q(first_entry__isnull=False) | noted
    )


SEARCH_ENTRIES = 50_000  # entries a search reads from the index before walking instead
# A word is common when most of the newest conversations hold it near their start: then
# walking finds a page at once, and the index (whose bitmap of a common prefix alone costs
# ~100 ms at a million messages) is not asked at all.
PROBE_CONVERSATIONS = 50
PROBE_ENTRIES = 200
PROBE_COMMON = 40  # of PROBE_CONVERSATIONS


def _common(conversations: QuerySet[Conversation], query: Query) -> bool:
    """Whether at least PROBE_COMMON of the PROBE_CONVERSATIONS newest `conversations`
    hold `query` in their first PROBE_ENTRIES entries: one bounded query (PostgreSQL;
    SQLite's FTS5 reads any word's entries cheaply, and is always asked)."""
    if connection.vendor != "postgresql":
        return False
    ids = list(conversations.values_list("pk", flat=True)[:PROBE_CONVERSATIONS])
    if len(ids) < PROBE_CONVERSATIONS:
        return False
    condition, params = as_text(query, "w.words")
    sql = f"""SELECT COUNT(*) FROM unnest(%s::uuid[]) AS c(id) WHERE EXISTS (
        SELECT 1 FROM (SELECT words FROM {SearchEntry._meta.db_table} e
            WHERE e.conversation_id = c.id ORDER BY e.message_seq, e.block_seq
            LIMIT {PROBE_ENTRIES}) w
        WHERE {condition})"""
    with along_entries(), connection.cursor() as cursor:
        cursor.execute(sql, [ids, *params])
        (holding,) = cursor.fetchone()
    return int(holding) >= PROBE_COMMON


def _within(total: int, limit: int) -> bool:
    """Whether `total` entries read with `_limited(limit)` were all there are. SQLite's
    FTS5 answers any word's entries as a list of ids, cheaply: it reads them all."""
    return connection.vendor == "sqlite" or total <= limit


def _limited(entries: QuerySet[SearchEntry, Any], limit: int) -> QuerySet[SearchEntry, Any]:
    return entries if connection.vendor == "sqlite" else entries[: limit + 1]


def _conversations_of(entries: QuerySet[SearchEntry]) -> tuple[set[uuid.UUID], int]:
    """The conversations of the first SEARCH_ENTRIES + 1 of these entries (as the index
    gives them), and how many entries that was: grouped in the database."""
    inner, params = _limited(
        entries.order_by().values_list("conversation_id"), SEARCH_ENTRIES
    ).query.sql_with_params()
    sql = f"SELECT conversation_id, COUNT(*) FROM ({inner}) s GROUP BY conversation_id"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {_uuid(pk) for pk, _ in rows}, sum(int(n) for _, n in rows)


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def _first_places(
    entries: QuerySet[SearchEntry], limit: int
) -> tuple[dict[uuid.UUID, tuple[int, int]], int]:
    """Of the first `limit` + 1 of these entries (in no order: as the index gives them),
    each conversation's first (message seq, block seq), and how many entries that was
    (more than `limit`: there are more). Grouped in the database: one row a conversation."""
    inner, params = _limited(
        entries.order_by().values_list("conversation_id", "message_seq", "block_seq"), limit
    ).query.sql_with_params()
    sql = f"""SELECT conversation_id, message_seq, block_seq, total FROM (
        SELECT s.*, ROW_NUMBER() OVER (
            PARTITION BY conversation_id ORDER BY message_seq, block_seq) AS place,
            COUNT(*) OVER () AS total
        FROM ({inner}) s) t WHERE place = 1"""
    first: dict[uuid.UUID, tuple[int, int]] = {}
    total = 0
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for conversation_id, message_seq, block_seq, count in cursor.fetchall():
            total = count
            first[_uuid(conversation_id)] = (int(message_seq or 0), int(block_seq or 0))
    return first, int(total)


SEARCH_COUNT_CAP = 1000  # conversations a search counts at most ("1,000+")
HIT_ENTRIES = 5000  # entries of a page's conversations read for their first matches


class CappedPaginator(Paginator):  # type: ignore[type-arg]
    """A paginator whose count stops at `cap` (SEARCH_COUNT_CAP; `capped` when there are
    more), so that counting a common word's conversations never reads them all; the
    pages end there ("1,000+": narrow the search to go further)."""

    def __init__(self, object_list: Any, per_page: int, *, cap: int | None = None) -> None:
        super().__init__(object_list, per_page)
        self.cap = SEARCH_COUNT_CAP if cap is None else cap

    @cached_property
    def _counted(self) -> int:
        found = self.object_list
        if isinstance(found, QuerySet):
            with along_entries():  # a common word's walk (conversation_list)
                return int(found.order_by()[: self.cap + 1].count())
        return len(found)

    def page(self, number: Any) -> Any:
        """The page, read at once (inside `along_entries`, as its count was)."""
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        with along_entries():
            rows = list(self.object_list[bottom : bottom + self.per_page])
        return Page(rows, number, self)

    @cached_property
    def count(self) -> int:
        return min(self._counted, self.cap)

    @property
    def capped(self) -> bool:
        return self._counted > self.cap


def search_entries(q: str) -> QuerySet[SearchEntry]:
    """The search entries holding every word of `q` (a query with words in it)."""
    return SearchEntry.objects.filter(Matches(parse_query(q)))


class MessageSearch(NamedTuple):
    """A condition on Message for a search, and whether more blocks matched than it holds."""

    condition: Q
    capped: bool


MESSAGE_SEARCH_BLOCKS = 1000  # matching blocks a message search reads at most
# Conversations whose title matches, whose messages a search lists (a common word would
# otherwise list every message of every conversation that has it).
MESSAGE_SEARCH_TITLES = 20
_PAIRS_PER_QUERY = 100  # conversations per lookup of their messages by seq


def messages_matching(q: str, *, limit: int = MESSAGE_SEARCH_BLOCKS) -> MessageSearch:
    """The messages `q` finds: every message of the conversation `q` names by id; else the
    messages one of whose blocks holds every word of it (the first `limit` such blocks the
    index gives), and every message of the conversations whose title does.

    Bounded and index-backed: the full-text index answers the words, then messages are
    looked up by (conversation, seq) for at most `limit` blocks, in a few queries; the
    condition holds ids, never a scan. QueryError as `parse_query`.
    """
    try:
        return MessageSearch(Q(conversation_id=uuid.UUID(q.strip())), False)
    except ValueError:
        pass
    if parse_query(q).empty:
        return MessageSearch(Q(pk__in=[]), False)
    query = parse_query(q)
    with through_index():
        return _messages_matching(search_entries(q), query, limit)


def _messages_matching(entries: QuerySet[SearchEntry], query: Query, limit: int) -> MessageSearch:
    # Titles are one entry a conversation: checked one by one along their own index.
    with along_entries():
        titles = list(
            SearchEntry.objects.filter(Matches(query, indexed=False), message_seq__isnull=True)
            .order_by()
            .values_list("conversation_id", flat=True)[: MESSAGE_SEARCH_TITLES + 1]
        )
    places = list(
        entries.filter(message_seq__isnull=False)
        .order_by()
        .values_list("conversation_id", "message_seq")[: limit + 1]
    )
    capped = len(places) > limit or len(titles) > MESSAGE_SEARCH_TITLES
    titles = titles[:MESSAGE_SEARCH_TITLES]
    seqs: dict[uuid.UUID, set[int]] = {}
    for conversation_id, message_seq in places[:limit]:
        if message_seq is not None:  # always, by the filter: a block's entry
            seqs.setdefault(conversation_id, set()).add(message_seq)
    ids: list[int] = []
    conversations = sorted(seqs)
    for start in range(0, len(conversations), _PAIRS_PER_QUERY):
        where = Q()
        for conversation_id in conversations[start : start + _PAIRS_PER_QUERY]:
            where |= Q(conversation_id=conversation_id, seq__in=sorted(seqs[conversation_id]))
        ids += Message.objects.filter(where).values_list("pk", flat=True)
    return MessageSearch(Q(pk__in=ids) | Q(conversation_id__in=titles), capped)


def search_hits(conversations: Iterable[Conversation], q: str) -> dict[uuid.UUID, SearchHit]:
    """For each of these conversations (a page of `conversation_list(q=q)`) whose blocks
    matched, its first matching block, each read to its indexed start.

    Bounded for rare and common words alike: the index gives the page's entries holding
    the words (at most HIT_ENTRIES, one query); when those are all, each conversation's
    first is among them. Otherwise (common words) each conversation's entries are walked
    in order, no further than the first of them known: a match every few entries."""
    query = parse_query(q)
    conversations = list(conversations)
    ids = [c.pk for c in conversations]
    if query.empty or not ids:
        return {}
    walked: list[int] = [getattr(c, "first_entry", None) or 0 for c in conversations]
    if all(walked):  # found by walking (a common word): each one's first match is known
        # (Blocks sort before the title's entry, whose seqs are null: a title is the first
        # match only when no block matched.)
        first = {
            conversation_id: (int(seq), int(block or 0))
            for conversation_id, seq, block in SearchEntry.objects.filter(
                pk__in=walked, message_seq__isnull=False
            ).values_list("conversation_id", "message_seq", "block_seq")
            if seq is not None
        }
    else:
        entries = SearchEntry.objects.filter(conversation_id__in=ids, message_seq__isnull=False)
        with through_index():
            first, total = _first_places(entries.filter(Matches(query)), HIT_ENTRIES)
        if not _within(total, HIT_ENTRIES):
            with along_entries():
                _walk_first_places(query, ids, first)
    if not first:
        return {}
    where = Q()
    for conversation_id, (message_seq, block_seq) in first.items():
        where |= Q(
            message__conversation_id=conversation_id, message__seq=message_seq, seq=block_seq
        )
    blocks = (
        Block.objects.filter(where)
        .annotate(
            head=Substr("text", 1, INDEXED_CHARS), input_head=Substr("input_json", 1, INDEXED_CHARS)
        )
        .values_list(
            "message__conversation_id", "message__seq", "seq", "type", "head", "name", "input_head"
        )
    )
    hits = {}
    for conversation_id, message_seq, seq, kind, head, name, input_head in blocks:
        text = searchable_text(kind, head, name, input_head)
        hits[conversation_id] = SearchHit(message_seq, seq, snippet(text, query))
    return hits


def _walk_first_places(
    query: Query, ids: list[uuid.UUID], first: dict[uuid.UUID, tuple[int, int]]
) -> None:
    """Each conversation's first matching place, walking its entries in order no further
    than the first already known (for words common in them: met within a few)."""
    for conversation_id in ids:
        walk = SearchEntry.objects.filter(
            Matches(query, indexed=False),
            conversation_id=conversation_id,
            message_seq__isnull=False,
        )
        if conversation_id in first:
            walk = walk.filter(message_seq__lte=first[conversation_id][0])
        walked = (
            walk.order_by("message_seq", "block_seq")
            .values_list("message_seq", "block_seq")
            .first()
        )
        if walked is not None:
            first[conversation_id] = (int(walked[0] or 0), int(walked[1] or 0))


def searchable_text(kind: str, head: str, name: str, input_head: str) -> str:
    """`core.search.block_text` of a block read as its kind, name and the indexed starts
    of its text and input (the other columns do not count)."""
    row = BlockRow(
        message_id=0, seq=0, type=kind, text=head, call_id="", name=name,
        input_json=input_head, is_error=False, media_type="", data="", origin=None,
    )  # fmt: skip
    return block_text(block_value(row))


def message_get(conversation: Conversation, seq: int) -> Message | None:
    return Message.objects.filter(conversation=conversation, seq=seq).first()


def message_rows(
    conversation: Conversation,
    *,
    start: int = 0,
    stop: int | None = None,
    image_data: bool = True,
) -> list[MessageRow]:
    """Messages with seq in [start, stop) (all by default) with their blocks: two queries,
    one snapshot.

    Whatever commits between the two queries is left out: a message past the last one read,
    and a block past its message's count as read (blocks are only ever appended, with the
    count in the same transaction), so each message carries exactly `block_count` blocks.
    `image_data=False` leaves images' base64 unread (empty), for readers that need only
    their size, such as token counts.
    """
    rows, counts, blocks = _rows_and_blocks(conversation, start, stop, image_data)
    for values in blocks:
        block = BlockRow._make(values)
        if block.seq < counts.get(block.message_id, 0):
            rows[block.message_id].blocks.append(block)
    return list(rows.values())


STREAMED_BYTES = 4 * 1024 * 1024  # block text a streamed read holds at once (about)
STREAMED_BLOCKS = 500  # … and blocks


def message_rows_streamed(
    conversation: Conversation,
    *,
    start: int = 0,
    stop: int | None = None,
    image_data: bool = False,
) -> Iterator[MessageRow]:
    """`message_rows(..., image_data=image_data)` one message at a time, in seq order: a
    reader done with each message (counting, serialising) holds about STREAMED_BYTES of
    texts, not the range's.

    The blocks' sizes are read first (PostgreSQL from the TOAST header), then the blocks in
    batches of at most STREAMED_BYTES (or one block, if larger) and STREAMED_BLOCKS.
    """
    rows, counts, blocks = _rows_and_blocks(conversation, start, stop, image_data)
    size = OctetLength("text") + OctetLength("input_json")
    if image_data:
        size += OctetLength("data")
    sizes = blocks.annotate(size=size).values_list("id", "message_id", "seq", "size")
    batches: list[list[int]] = []
    batch: list[int] = []
    held = 0
    for block_id, message_id, seq, size in sizes:
        if seq >= counts.get(message_id, 0):
            continue  # committed after its message was read: left out, as message_rows does
        if batch and (held + size > STREAMED_BYTES or len(batch) == STREAMED_BLOCKS):
            batches.append(batch)
            batch, held = [], 0
        batch.append(block_id)
        held += size
    if batch:
        batches.append(batch)
    # Each message is let go once yielded: the reader alone holds it from then on.
    pending = deque(rows.values())
    rows.clear()
    current = pending.popleft() if pending else None
    for ids in batches:
        # By id alone: kept in the range's join, the database walks every message of the
        # range and probes the id list for each, once per batch (quadratic in the range;
        # PostgreSQL took 0.6 s a batch at 1,000 messages).
        for values in _block_values(Block.objects.filter(id__in=ids), image_data=image_data):
            block = BlockRow._make(values)
            # Ids grow with seq in a conversation (appends hold its lock): earlier
            # messages are whole once a later one's block arrives.
            while current is not None and current.id != block.message_id:
                yield current
                current = pending.popleft() if pending else None
            if current is not None:
                current.blocks.append(block)
    while current is not None:
        yield current
        current = pending.popleft() if pending else None


def _rows_and_blocks(
    conversation: Conversation, start: int, stop: int | None, image_data: bool
) -> tuple[dict[int, MessageRow], dict[int, int], Any]:
    """The messages of [start, stop) (by id, in seq order, without blocks), their block
    counts, and the query of their blocks' BLOCK_COLUMNS in (message id, seq) order."""
    messages = Message.objects.filter(conversation=conversation, seq__gte=start)
    if stop is not None:
        messages = messages.filter(seq__lt=stop)
    rows: dict[int, MessageRow] = {}
    counts: dict[int, int] = {}
    for pk, seq, role, created_at, metadata, block_count in messages.order_by("seq").values_list(
        "id", "seq", "role", "created_at", "metadata", "block_count"
    ):
        rows[pk] = MessageRow(pk, seq, role, created_at, metadata, [])
        counts[pk] = block_count
    if not rows:
        return rows, counts, Block.objects.none().values_list(*BLOCK_COLUMNS)
    last = next(reversed(rows.values())).seq
    blocks = Block.objects.filter(
        message__conversation=conversation, message__seq__gte=start, message__seq__lte=last
    )
    return rows, counts, _block_values(blocks, image_data=image_data)


def _block_values(blocks: QuerySet[Block], *, image_data: bool) -> Any:
    """These blocks' BLOCK_COLUMNS in (message id, seq) order (images' data left unread,
    empty, unless `image_data`)."""
    columns: tuple[str, ...] = BLOCK_COLUMNS
    if not image_data:
        blocks = blocks.annotate(no_data=Value("", output_field=TextField()))
        columns = tuple("no_data" if c == "data" else c for c in BLOCK_COLUMNS)
    return blocks.order_by("message_id", "seq").values_list(*columns)


class OctetLength(Func):
    """A text's size in UTF-8 bytes. PostgreSQL reads it from the TOAST header without
    decompressing; SQLite counts the bytes without decoding characters."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra
        )


MESSAGE_BLOCKS = 100  # blocks of one message a page or frame shows


def preview_rows(
    conversation: Conversation, seqs: range | Iterable[int], *, blocks_from: int = 0
) -> list[PreviewRow]:
    """The messages at `seqs` (at most a window's worth) with previews of their blocks (the
    `MESSAGE_BLOCKS` from block `blocks_from`).

    Two queries: the messages, then the blocks of exactly those message ids, so a message
    appended meanwhile never shows up half. Block cost is bounded by
    `MESSAGE_BLOCKS` × `PREVIEW_CHARS` per message, whatever is stored.
    """
    messages = Message.objects.filter(conversation=conversation)
    if isinstance(seqs, range):
        messages = messages.filter(seq__gte=seqs.start, seq__lt=seqs.stop)
    else:
        messages = messages.filter(seq__in=list(seqs))
    rows: dict[int, PreviewRow] = {
        values[0]: PreviewRow(*values, [])
        for values in messages.order_by("seq").values_list(
            "id", "seq", "role", "created_at", "metadata", "block_count"
        )
    }
    blocks = (
        Block.objects.filter(
            message_id__in=list(rows), seq__gte=blocks_from, seq__lt=blocks_from + MESSAGE_BLOCKS
        )
        .annotate(
            text_start=Substr("text", 1, PREVIEW_CHARS),
            text_size=OctetLength("text"),
            input_start=Substr("input_json", 1, PREVIEW_CHARS),
            input_size=OctetLength("input_json"),
        )
        .order_by("message_id", "seq")
        .values_list(
            "message_id",
            "seq",
            "type",
            "text_start",
            "text_size",
            "call_id",
            "name",
            "input_start",
            "input_size",
            "is_error",
            "media_type",
        )  # fmt: skip
    )
    for values in blocks:
        block = PreviewBlock._make(values)
        rows[block.message_id].blocks.append(block)
    return list(rows.values())


def block_row(conversation: Conversation, seq: int, block: int) -> BlockRow | None:
    """One block whole (one query, whatever its message holds besides)."""
    values = (
        Block.objects.filter(message__conversation=conversation, message__seq=seq, seq=block)
        .values_list(*BLOCK_COLUMNS)
        .first()
    )
    return None if values is None else BlockRow._make(values)


def message_full(conversation: Conversation, seq: int) -> MessageRow | None:
    """One message with its blocks whole, for "load the rest" (on demand, one message)."""
    found = message_rows(conversation, start=seq, stop=seq + 1)
    return found[0] if found else None


def last_block_counts(conversation: Conversation | uuid.UUID, count: int) -> dict[int, int]:
    """Message seq → block count of the last `count` messages: one bounded query."""
    rows = Message.objects.filter(conversation=conversation).order_by("-seq")[:count]
    return dict(rows.values_list("seq", "block_count"))


def block_counts_between(conversation: Conversation, seqs: range) -> dict[int, int]:
    """Message seq → block count for the seqs in `seqs`: a bounded position read."""
    rows = Message.objects.filter(conversation=conversation, seq__gte=seqs.start, seq__lt=seqs.stop)
    return dict(rows.values_list("seq", "block_count"))


def replay_payload(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> replay.Payload:
    """The projection of the conversation (of its messages before `stop`, when given):
    what every consumer serves."""
    rows = message_rows(conversation, stop=stop)
    return replay.project(stored_messages(rows), vision=vision, shape=shape)


def replay_json(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> bytes:
    """The projection as bytes: the API's replay and the page's download serve exactly these."""
    return orjson.dumps(replay_payload(conversation, vision=vision, shape=shape, stop=stop))


def markdown_export(conversation: Conversation, *, vision: bool, shape: replay.Shape) -> str:
    """The conversation as Markdown: its record, then the projection `replay.project` gives
    for these options (the same payload the replay serves)."""
    rows = message_rows(conversation)
    stored = stored_messages(rows)
    notes = note_reads.all_notes(conversation.id)
    record = [
        markdown.RecordMessage(
            row.seq,
            row.created_at.isoformat(timespec="seconds"),
            message,
            tuple(notes.get(row.seq, ())),
        )
        for row, message in zip(rows, stored, strict=True)
    ]
    return markdown.conversation_markdown(
        title=conversation.title or str(conversation.id),
        record=record,
        payload=replay.project(stored, vision=vision, shape=shape),
        shape=shape,
        vision=vision,
    )


def block_total(conversation: Conversation) -> int:
    """The conversation's block count, as its row says (kept by the services): O(1)."""
    return conversation.block_count


def deletion_totals(conversation_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """Conversation id → (messages, blocks) it holds: what deleting it takes along."""
    rows = (
        Message.objects.filter(conversation_id__in=conversation_ids)
        .values("conversation_id")
        .annotate(message_total=Count("id"), block_total=Sum("block_count"))
        .order_by()
        .values_list("conversation_id", "message_total", "block_total")
    )
    return {pk: (messages, blocks or 0) for pk, messages, blocks in rows}


def block_counts(conversation: Conversation | uuid.UUID, *, start: int = 0) -> dict[int, int]:
    """Message seq → block count, from `start` on: a client's position, server side
    (for a conversation or its id; an unknown id has none)."""
    rows = Message.objects.filter(conversation=conversation, seq__gte=start).order_by("seq")
    return dict(rows.values_list("seq", "block_count"))


def image_block(conversation: Conversation, seq: int, block: int) -> tuple[str, str] | None:
    """(media type, base64 data) of an image block, or None if that block is no image."""
    return (
        Block.objects.filter(
            message__conversation=conversation, message__seq=seq, seq=block, type="image"
        )
        .values_list("media_type", "data")
        .first()
    )


def tail_cursor(path: str) -> TailCursor | None:
    """The cursor `manage.py tail` keeps for a file (by its resolved path)."""
    digest = hashlib.sha256(path.encode()).hexdigest()
    return TailCursor.objects.select_related("conversation").filter(path_digest=digest).first()


def source_uuids(conversation: Conversation) -> set[str]:
    """The uuids of every source line stored in a conversation (read once per followed
    file, when `tail` resumes it, so that lines read again are stored only once)."""
    ids: set[str] = set()
    for metadata in Message.objects.filter(conversation=conversation).values_list(
        "metadata", flat=True
    ):
        if isinstance(metadata, dict):
            ids |= live_sources.source_ids(metadata)
    return ids


def share_get(digest: str) -> ShareLink | None:
    """The link with this token digest, with its conversation (one query)."""
    return ShareLink.objects.select_related("conversation").filter(digest=digest).first()


def share_by_id(share_id: int) -> ShareLink | None:
    return ShareLink.objects.filter(pk=share_id).first()


def share_list(conversation: Conversation) -> list[ShareLink]:
    """A conversation's links, newest first (bounded: a link is made by hand)."""
    return list(ShareLink.objects.filter(conversation=conversation).order_by("-created_at", "-id"))


def block_total_through(conversation: Conversation, last_seq: int) -> int:
    """Blocks in messages 0..last_seq: a frozen link's total."""
    rows = Message.objects.filter(conversation=conversation, seq__lte=last_seq)
    return int(rows.aggregate(n=Sum("block_count"))["n"] or 0)


def spans_rejected_since(since: datetime, *, shown: int = 3) -> tuple[int, list[RejectedSpan]]:
    """How many OTLP spans were rejected since `since`, and the latest `shown` of them (the
    table holds at most a day's, and at most `services.following.REJECTIONS_MAX` rows)."""
    rows = RejectedSpan.objects.filter(received_at__gte=since)
    latest = list(rows.order_by("-received_at", "-id")[:shown])
    # The list page asks on every load: with nothing rejected, one query, no count.
    count = len(latest) if len(latest) < shown else rows.count()
    return count, latest
