"""Token counts at scale (issue 16 §4): stored counts, on PostgreSQL and real daphne processes.

Run with `python -m bench.counts [--json PATH]`. It prints each figure with its
target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) counting: `o200k_base` over 3 MB of one unbroken run and over 3 MB of ordinary agent
   text (MB of UTF-8 per second, target ≥ 2 each; whether the count is exact is printed);
b) a 100,000-message conversation stored through the services in batches (3 blocks a
   message, every assistant turn with measured usage, as Claude Code records it); each
   block is counted as it is stored, so the build's time includes counting;
c) warm, in interleaved rounds against one daphne: the conversation page /c/ID/, the
   context page /c/ID/context (≤ 1.3× the conversation page), the context page as of a
   message halfway (`?upto=`, ≤ 1.3×) and the diff page against microcompact
   (/c/ID/diff?b_compact=microcompact, ≤ 2×);
d) cold: for each of those pages a fresh daphne (a restart: no in-process cache), the list
   page and the same page of a 100-message conversation first (the process's own start-up:
   Django, its templates and modules), then the page's first request for the big one:
   ≤ 3× its warm time; the conversation page's is "the first open after a restart";
e) memory: the server's peak RSS (VmHWM, reset before each request) minus its RSS before
   the request, for every page cold and warm: ≤ 100 MB.
"""

from __future__ import annotations

import base64
import os
import random
import sys
import time
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

from bench import kit as benchkit
from bench.dashboard import peak_rss_mb, reset_peak_rss, turn
from bench.kit import Results, ms

MESSAGES = 100_000
BATCH = 2_000
RUNS = 7
TEXT_MB = 3
RATE_TARGET = 2.0  # MB/s
CONTEXT_TARGET = 1.3  # the context page (and `upto`) vs the conversation page, warm
DIFF_TARGET = 2.0  # the diff page with a compaction policy vs the conversation page, warm
COLD_TARGET = 3.0  # a page's first request after a restart vs the same page warm
MEMORY_TARGET = 100  # MB of RSS growth while serving any of these pages


def bench_counting(results: Results) -> None:
    from conversations.core.counting import tokens

    print(f"a) counting {TEXT_MB} MB of text")
    tokens.encoding()  # the file's load is start-up, not counting
    rng = random.Random(16)
    unbroken = base64.b64encode(rng.randbytes(TEXT_MB * 750_000)).decode()
    ordinary = "\n".join(
        benchkit.sentence(rng, rng.randint(20, 400)) for _ in range(TEXT_MB * 5_000)
    )[: TEXT_MB * 1_000_000]
    for name, text in (("unbroken", unbroken), ("ordinary", ordinary)):
        size = len(text.encode()) / 1e6
        start = time.perf_counter()
        measured = tokens.measure_text(text)
        took = time.perf_counter() - start
        note = f"{measured.tokens:,} tokens, {'exact' if measured.exact else 'approximate'}"
        results.target(f"a: counting rate, {name} text", round(size / took, 2), RATE_TARGET,
                       "MB/s", note, op="≥")  # fmt: skip


def build(count: int) -> Any:
    """A conversation of `count` messages through `appending.messages_append`, BATCH at a
    time; assistants carry Claude Code's measured usage, growing with the record."""
    from conversations.record.schemas import MessageIn
    from conversations.record.services.appending import messages_append
    from conversations.record.services.conversations import conversation_create

    rng = random.Random(f"bench {count:,} messages")
    conversation = conversation_create(title=f"bench counts {count:,} messages")
    measured = 3_000
    for start in range(0, count, BATCH):
        batch = []
        for index in range(start, min(start + BATCH, count)):
            role, blocks = turn(index, rng)
            metadata: dict[str, Any] = {}
            measured += 120
            if role == "assistant":
                metadata = {
                    "model": "claude-sonnet-4-5",
                    "id": f"msg_{index:06d}",
                    "usage": {"input_tokens": 4, "cache_read_input_tokens": measured,
                              "output_tokens": 90},
                }  # fmt: skip
            batch.append(MessageIn(role=role, blocks=blocks, metadata=metadata))
        messages_append(conversation=conversation, messages=batch)
    conversation.refresh_from_db()
    return conversation


def pages(conversation: Any) -> dict[str, str]:
    cid = conversation.pk
    return {
        "conversation": f"/c/{cid}/",
        "context": f"/c/{cid}/context",
        "context upto": f"/c/{cid}/context?upto={conversation.message_count // 2}",
        "diff microcompact": f"/c/{cid}/diff?b_compact=microcompact",
    }


