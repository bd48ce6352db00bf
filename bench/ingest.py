"""Ingest's performance targets (issue 8 §4), measured from outside as ratios in one run.

Run with `make bench` (or `python -m bench.ingest [--json PATH] [--only PART]`, PART
post, watched or batch). One daphne on the embedded default (SQLite, in-memory layer,
DJANGO_DEBUG=0); every figure is a ratio of two things timed in interleaved rounds, so the
machine's load hits both alike:

1) a two-block message POST vs a trivial token-authenticated request (GET of an empty
   conversation's record): ≤ 1.3×;
2) ingest (sequential message POSTs) into a conversation with 100 open sockets vs into one
   with none: ≥ 0.9× (issue 17; every watcher still gets every message). Rounds of 80 posts
   in pairs A B, B A, A B, …; after each round every watcher holds its last message and a
   tenth of a second passes, untimed, so that no delivery a round leaves behind is timed in
   the next one (it is in daphne's CPU, which is counted to the round that caused it). The
   median of the pairs' ratios, with its quartiles and extremes, the load average, and
   daphne's CPU per message with and without sockets (which the load does not move);
3) a 10,000-message batch POST vs GET of the resulting record: ≤ 10×.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, alternating, ms, paired_ratio, quartiles, rounds

LATENCY_RUNS = 80
WATCHERS = 100
INGEST_PAIRS = 12
POSTS_PER_ROUND = 80
SETTLE = 0.1  # seconds after each round, untimed
BATCH_MESSAGES = 10_000
BATCH_RUNS = 3

POST_TARGET = 1.3
WATCHED_TARGET = 0.9
BATCH_TARGET = 10.0


def message(n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "blocks": [
            {"type": "text", "text": f"Answer {n}: the deployment finished without errors."},
            {"type": "tool_use", "id": f"call_{n}", "name": "status",
             "input": {"service": "api", "verbose": True}},
        ],
    }  # fmt: skip


def batch(size: int) -> dict[str, Any]:
    """An agent's history: calls and their results (names resolved in the batch), text."""
    messages: list[dict[str, Any]] = []
    for n in range(size):
        if n % 2 == 0:
            messages.append(message(n))
        else:
            messages.append(
                {
                    "role": "user",
                    "blocks": [
                        {
                            "type": "tool_result",
                            "tool_use_id": f"call_{n - 1}",
                            "content": "status: ok\nreplicas: 3/3\nversion: 2026.12.1",
                        },
                        {"type": "text", "text": "Thanks, go on with the next service."},
                    ],
                    "metadata": {"source_id": f"msg_{n}", "timestamp": "2026-12-01T20:00:00Z"},
                }  # fmt: skip
            )
    return {"messages": messages}


class Watchers:
    """WATCHERS websocket clients on one conversation, in a process of their own (so that
    their reading takes nothing from the poster's interpreter); `seen` holds the highest
    message seq each has been sent."""

    def __init__(self, server: benchkit.Daphne, session: str, conversation_id: str) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.url = f"{server.ws_url}/ws/conversations/{conversation_id}/?vision=1&shape=openai"
        self.headers = {"Cookie": f"sessionid={session}", "Origin": server.url}
        self.seen = context.Array("i", [-1] * WATCHERS, lock=False)
        self.ready = context.Event()
        self.stop = context.Event()
        self.failed = context.Value("i", 0, lock=False)
        self.process = context.Process(
            target=watch_all,
            args=(self.url, self.headers, self.seen, self.ready, self.stop, self.failed),
            daemon=True,
        )

    def __enter__(self) -> Watchers:
        self.process.start()
        if not self.ready.wait(120):
            raise RuntimeError("the watchers did not connect")
        if self.failed.value:
            raise RuntimeError(f"{self.failed.value} watcher(s) failed to connect")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()

    def wait_for(self, seq: int, timeout: float = 30) -> bool:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if min(self.seen) >= seq:
                return True
            time.sleep(0.02)
        return False


