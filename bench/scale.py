"""Flat at a million messages (issue 18): search, the finder, storage and ingest at scale.

Run with `make bench-scale` (or `python -m bench.scale [--messages N] [--json PATH]`;
default 1,000,000 messages). PostgreSQL only (DATABASE_URL's server, else the local one):
a throwaway database is built with `tests/scaledata.py` — agent conversations of 50–500
messages and one of 100,000 and two of 50,000 when the size allows, written with COPY,
indexes built after the load — then every figure is timed in process through Django's
test client (median of RUNS), printed against the issue's targets, and the database is
dropped. Exits 1 on a miss.

Measured: the list, its filters, a conversation page, a deep link, the context page and
an append; search (API and list page) for a common word, a rare one, a word in 1 % of the
user turns, a rare word with a filter, three words, a deep page, a prefix, a word found
only in the largest conversation, and the admin's message search; the finder's next
problem and error from anywhere in the 100,000-message conversation and its search there;
the database's size per message against the request JSON; ingest through the batch API;
and, for the record reads another branch streams, `GET /api/conversations/ID` and
`/replay` of the largest conversation (figures only: issue 18's "whole-record reads").
"""

from __future__ import annotations

import os
import pickle
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson

from bench import kit as benchkit
from bench.kit import Results, ms, rounds
from tests import scaledata

MESSAGES = 1_000_000
RUNS = 5
SEARCH_MS = 300.0  # any search within the contract's limits, first or deep page
FINDER_MS = 50.0  # the finder's next error / unanswered call / compaction
PAGE_MS = 300.0  # the list, a conversation page, a deep link, an append
STORAGE_RATIO = 1.5  # database bytes per message / request JSON bytes per message
INGEST_RATE = 1500.0  # messages/s through the batch API, one process
INGEST_BATCH = 1000
INGEST_BATCHES = 4
CONCENTRATED = "monolithcanary"  # a word only the largest conversation holds


