"""The list's and the admin's search reads (docs/contract.md §3): the
conversations matching a query (`conversation_list`, counted by `CappedPaginator`), each
one's first match (`search_hits`), and the messages a search finds (`messages_matching`),
all through the full-text index (`record.search.index`) or along a conversation's entries."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from functools import cached_property
from typing import Any, NamedTuple

from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Substr

from conversations.core.search import INDEXED_CHARS, Query, block_text, parse_query, snippet
from conversations.record.fulltext import Matches, as_text
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.search import SearchEntry
from conversations.record.notes import reads as note_reads
from conversations.record.reads.rows import BlockRow, SearchHit, block_value
from conversations.record.search.index import along_entries, through_index


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

    A rare word costs no more than a common one (docs/contract.md §3). Common words (`_common`: most
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
    # Its notes' matches, through their own index, before any walk of the conversations.
    noted_ids = note_reads.conversation_ids_with_note_words(q)
    noted = Q(
        pk__in=note_reads.conversations_with_note_words(q) if noted_ids is None else noted_ids
    )
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
    matched, its first matching block, each read to its indexed start; for those only a
    note matched, that note's place and text (`note_reads.first_note_hits`).

    Bounded for rare and common words alike: the index gives the page's entries holding
    the words (at most HIT_ENTRIES, one query); when those are all, each conversation's
    first is among them. Otherwise (common words) each conversation's entries are walked
    in order, no further than the first of them known: a match every few entries."""
    query = parse_query(q)
    conversations = list(conversations)
    ids = [c.pk for c in conversations]
    if query.empty or not ids:
        return {}
    hits = _block_hits(conversations, ids, query)
    missing = [c for c in conversations if c.pk not in hits]
    for conversation_id, (seq, block, text) in note_reads.first_note_hits(missing, query).items():
        hits[conversation_id] = SearchHit(seq, block, text, note=True)
    return hits


def _block_hits(
    conversations: list[Conversation], ids: list[uuid.UUID], query: Query
) -> dict[uuid.UUID, SearchHit]:
    """`search_hits` of the blocks alone."""
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
        message_id=0,
        seq=0,
        type=kind,
        text=head,
        call_id="",
        name=name,
        input_json=input_head,
        is_error=False,
        media_type="",
        data="",
        origin=None,
    )
    return block_text(block_value(row))