def watch_all(
    url: str, headers: dict[str, str], seen: Any, ready: Any, stop: Any, failed: Any
) -> None:
    """The watchers' process: connect them all, then note each frame's articles."""
    import re

    from websockets.asyncio.client import connect

    article = re.compile(r'<article id="m-(\d+)"')

    async def run() -> None:
        gate = asyncio.Semaphore(10)  # daphne drops handshakes that wait over 5 s
        connected = 0

        async def watch(index: int) -> None:
            nonlocal connected
            try:
                async with gate:
                    ws = await connect(
                        url, additional_headers=headers, open_timeout=30,
                        ping_interval=None, max_size=None,
                    )  # fmt: skip
            except Exception:
                failed.value += 1
                ready.set()
                return
            connected += 1
            if connected == WATCHERS:
                ready.set()
            async with ws:
                async for frame in ws:
                    for seq in article.findall(str(frame)):
                        seen[index] = max(seen[index], int(seq))

        tasks = [asyncio.create_task(watch(i)) for i in range(WATCHERS)]
        await asyncio.to_thread(stop.wait)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(run())


def bench_post(results: Results, client: Any, empty: str, target: str) -> None:
    print("1) a message POST vs a trivial token-authenticated request")
    get_path = f"/api/conversations/{empty}"
    post_path = f"/api/conversations/{target}/messages"
    for n in range(15):  # warm up
        client.get(get_path).raise_for_status()
        client.post(post_path, json=message(n)).raise_for_status()
    samples = rounds(
        LATENCY_RUNS,
        {
            "get": lambda: client.get(get_path).raise_for_status(),
            "post": lambda: client.post(post_path, json=message(0)).raise_for_status(),
        },
    )
    results.figure("1: GET an empty conversation (the floor)", ms(samples["get"]), "ms", "median")
    results.figure("1: POST a two-block message", ms(samples["post"]), "ms", "median")
    results.target("1: POST / trivial GET", paired_ratio(samples["post"], samples["get"]),
                   POST_TARGET, "×")  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_watched(
    results: Results, server: benchkit.Daphne, client: Any, session: str, quiet: str, watched: str
) -> None:
    print(f"2) ingest into a conversation with {WATCHERS} open sockets vs with none, "
          f"{INGEST_PAIRS} round pairs of {POSTS_PER_ROUND} posts")  # fmt: skip
    with Watchers(server, session, watched) as watchers:
        last = {quiet: -1, watched: -1}
        cpu = {quiet: 0.0, watched: 0.0}  # daphne's CPU seconds, by where it posted
        used = [cpu_seconds(server.process.pid)]

        def post_some(conversation_id: str) -> None:
            for n in range(POSTS_PER_ROUND):
                response = client.post(f"/api/conversations/{conversation_id}/messages",
                                       json=message(n))  # fmt: skip
                response.raise_for_status()
                last[conversation_id] = int(response.json()["seq"])

        def settle(conversation_id: str) -> None:
            """Until every watcher holds what was posted, and a moment more: the fan-out's
            last delivery is not timed in the next round, but its CPU is counted."""
            watchers.wait_for(last[watched])
            time.sleep(SETTLE)
            now = cpu_seconds(server.process.pid)
            cpu[conversation_id] += now - used[0]
            used[0] = now

        post_some(watched)  # warm up: the first render of each template
        post_some(quiet)
        settle(quiet)
        cpu[quiet] = cpu[watched] = 0.0
        load_before = os.getloadavg()[0]
        order: list[str] = []  # which conversation the round that ends now posted to

        def round_of(conversation_id: str) -> None:
            order.append(conversation_id)
            post_some(conversation_id)

        pairs = alternating(INGEST_PAIRS, lambda: round_of(quiet), lambda: round_of(watched),
                            lambda: settle(order[-1]))  # fmt: skip
        load_after = os.getloadavg()[0]
        watchers.wait_for(last[watched])
        holding = sum(seen >= last[watched] for seen in watchers.seen)
    # Throughput ratio: a round's time with none over its partner's time with sockets.
    ratios = [none / with_sockets for none, with_sockets in pairs]
    q1, median, q3 = quartiles(ratios)
    posts = INGEST_PAIRS * POSTS_PER_ROUND
    rate = {name: POSTS_PER_ROUND / statistics.median(times) for name, times in
            (("quiet", [a for a, _ in pairs]), ("watched", [b for _, b in pairs]))}  # fmt: skip
    results.figure("2: machine load average (1 min), before / after the rounds",
                   load_before, "", f"/ {load_after:.2f} on {os.cpu_count()} cores")  # fmt: skip
    results.figure("2: messages/s, no sockets", rate["quiet"], "msg/s", "median round")
    results.figure(f"2: messages/s, {WATCHERS} sockets", rate["watched"], "msg/s", "median round")
    results.figure("2: daphne CPU per message, no sockets", cpu[quiet] / posts * 1e3, "ms")
    results.figure(f"2: daphne CPU per message, {WATCHERS} sockets", cpu[watched] / posts * 1e3,
                   "ms", "the fan-out's rendering and writes included")  # fmt: skip
    spread = f"third {q3:.2f}, lowest {min(ratios):.2f}, highest {max(ratios):.2f}"
    results.figure("2: ratio of a round pair, first quartile", q1, "×", spread)
    results.target(f"2: ingest with {WATCHERS} sockets / with none", median, WATCHED_TARGET,
                   "×", f"median of {INGEST_PAIRS} round pairs (A B, B A, …)", op="≥")  # fmt: skip
    results.target("2: watchers holding the last message", holding, WATCHERS, "of",
                   "within 30 s", op="=")  # fmt: skip