def build(url: str, messages: int) -> tuple[scaledata.Planted, float]:
    """The fixture, with the tables' indexes and constraints dropped for the load and
    built again after it; seconds taken."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(url) as connection:
        connection.execute("SET maintenance_work_mem = '1GB'")
        saved = _drop_indexes(connection)
        planted = scaledata.build(connection, messages=messages)
        _plant_concentrated(connection, planted)
        for statement in saved:
            connection.execute(statement)  # type: ignore[arg-type]
        connection.commit()
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")
    return planted, time.perf_counter() - start


TABLES = (
    "conversations_conversation",
    "conversations_message",
    "conversations_block",
    "conversations_searchentry",
    "conversations_findermark",
)


def _drop_indexes(connection: Any) -> list[str]:
    """Drop the loaded tables' secondary indexes, unique and foreign-key constraints (the
    primary keys stay); the statements that make them again, in an order that works."""
    indexes: list[str] = []
    constraints: list[str] = []
    foreign: list[str] = []
    for table in TABLES:
        rows = connection.execute(
            "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype IN ('u', 'f')",
            [table],
        ).fetchall()
        for name, kind, definition in rows:
            connection.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
            add = f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"
            (foreign if kind == "f" else constraints).append(add)
        rows = connection.execute(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
            "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %s::regclass "
            "AND NOT x.indisprimary AND NOT EXISTS "
            "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.oid)",
            [table],
        ).fetchall()
        for name, definition in rows:
            connection.execute(f"DROP INDEX {name}")
            indexes.append(definition)
    return indexes + constraints + foreign


def _plant_concentrated(connection: Any, planted: scaledata.Planted) -> None:
    """A word in 20,000 blocks of the largest conversation and nowhere else."""
    if planted.big.int == 0:
        return
    connection.execute(
        "UPDATE conversations_searchentry SET words = %s || ' ' || words "
        "WHERE conversation_id = %s AND message_seq %% 5 = 1 AND message_seq < 100000",
        [CONCENTRATED, planted.big],
    )


def storage(planted: scaledata.Planted, results: Results) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class "
            "WHERE relkind = 'r' AND relname LIKE 'conversations_%%'"
        )
        sizes = dict(cursor.fetchall())
        cursor.execute(
            "SELECT pg_relation_size('conversations_searchentry_words_gin'), "
            "sum(pg_column_size(words)) FROM conversations_searchentry"
        )
        gin, words = cursor.fetchone()
    total = sum(sizes.values())
    per_message = total / planted.messages
    request = planted.request_bytes / planted.messages
    note = f"{per_message:,.0f} B a message; request JSON {request:,.0f} B a message"
    results.figure("database, all conversation tables", total / 1e6, "MB", note)
    results.figure("  of which the search entries (words, GIN, keys)",
                   sizes["conversations_searchentry"] / 1e6, "MB",
                   f"GIN {gin / 1e6:,.0f} MB, words {int(words or 0) / 1e6:,.0f} MB")  # fmt: skip
    results.target("storage per message / request JSON per message",
                   round(per_message / request, 2), STORAGE_RATIO, "×")  # fmt: skip


def searches(planted: scaledata.Planted, results: Results, client: Any, page: Any) -> None:
    rare_with_error = {"q": scaledata.RARE, "has_errors": "1"}
    deep = str(client.get("/api/conversations", {"q": "the"}).json()["pages"])
    queries: dict[str, dict[str, str]] = {
        "a common word ('the')": {"q": "the"},
        f"a rare word (3 blocks: '{scaledata.RARE}')": {"q": scaledata.RARE},
        f"a word in 1 % of user turns ('{scaledata.UNCOMMON}')": {"q": scaledata.UNCOMMON},
        "a rare word + has_errors": rare_with_error,
        "a common word + has_errors": {"q": "the", "has_errors": "1"},
        "three words ('the file error')": {"q": "the file error"},
        "a common prefix ('co')": {"q": "co"},
        f"a deep page (page {deep} of 'the', 50 a page)": {"q": "the", "page": deep},
        "a word no block holds": {"q": "qqxqqxqq"},
        "a word only the largest conversation holds (20,000 blocks)": {"q": CONCENTRATED},
    }
    for name, params in queries.items():
        response = client.get("/api/conversations", params)
        if response.status_code != 200:
            raise RuntimeError(f"{name}: {response.status_code} {response.content[:300]!r}")
    api = rounds(RUNS, {n: _get(client, "/api/conversations", p) for n, p in queries.items()})
    pages = rounds(RUNS, {n: _get(page, "/", p) for n, p in queries.items()})
    for name, params in queries.items():
        body = client.get("/api/conversations", params).json()
        count = f"{body['count']:,}{'+' if body.get('count_capped') else ''}"
        results.target(f"search API: {name}", ms(api[name]), SEARCH_MS, "ms",
                       f"{count} found, median of {RUNS}")  # fmt: skip
        results.target(f"search page: {name}", ms(pages[name]), SEARCH_MS, "ms")
    admin = rounds(RUNS, {
        "common": _get(page, "/admin/conversations/message/", {"q": "the"}),
        "rare": _get(page, "/admin/conversations/message/", {"q": scaledata.RARE}),
    })  # fmt: skip
    results.target("admin message search, a common word", ms(admin["common"]), SEARCH_MS, "ms")
    results.target("admin message search, a rare word", ms(admin["rare"]), SEARCH_MS, "ms")


def finder(planted: scaledata.Planted, results: Results, page: Any) -> None:
    if planted.big.int == 0:
        print("  (no 100,000-message conversation at this size: finder figures skipped)")
        return
    find = f"/c/{planted.big}/find"
    error = planted.big_errors[0]
    steps = {
        "next problem from the start": {"kind": "problem"},
        f"next problem after #{error - 1} (an error at #{error})": {
            "kind": "problem",
            "after": str(error - 1),
        },
        "previous problem from the end": {"kind": "problem", "before": "99999"},
        "next error from the start": {"kind": "error"},
        "next unanswered call / compaction after the error": {
            "kind": "problem",
            "after": str(error),
        },
    }
    timed = rounds(RUNS, {n: _get(page, find, p) for n, p in steps.items()})
    for name, params in steps.items():
        found = page.get(find, params).json()["found"]
        results.target(f"finder: {name}", ms(timed[name]), FINDER_MS, "ms",
                       f"found {found['what']} at #{found['seq']}" if found else "")  # fmt: skip
        results.target(f"finder: {name}: found", int(found is not None), 1, "", op="=")
    hits = {
        "search a common word": {"kind": "text", "q": "the"},
        "search a common word, deep (after #90000)": {"kind": "text", "q": "the", "after": "90000"},
        "search a rare word": {"kind": "text", "q": CONCENTRATED, "after": "99990"},
        "search a word it does not hold": {"kind": "text", "q": scaledata.RARE},
    }
    timed = rounds(RUNS, {n: _get(page, find, p) for n, p in hits.items()})
    for name, params in hits.items():
        body = page.get(find, params).json()
        total = f"{body.get('total', 0):,}{'+' if body.get('capped') else ''} hits"
        results.target(f"finder: {name}", ms(timed[name]), SEARCH_MS, "ms", total)


def pages(planted: scaledata.Planted, results: Results, client: Any, page: Any) -> None:
    from conversations.record.models.conversation import Conversation

    typical = Conversation.objects.filter(message_count__lt=1000).order_by("-updated_at").first()
    assert typical is not None
    work: dict[str, Any] = {
        "API list, first page": _get(client, "/api/conversations", {}),
        "API list, has_errors": _get(client, "/api/conversations", {"has_errors": "1"}),
        "API list, unanswered": _get(client, "/api/conversations", {"unanswered": "1"}),
        "list page": _get(page, "/", {}),
        "list page, page 20": _get(page, "/", {"page": "20"}),
        f"conversation page ({typical.message_count} messages)": _get(
            page, f"/c/{typical.id}/", {}
        ),
        f"context page ({typical.message_count} messages)": _get(
            page, f"/c/{typical.id}/context", {}
        ),
    }
    if planted.big.int:
        work["conversation page (100,000 messages)"] = _get(page, f"/c/{planted.big}/", {})
        work["deep link: the window around #95000"] = _get(
            page, f"/c/{planted.big}/messages", {"around": "95000"}
        )
    for name, call in work.items():
        response = call()
        if response.status_code not in (200, 201):
            raise RuntimeError(f"{name}: {response.status_code} {response.content[:300]!r}")
    timed = rounds(RUNS, work)
    for name in work:
        results.target(name, ms(timed[name]), PAGE_MS, "ms")
    # Appends after the pages: each one changes the largest conversation's tail, which
    # the page's pressure view would then count again.
    target = planted.big if planted.big.int else typical.id
    seq = iter(range(10**9))
    append = {
        "append a message (API)": lambda: client.post(
            f"/api/conversations/{target}/messages",
            orjson.dumps(
                {"role": "user", "blocks": [{"type": "text", "text": f"ping {next(seq)}"}]}
            ),
            content_type="application/json",
        )
    }
    timed = rounds(RUNS, append)
    results.target("append a message (API)", ms(timed["append a message (API)"]), PAGE_MS, "ms",
                   "to the largest conversation")  # fmt: skip


def record_reads(planted: scaledata.Planted, results: Results, client: Any) -> None:
    """Figures only: the whole-record reads are another branch's (issue 18)."""
    if planted.big.int == 0:
        return
    for path in (f"/api/conversations/{planted.big}", f"/api/conversations/{planted.big}/replay"):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        response = client.get(path)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        elapsed = time.perf_counter() - start
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        results.figure(f"GET {path.replace(str(planted.big), 'ID')} (100,000 messages)",
                       elapsed * 1e3, "ms",
                       f"{len(body) / 1e6:,.0f} MB; peak RSS of this process +{grown:,.0f} MB "
                       "(streaming: another branch)")  # fmt: skip
        del body, response


