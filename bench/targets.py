"""Replay's performance targets, measured on a throwaway database and a real daphne.

Run with `make bench` (or `python -m bench.targets [--json PATH]`). It prints each figure
with its target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) the pure projection of a 30,000-block record vs orjson.dumps of its plain data;
b) GET …/replay vs GET … of a 10,000-message conversation over daphne, and the
   number of SQL queries each takes at 100 and 10,000 messages;
c) ingest: a two-block message POST vs a trivial authenticated GET, and messages
   per second for 1 and 8 concurrent clients.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, ms, paired_ratio, rounds, sentence

RECORD_MESSAGES = 10_000  # three blocks each: the 30,000-block record
SMALL_MESSAGES = 100
PROJECTION_RUNS = 21
HTTP_RUNS = 9
LATENCY_RUNS = 60
SEQUENTIAL_MESSAGES = 200
CONCURRENT_CLIENTS = 8
CONCURRENT_MESSAGES = 400

PROJECTION_TARGET = 3.0
REPLAY_TARGET = 1.5
INGEST_TARGET = 2.0

IMAGE_COLORS = ((200, 30, 30), (30, 200, 30), (30, 30, 200))


# --- the record ----------------------------------------------------------------------


def message_blocks(index: int, rng: random.Random) -> tuple[str, list[Any]]:
    """A realistic agent turn: users ask and return tool results, assistants reason,
    answer and call tools; a few user messages carry a small image. Three blocks each."""
    from conversations.record.schemas import ImageIn, ReasoningIn, TextIn, ToolResultIn, ToolUseIn

    call = f"call_{index // 2:05d}"
    if index == 0:
        return benchkit.system_turn(rng)
    if index % 2 == 1:
        blocks: list[Any] = [TextIn(type="text", text=sentence(rng, rng.choice((20, 80, 300))))]
        if index % 97 == 1:
            image = benchkit.png(IMAGE_COLORS[index % 3])
            blocks.append(ImageIn(type="image", media_type="image/png", data=image))
        else:
            blocks.append(
                ToolResultIn(
                    type="tool_result",
                    tool_use_id=call,  # the previous assistant message's call
                    name=None if index % 5 == 0 else "search",
                    content=sentence(rng, rng.randint(200, 500)),
                    is_error=index % 23 == 0,
                )
            )
        blocks.append(TextIn(type="text", text=sentence(rng, rng.choice((10, 60, 1200)))))
        return "user", blocks
    return "assistant", [
        ReasoningIn(type="reasoning", text=sentence(rng, rng.randint(80, 600))),
        TextIn(type="text", text=sentence(rng, rng.choice((40, 200, 900)))),
        ToolUseIn(
            type="tool_use",
            id=call,
            name="search",
            input={
                "query": sentence(rng, 30),
                "filters": {"repo": "replay", "paths": ["src/", "tests/"], "limit": 10},
                "page": index,
            },
        ),
    ]


# --- the measurements ----------------------------------------------------------------


def bench_projection(results: Results, conversation: Any) -> None:
    import orjson

    from conversations.core import replay
    from conversations.record.reads import selectors, shapes
    from conversations.record.reads.rows import stored_messages

    print("a) projection of the 30,000-block record vs orjson.dumps of its plain data")
    plain = shapes.record_data(conversation, url="http://127.0.0.1/c/x/")
    stored = stored_messages(selectors.message_rows(conversation))
    blocks = sum(len(m.blocks) for m in stored)
    results.figure("a: record blocks", blocks, "blocks", f"in {len(stored):,} messages")
    results.figure("a: record JSON size", len(orjson.dumps(plain)) / 1e6, "MB")
    work: dict[str, Callable[[], object]] = {"dumps": lambda: orjson.dumps(plain)}
    for vision in (True, False):
        for shape in replay.SHAPES:

            def project(vision: bool = vision, shape: replay.Shape = shape) -> object:
                return replay.project(stored, vision=vision, shape=shape)

            work[f"vision={'on' if vision else 'off'} {shape}"] = project
    samples = rounds(PROJECTION_RUNS, work)
    dumps = samples.pop("dumps")
    results.figure("a: orjson.dumps(record_data)", ms(dumps), "ms", "median")
    for label, took in samples.items():
        results.figure(f"a: project {label}", ms(took), "ms", "median")
        results.target(f"a: project / dumps, {label}", paired_ratio(took, dumps),
                       PROJECTION_TARGET, "×")  # fmt: skip


def bench_replay_over_http(results: Results, url: str, token: str, big: Any, small: Any) -> None:
    import httpx2 as httpx
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    print("b) GET …/replay vs GET … of the 10,000-message conversation over daphne")
    headers = {"Authorization": f"Bearer {token}"}
    record_path = f"/api/conversations/{big.pk}"
    replay_path = f"{record_path}/replay"
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        for path in (record_path, replay_path):
            response = client.get(path)  # warm up: imports, caches, token touch
            response.raise_for_status()
            results.figure(f"b: size of GET {path.replace(str(big.pk), 'ID')}",
                           len(response.content) / 1e6, "MB")  # fmt: skip
        samples = rounds(
            HTTP_RUNS,
            {
                "record": lambda: client.get(record_path).raise_for_status(),
                "replay": lambda: client.get(replay_path).raise_for_status(),
            },
        )
    results.figure("b: GET /api/conversations/ID", ms(samples["record"]), "ms", "median")
    results.figure("b: GET /api/conversations/ID/replay", ms(samples["replay"]), "ms", "median")
    ratio = paired_ratio(samples["replay"], samples["record"])
    results.target("b: replay / record", ratio, REPLAY_TARGET, "×")

    client = Client(HTTP_HOST="127.0.0.1", headers=headers)
    client.get(f"/api/conversations/{small.pk}")  # the token's last-use touch is done
    for conversation, size in ((small, SMALL_MESSAGES), (big, RECORD_MESSAGES)):
        for name, path in (
            ("GET ID", f"/api/conversations/{conversation.pk}"),
            ("GET ID/replay", f"/api/conversations/{conversation.pk}/replay"),
        ):
            with CaptureQueriesContext(connection) as queries:
                assert client.get(path).status_code == 200
            results.figure(f"b: SQL queries, {name}, {size:,} messages", len(queries), "queries")


def bench_ingest(results: Results, url: str, token: str) -> None:
    import httpx2 as httpx

    print("c) ingest on the embedded default (SQLite, in-memory layer, daphne)")
    headers = {"Authorization": f"Bearer {token}"}

    def create(client: httpx.Client, title: str) -> str:
        response = client.post("/api/conversations", json={"title": title})
        response.raise_for_status()
        return str(response.json()["id"])

    def body(n: int) -> dict[str, Any]:
        return {
            "role": "assistant",
            "blocks": [
                {"type": "text", "text": f"Answer {n}: the deployment finished without errors."},
                {"type": "tool_use", "id": f"call_{n}", "name": "status",
                 "input": {"service": "api", "verbose": True}},
            ],
        }  # fmt: skip

    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        tiny = create(client, "tiny")
        client.post(
            f"/api/conversations/{tiny}/messages",
            json={"role": "user", "blocks": [{"type": "text", "text": "hello"}]},
        ).raise_for_status()
        target = create(client, "ingest latency")
        get_path = f"/api/conversations/{tiny}/replay"
        post_path = f"/api/conversations/{target}/messages"
        for n in range(10):  # warm up
            client.get(get_path).raise_for_status()
            client.post(post_path, json=body(n)).raise_for_status()
        samples = rounds(
            LATENCY_RUNS,
            {
                "get": lambda: client.get(get_path).raise_for_status(),
                "post": lambda: client.post(post_path, json=body(0)).raise_for_status(),
                "list": lambda: client.get(
                    "/api/conversations", params={"page_size": 1}
                ).raise_for_status(),
            },
        )
        results.figure("c: GET tiny conversation's /replay (reference)", ms(samples["get"]),
                       "ms", "median; 1 message, 1 block")  # fmt: skip
        results.figure("c: GET /api/conversations?page_size=1 (for comparison)",
                       ms(samples["list"]), "ms", "median")  # fmt: skip
        results.figure("c: POST message with two blocks", ms(samples["post"]), "ms", "median")
        results.target("c: POST / GET", paired_ratio(samples["post"], samples["get"]),
                       INGEST_TARGET, "×")  # fmt: skip

        sequential = create(client, "ingest 1 client")
        start = time.perf_counter()
        for n in range(SEQUENTIAL_MESSAGES):
            client.post(
                f"/api/conversations/{sequential}/messages", json=body(n)
            ).raise_for_status()
        took = time.perf_counter() - start
        results.figure("c: messages/s, 1 client", SEQUENTIAL_MESSAGES / took, "msg/s")
        shared = create(client, "ingest 8 clients, one conversation")
        separate = [create(client, f"ingest client {i}") for i in range(CONCURRENT_CLIENTS)]

    def concurrent(conversations: list[str]) -> float:
        per_client = CONCURRENT_MESSAGES // CONCURRENT_CLIENTS
        barrier = threading.Barrier(CONCURRENT_CLIENTS + 1)
        errors: list[BaseException] = []

        def work(i: int) -> None:
            path = f"/api/conversations/{conversations[i % len(conversations)]}/messages"
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                client.get("/api/conversations", params={"page_size": 1})  # connect first
                barrier.wait()
                try:
                    for n in range(per_client):
                        client.post(path, json=body(n)).raise_for_status()
                except BaseException as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(CONCURRENT_CLIENTS)]
        for thread in threads:
            thread.start()
        barrier.wait()
        start = time.perf_counter()
        for thread in threads:
            thread.join()
        took = time.perf_counter() - start
        if errors:
            raise errors[0]
        return per_client * CONCURRENT_CLIENTS / took

    results.figure(f"c: messages/s, {CONCURRENT_CLIENTS} clients, one conversation",
                   concurrent([shared]), "msg/s")  # fmt: skip
    results.figure(f"c: messages/s, {CONCURRENT_CLIENTS} clients, separate conversations",
                   concurrent(separate), "msg/s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = benchkit.arguments(__doc__).parse_args(argv)
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")  # in-memory layer
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        print(f"building the records in {tmp} …", flush=True)
        start = time.perf_counter()
        (big, small), token = benchkit.records(env, message_blocks, RECORD_MESSAGES, SMALL_MESSAGES)
        print(f"  built in {time.perf_counter() - start:.1f} s", flush=True)
        from django.db import connection

        connection.close()
        results = Results()
        bench_projection(results, big)
        with benchkit.daphne(env, tmp / "daphne.log") as server:
            bench_replay_over_http(results, server.url, token, big, small)
            bench_ingest(results, server.url, token)
        connection.close()
        return results.finish(began, args.json)


if __name__ == "__main__":
    sys.exit(main())