def bench_batch(results: Results, client: Any, create: Any) -> None:
    import orjson

    print(f"3) a {BATCH_MESSAGES:,}-message batch POST vs GET of the resulting record")
    body = orjson.dumps(batch(BATCH_MESSAGES))
    results.figure("3: batch body", len(body) / 1e6, "MB")
    posts, gets = [], []
    for _ in range(BATCH_RUNS):
        cid = create()
        start = time.perf_counter()
        response = client.post(f"/api/conversations/{cid}/messages/batch", content=body,
                               headers={"Content-Type": "application/json"})  # fmt: skip
        posts.append(time.perf_counter() - start)
        if response.status_code != 201:
            raise RuntimeError(f"batch: {response.status_code} {response.text[:300]}")
        start = time.perf_counter()
        client.get(f"/api/conversations/{cid}").raise_for_status()
        gets.append(time.perf_counter() - start)
    results.figure("3: POST the batch", ms(posts), "ms", f"median of {BATCH_RUNS}")
    results.figure("3: GET the record", ms(gets), "ms", f"median of {BATCH_RUNS}")
    results.target("3: batch POST / record GET", paired_ratio(posts, gets), BATCH_TARGET, "×")


def main(argv: list[str] | None = None) -> int:
    import httpx2 as httpx

    parser = benchkit.arguments(__doc__)
    parts = ("post", "watched", "batch")
    parser.add_argument("--only", choices=parts, action="append", help="run these parts only")
    args = parser.parse_args(argv)
    only = set(args.only or parts)
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-ingest-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        # Every watcher is the same operator here, as one user's many tabs would not be.
        env["REPLAY_MAX_SOCKETS_PER_USER"] = str(WATCHERS)
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.setup_django(env)
        from django.db import connection

        from conversations.record.services.api_tokens import api_token_create

        _, token = api_token_create(label="bench-ingest")
        session = benchkit.operator_session("bench-ingest")
        connection.close()
        results = Results()
        with benchkit.daphne(env, tmp / "daphne.log") as server:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:

                def create(title: str = "bench ingest") -> str:
                    response = client.post("/api/conversations", json={"title": title})
                    response.raise_for_status()
                    return str(response.json()["id"])

                if "post" in only:
                    bench_post(results, client, create("empty"), create("posted"))
                if "watched" in only:
                    quiet, watched = create("quiet"), create("watched")
                    bench_watched(results, server, client, session, quiet, watched)
                if "batch" in only:
                    bench_batch(results, client, create)
        return results.finish(began, args.json)


if __name__ == "__main__":
    sys.exit(main())