def ingest(results: Results, client: Any) -> None:
    from conversations.record.services.conversations import conversation_create

    pool = scaledata.pool()
    rng = random.Random(8)
    bodies = [
        orjson.dumps({"messages": list(scaledata.rows_for_api(rng, pool, INGEST_BATCH))})
        for _ in range(INGEST_BATCHES)
    ]
    size = sum(len(b) for b in bodies)
    start = time.perf_counter()
    for body in bodies:
        conversation = conversation_create(title="ingest")
        response = client.post(
            f"/api/conversations/{conversation.id}/messages/batch",
            body,
            content_type="application/json",
        )
        if response.status_code != 201:
            raise RuntimeError(f"batch: {response.status_code} {response.content[:300]!r}")
    elapsed = time.perf_counter() - start
    rate = INGEST_BATCH * INGEST_BATCHES / elapsed
    results.target("ingest through the batch API, one process", round(rate), INGEST_RATE,
                   "messages/s", f"{INGEST_BATCHES} batches of {INGEST_BATCH:,} "
                   f"({size / 1e6:,.1f} MB of JSON), search entries and marks included",
                   op="≥")  # fmt: skip


def _get(client: Any, path: str, params: dict[str, str]) -> Any:
    def call() -> Any:
        response = client.get(path, params)
        if response.streaming:
            b"".join(response.streaming_content)
        return response

    return call


