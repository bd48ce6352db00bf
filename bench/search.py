"""Search is bounded: hostile queries over tens of MB of stored text, SQLite or PostgreSQL.

Run with `python -m bench.search [--json PATH] [--postgres]`. On a throwaway SQLite
file (with --postgres, a throwaway PostgreSQL database) it stores about 20 MB of agent
text in 24,000 blocks (a large vocabulary, and one block of a million `a`), each block's
search entry made as `services` makes it, then times GET /api/conversations?q=… in
process for the issue's hostile query, the worst queries the limits still allow, a common
word, a common prefix and a rare word; next to them, once, the old `LIKE '%q%'` scan on
the same rows. The plan must use the full-text index (FTS5 / GIN). Exits 1 on a miss.
"""

from __future__ import annotations

import random
import string
import sys
import time
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, ms, rounds

CONVERSATIONS = 40
MESSAGES = 200  # per conversation, three blocks of about 1 KB each
RUNS = 5
# Each figure is one API request (count and first page) over the whole store.
QUERY_TARGET_MS = 500.0

HOSTILE_ISSUE = "a" * 1000 + "b"
HOSTILE = {
    "the issue's query: 1,000 'a' + 'b' (refused, 400)": HOSTILE_ISSUE,
    "one 200-character word 'aaa…b'": "a" * 199 + "b",
    "16 one-letter words": " ".join(string.ascii_lowercase[:16]),
    "16 two-letter prefixes": " ".join(a + b for a in "st" for b in "aeiouyrh"),
    "a word in every block ('the')": "the",
    "a common prefix ('co')": "co",
    "a rare word": "zyxwvut",
    "Greek and Cyrillic, any case": "ΣΊΣΥΦΟΣ достоевский",
}


def random_words(rng: random.Random, count: int) -> list[str]:
    """Made-up words of 3 to 9 letters: a vocabulary far larger than the sentences'."""
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(count)]


def text(rng: random.Random, pool: list[str]) -> str:
    """Agent-like text of 100 to 3,000 characters (about 1 KB on average)."""
    return " ".join(rng.choices(pool, k=rng.choice((100, 300, 1000, 3000)) // 7))


def store(rng: random.Random) -> int:
    """The bench's record: conversations through the services, their messages in bulk
    with each block's search entry as `services` makes it; the characters stored."""
    from django.db import transaction

    from conversations.record.models.conversation import Block, Message
    from conversations.record.services import search_entries
    from conversations.record.services.conversations import conversation_create

    # About half the words are the sentences' few, half from a vocabulary of 50,000.
    vocabulary = random_words(rng, 50_000) + ["σίσυφος", "Достоевский"]
    vocabulary += benchkit.WORDS * (len(vocabulary) // len(benchkit.WORDS))
    stored = 0
    for number in range(CONVERSATIONS):
        conversation = conversation_create(title=f"bench {number}")
        with transaction.atomic():
            messages = Message.objects.bulk_create(
                Message(conversation=conversation, seq=seq, role="user", block_count=3)
                for seq in range(MESSAGES)
            )
            blocks = []
            for message in messages:
                call = f"call_{message.seq}"
                blocks += [
                    Block(message=message, seq=0, type="text", text=text(rng, vocabulary)),
                    Block(message=message, seq=1, type="tool_use", call_id=call, name="search",
                          input_json=f'{{"query":"{text(rng, vocabulary)[:200]}"}}'),
                    Block(message=message, seq=2, type="tool_result", call_id=call,
                          name="search", text=text(rng, vocabulary)),
                ]  # fmt: skip
            if number == 0:
                blocks[0].text = "a" * 1_000_000  # the issue's hostile text
            Block.objects.bulk_create(blocks, batch_size=1000)
            entries = []
            for message, start in zip(messages, range(0, len(blocks), 3), strict=True):
                entries += search_entries.entries_of(message, blocks[start : start + 3])
            search_entries.insert_search_entries(conversation, entries)
            conversation.message_count = MESSAGES
            conversation.save(update_fields=["message_count"])
        stored += sum(len(block.text) + len(block.input_json) for block in blocks)
    return stored


def old_like_seconds(q: str, timeout: float = 20.0) -> float:
    """The search before this change, once: LIKE '%q%' over every block's text (given up
    after `timeout` seconds on PostgreSQL, which then answers `timeout`)."""
    from django.db import OperationalError, connection, transaction
    from django.db.models import Exists, OuterRef, Q

    from conversations.record.models.conversation import Block, Conversation

    start = time.perf_counter()
    in_blocks = Block.objects.filter(message__conversation=OuterRef("pk"), text__icontains=q)
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL statement_timeout = {int(timeout * 1000)}")
            Conversation.objects.filter(Q(title__icontains=q) | Exists(in_blocks)).count()
    except OperationalError:
        return timeout
    return time.perf_counter() - start


def plan() -> str:
    """The database's plan for a search's entries."""
    from django.db import connection

    from conversations.record.search import reads as search_reads
    from conversations.record.search.index import through_index

    sql, params = (
        search_reads.search_entries("agent").values("conversation_id").query.sql_with_params()
    )
    with through_index(), connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return " | ".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN {sql}", params)
        return " | ".join(row[0].strip() for row in cursor.fetchall())


def measure(vendor: str, results: Results) -> None:
    from django.db import connection
    from django.test import Client

    from conversations.record.models.search import SearchEntry
    from conversations.record.services.api_tokens import api_token_create

    print(f"{vendor}: storing {CONVERSATIONS * MESSAGES * 3:,} blocks …", flush=True)
    start = time.perf_counter()
    stored = store(random.Random(7))
    results.figure(f"{vendor}: text stored", stored / 1e6, "MB",
                   f"in {time.perf_counter() - start:.1f} s; "
                   f"{SearchEntry.objects.count():,} search entries")  # fmt: skip
    _, token = api_token_create(label="bench")
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")

    def get(q: str) -> Any:
        return lambda: client.get("/api/conversations", {"q": q})

    for name, q in HOSTILE.items():
        response = get(q)()
        expected = 400 if len(q) > 200 else 200
        if response.status_code != expected:
            raise RuntimeError(f"{name}: {response.status_code} {response.content[:300]!r}")
    samples = rounds(RUNS, {name: get(q) for name, q in HOSTILE.items()})
    for name, q in HOSTILE.items():
        count = get(q)().json().get("count", "—")
        results.target(f"{vendor}: {name}", ms(samples[name]), QUERY_TARGET_MS, "ms",
                       f"median of {RUNS}; {count} found")  # fmt: skip
    old = old_like_seconds(HOSTILE_ISSUE)
    results.figure(f"{vendor}: before: LIKE '%q%' with the issue's query", old * 1e3, "ms",
                   "once, for comparison (20 s: given up)")  # fmt: skip
    query_plan = plan()
    print(f"  plan: {query_plan}", flush=True)
    index = "conversations_searchentry_fts" if vendor == "sqlite" else "words_gin"
    results.target(f"{vendor}: the plan uses the full-text index", int(index in query_plan), 1,
                   "", op="=")  # fmt: skip
    if vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size('conversations_searchentry')")
            (size,) = cursor.fetchone()
        results.figure(f"{vendor}: search entries and their index", size / 1e6, "MB")
    connection.close()


def main(argv: list[str] | None = None) -> int:
    return benchkit.in_process(__doc__, argv, "replay_bench_search", measure)


if __name__ == "__main__":
    sys.exit(main())
