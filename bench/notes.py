"""Notes are bounded (docs/contract.md §10): the list's `q` and `?label=` and a page full of
notes, over tens of thousands of notes, SQLite or PostgreSQL.

Run with `python -m bench.notes [--json PATH] [--postgres]`. On a throwaway database it
stores 200 conversations of 50 messages, 20,000 notes through the service (text from a large
vocabulary, labels from 40), and one conversation of 300 messages holding 20 notes on every
message (6,000 notes of 1,000 characters; the page shows the first 5 of each message's, to
500 characters), and one with a note on every tenth message. It times, in process,
GET /api/conversations?q=… (a rare word, a word in every note) and ?label=…, the list page
with its row labels, and the pages of those conversations against the same page with no
notes. The notes' search must use their full-text index. Exits 1 on a miss.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, ms, paired_ratio, rounds
from bench.search import random_words

CONVERSATIONS = 200
MESSAGES = 50
NOTES = 20_000
FULL_MESSAGES = 300  # a page's document
RUNS = 5
QUERY_TARGET_MS = 300.0
LIST_TARGET_MS = 300.0
PAGE_TARGET_MS = 1_500.0  # the page of 300 messages holding 6,000 notes (the worst case)
PAGE_RATIO_TARGET = 1.25  # a page with a note on every tenth message, against none


def store(rng: random.Random) -> tuple[Any, Any, Any]:
    """The bench's record (messages in bulk, notes through the service); the conversation
    full of notes, a twin without any, and one with a note on every tenth message."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from conversations.record.models.conversation import Block, Conversation, Message
    from conversations.record.notes.services import note_add
    from conversations.record.services.conversations import conversation_create

    writer = get_user_model().objects.create_user(username="writer")
    vocabulary = random_words(rng, 50_000)
    labels = [f"label-{n}" for n in range(40)]

    def conversation(title: str, messages: int) -> Conversation:
        created = conversation_create(title=title)
        with transaction.atomic():
            rows = Message.objects.bulk_create(
                Message(conversation=created, seq=seq, role="user", block_count=1)
                for seq in range(messages)
            )
            Block.objects.bulk_create(
                Block(message=m, seq=0, type="text", text=" ".join(rng.choices(vocabulary, k=40)))
                for m in rows
            )
            created.message_count = messages
            created.block_count = messages
            created.save(update_fields=["message_count", "block_count"])
        return created

    stored = [conversation(f"bench {n}", MESSAGES) for n in range(CONVERSATIONS)]
    for n in range(NOTES):
        words = rng.choices(vocabulary, k=30) + ["reviewed"]
        if n == 0:
            words.append("zyxwvutsrq")  # a rare word, in one note
        note_add(
            conversation=stored[n % CONVERSATIONS],
            message_seq=rng.randrange(MESSAGES),
            text=" ".join(words),
            labels=rng.sample(labels, 2),
            user=writer,
        )
    full = conversation("full of notes", FULL_MESSAGES)
    plain = conversation("no notes", FULL_MESSAGES)
    some = conversation("some notes", FULL_MESSAGES)
    for seq in range(0, FULL_MESSAGES, 10):
        note_add(
            conversation=some, message_seq=seq, user=writer, labels=["some"],
            text=" ".join(rng.choices(vocabulary, k=30)),
        )  # fmt: skip
    for seq in range(FULL_MESSAGES):
        for _ in range(20):
            note_add(
                conversation=full, message_seq=seq, user=writer, labels=["full"],
                text=" ".join(rng.choices(vocabulary, k=200))[:1_000],
            )  # fmt: skip
    return full, plain, some


def plan() -> str:
    from django.db import connection

    from conversations.record.notes import reads as note_reads

    sql, params = note_reads.conversations_with_note_words("reviewed").query.sql_with_params()
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            return " | ".join(str(row[-1]) for row in cursor.fetchall())
        cursor.execute(f"EXPLAIN {sql}", params)
        return " | ".join(row[0].strip() for row in cursor.fetchall())


def measure(vendor: str, results: Results) -> None:
    from django.db import connection
    from django.test import Client

    from conversations.record.services.api_tokens import api_token_create

    print(f"{vendor}: storing {NOTES + FULL_MESSAGES * 20:,} notes …", flush=True)
    start = time.perf_counter()
    full, plain, some = store(random.Random(11))
    results.figure(f"{vendor}: notes stored", NOTES + FULL_MESSAGES * 20, "",
                   f"in {time.perf_counter() - start:.1f} s")  # fmt: skip
    _, token = api_token_create(label="bench")
    api = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    page = Client(HTTP_HOST="127.0.0.1")
    page.cookies["sessionid"] = benchkit.operator_session("bench-operator")

    def get(client: Any, path: str, **query: str) -> Any:
        def run() -> Any:
            response = client.get(path, query)
            if response.status_code != 200:
                raise RuntimeError(f"{path} {query}: {response.status_code}")
            return response

        return run

    work = {
        "API list, q = a rare word in one note": get(api, "/api/conversations", q="zyxwvutsrq"),
        "API list, q = a word in every note": get(api, "/api/conversations", q="reviewed"),
        "API list, ?label=": get(api, "/api/conversations", label="label-7"),
        "list page with row labels": get(page, "/"),
        "list page, ?label=": get(page, "/", label="label-7"),
    }
    samples = rounds(RUNS, work)
    for name in work:
        target = QUERY_TARGET_MS if name.startswith("API") else LIST_TARGET_MS
        results.target(f"{vendor}: {name}", ms(samples[name]), target, "ms", f"median of {RUNS}")
    pages = rounds(RUNS, {
        "full": get(page, f"/c/{full.id}/"),
        "plain": get(page, f"/c/{plain.id}/"),
        "some": get(page, f"/c/{some.id}/"),
    })  # fmt: skip
    size = len(get(page, f"/c/{full.id}/")().content)
    results.target(f"{vendor}: page of 300 messages with 6,000 notes", ms(pages["full"]),
                   PAGE_TARGET_MS, "ms", f"median of {RUNS}; {size / 1e6:.1f} MB")  # fmt: skip
    results.figure(f"{vendor}: that page against the same without notes",
                   paired_ratio(pages["full"], pages["plain"]), "×",
                   f"the page without notes: {ms(pages['plain']):,.0f} ms")  # fmt: skip
    results.target(f"{vendor}: a page with a note on every tenth message, against none",
                   paired_ratio(pages["some"], pages["plain"]), PAGE_RATIO_TARGET, "×")  # fmt: skip
    query_plan = plan()
    print(f"  plan: {query_plan}", flush=True)
    index = "conversations_note_fts" if vendor == "sqlite" else "note_words_gin"
    results.target(f"{vendor}: the notes' search uses their full-text index",
                   int(index in query_plan), 1, "", op="=")  # fmt: skip
    connection.close()


def main(argv: list[str] | None = None) -> int:
    return benchkit.in_process(__doc__, argv, "replay_bench_notes", measure, static=True)


if __name__ == "__main__":
    sys.exit(main())