def _clients() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from conversations.record.services.api_tokens import api_token_create

    _, token = api_token_create(label="bench")
    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Bearer {token}")
    name = f"bench-{os.getpid()}"  # a kept database may already have a run's user
    operator = get_user_model().objects.create_superuser(name, f"{name}@example.com", "x")
    page = Client(HTTP_HOST="127.0.0.1")
    page.force_login(operator)
    return client, page


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--messages", type=int, default=MESSAGES,
                        help=f"messages to build (default {MESSAGES:,})")  # fmt: skip
    parser.add_argument("--keep", action="store_true",
                        help="keep the database at the end (its URL is printed)")  # fmt: skip
    parser.add_argument("--database", help="measure a database a --keep run left, as it is")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    url = args.database or benchkit.postgres_database("replay_bench_scale")
    if url is None:
        print("PostgreSQL is not reachable", file=sys.stderr)
        return 1
    try:
        with benchkit.scratch("replay-bench-scale-") as tmp:
            env = benchkit.base_env(tmp, url) | {"DJANGO_ALLOWED_HOSTS": "127.0.0.1"}
            benchkit.manage(env, "migrate", "--noinput", "-v", "0")
            benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
            benchkit.setup_django(env)
            results = Results()
            if args.database:
                planted, seconds = _planted(args.database), 0.0
            else:
                print(f"building {args.messages:,} messages …", flush=True)
                planted, seconds = build(url, args.messages)
                (tmp.parent / f"{urlparse(url).path.lstrip('/')}.planted").write_bytes(
                    pickle.dumps(planted)
                )
            results.figure("fixture built (COPY, indexes after)", seconds, "s",
                           f"{planted.conversations:,} conversations, {planted.messages:,} "
                           f"messages, {planted.blocks:,} blocks")  # fmt: skip
            storage(planted, results)
            client, page = _clients()
            searches(planted, results, client, page)
            finder(planted, results, page)
            pages(planted, results, client, page)
            ingest(results, client)
            record_reads(planted, results, client)
            from django.db import connection

            connection.close()
            return results.finish(began, args.json, messages=planted.messages)
    finally:
        if args.keep or args.database:
            print(f"kept: {url}")
        else:
            benchkit.drop_database(url)


def _planted(url: str) -> scaledata.Planted:
    """What a --keep run planted in that database (saved beside the scratch folders)."""
    name = urlparse(url).path.lstrip("/")
    path = Path(tempfile.gettempdir()) / f"{name}.planted"
    return pickle.loads(path.read_bytes())  # type: ignore[no-any-return]


if __name__ == "__main__":
    sys.exit(main())