def timed(web: Any, path: str, pid: int) -> tuple[float, float]:
    """(seconds, MB of RSS growth) of one GET."""
    before = rss_mb(pid)
    reset_peak_rss(pid)
    start = time.perf_counter()
    response = web.get(path)
    took = time.perf_counter() - start
    response.raise_for_status()
    return took, peak_rss_mb(pid) - before


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def bench_pages(
    results: Results, env: dict[str, str], tmp: Any, session: str, conversation: Any, small: Any
) -> None:
    import httpx2 as httpx

    paths = pages(conversation)
    warmups = pages(small)
    growth: dict[str, float] = dict.fromkeys(paths, 0.0)
    cold: dict[str, float] = {}
    print("d) cold: each page's first request after a restart")
    for name, path in paths.items():
        with benchkit.daphne(env, tmp / f"daphne-{len(cold)}.log") as server:
            pid = server.process.pid
            with httpx.Client(
                base_url=server.url, cookies={"sessionid": session}, timeout=600
            ) as web:
                web.get("/").raise_for_status()  # Django's start-up, the session
                web.get(warmups[name]).raise_for_status()  # the page's templates, modules
                took, grew = timed(web, path, pid)
        cold[name] = took
        growth[name] = max(growth[name], grew)
        results.figure(f"d: {name} page, first request after a restart", round(took * 1e3),
                       "ms", f"RSS +{grew:.0f} MB")  # fmt: skip

    print("c) warm, in interleaved rounds")
    with benchkit.daphne(env, tmp / "daphne-warm.log") as server:
        pid = server.process.pid
        with httpx.Client(base_url=server.url, cookies={"sessionid": session}, timeout=600) as web:
            for path in paths.values():
                web.get(path).raise_for_status()
            samples: dict[str, list[float]] = {name: [] for name in paths}

            def one(name: str) -> None:
                took, grew = timed(web, paths[name], pid)
                samples[name].append(took)
                growth[name] = max(growth[name], grew)

            for _ in range(RUNS):
                for name in paths:
                    one(name)
    warm = {name: ms(s) for name, s in samples.items()}
    for name in paths:
        results.figure(f"c: {name} page, warm", round(warm[name]), "ms", f"median of {RUNS}")
    base = samples["conversation"]
    for name, limit in (("context", CONTEXT_TARGET), ("context upto", CONTEXT_TARGET),
                        ("diff microcompact", DIFF_TARGET)):  # fmt: skip
        ratio = round(benchkit.paired_ratio(samples[name], base), 2)
        results.target(f"c: {name} vs conversation page, warm", ratio, limit, "×")
    for name in paths:
        label = "first open after a restart vs warm open" if name == "conversation" else (
            f"{name} page, cold vs warm"
        )  # fmt: skip
        results.target(f"d: {label}", round(cold[name] * 1e3 / warm[name], 2), COLD_TARGET, "×")
    for name in paths:
        results.target(f"e: RSS growth serving the {name} page", round(growth[name]),
                       MEMORY_TARGET, "MB", "max over cold and warm requests")  # fmt: skip


@contextmanager
def postgres_database() -> Any:
    """A fresh PostgreSQL database for this run (DATABASE_URL's server, else the local
    one), dropped on exit."""
    import psycopg

    from tests.services import postgres_url

    url = postgres_url()
    if url is None:
        raise SystemExit("bench_counts needs PostgreSQL (DATABASE_URL or 127.0.0.1:5432)")
    parsed = urlparse(url)
    admin_url = parsed._replace(path="/postgres").geturl()
    name = f"replay_bench_counts_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
    try:
        yield parsed._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--messages", type=int, default=MESSAGES, help="a smaller run, to try it")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    results = Results()
    with benchkit.scratch("replay-bench-counts-") as tmp, postgres_database() as url:
        env = benchkit.base_env(tmp, url)
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
        benchkit.setup_django(env)
        bench_counting(results)
        print(f"b) building a {args.messages:,}-message conversation …", flush=True)
        start = time.perf_counter()
        conversation = build(args.messages)
        results.figure(f"b: {args.messages:,} messages stored (and counted)",
                       round(time.perf_counter() - start, 1), "s",
                       f"{conversation.block_count:,} blocks")  # fmt: skip
        small = build(100)
        session = benchkit.operator_session(f"bench-counts-{os.getpid()}")
        from django.db import connection

        with connection.cursor() as cursor:  # as autovacuum does soon after a bulk load
            cursor.execute("ANALYZE")
        connection.close()
        bench_pages(results, env, tmp, session, conversation, small)
    return results.finish(began, args.json)


if __name__ == "__main__":
    sys.exit(main())
