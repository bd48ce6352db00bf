"""Search entries, stored in the same transaction as what they index: a title's
(`index_title`) and a message's new blocks' (`entries_of`,
`insert_search_entries`). Entries go with their conversation."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from conversations.core import search
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.search import SearchEntry
from conversations.record.reads.rows import block_value
from conversations.record.services.inserts import insert_rows


def index_title(conversation: Conversation) -> None:
    """Make the conversation's title entry hold its current title's words (untouched when
    they did not change: most updates are of the metadata)."""
    entries = SearchEntry.objects.filter(conversation=conversation, message_seq__isnull=True)
    found = search.index_words(conversation.title)
    if found == (entries.values_list("words", flat=True).first() or ""):
        return
    entries.delete()
    if found:
        SearchEntry.objects.create(conversation=conversation, words=found)


def entries_of(message: Message, rows: Iterable[Block]) -> list[tuple[int, int, str]]:
    """The search entries (message seq, block seq, words) of a message's new blocks (none
    for a block without words); every path that stores blocks inserts these with them."""
    entries = []
    for row in rows:
        if found := search.index_words(search.block_text(block_value(row))):
            entries.append((message.seq, row.seq, found))
    return entries


def insert_search_entries(conversation: Conversation, entries: list[tuple[int, int, str]]) -> None:
    """Insert a conversation's block entries as plain rows (`insert_rows`): a
    10,000-message batch has tens of thousands of them, too many for model instances."""
    if not entries:
        return
    key = SearchEntry._meta.get_field("conversation").get_db_prep_save(conversation.pk, connection)
    insert_rows(
        SearchEntry._meta.db_table,
        ("conversation_id", "message_seq", "block_seq", "words"),
        [(key, message_seq, block_seq, words) for message_seq, block_seq, words in entries],
        None,
    )
