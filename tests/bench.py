"""Replay's performance targets, measured on a throwaway database and a real daphne.

Run with `make bench` (or `python -m tests.bench [--json PATH]`). It prints each figure
with its target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) the pure projection of a 30,000-block record vs orjson.dumps of its plain data;
b) GET …/replay vs GET … of a 10,000-message conversation over daphne, and the
   number of SQL queries each takes at 100 and 10,000 messages;
c) ingest: a two-block message POST vs a trivial authenticated GET, and messages
   per second for 1 and 8 concurrent clients.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

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

# fmt: off
WORDS = [
    "the", "agent", "reads", "file", "config", "yaml", "and", "then", "calls", "search",
    "tool", "with", "query", "results", "were", "found", "in", "repository", "function",
    "returns", "value", "error", "because", "timeout", "retry", "request", "response", "model",
    "token", "context", "window", "user", "asked", "about", "deployment", "logs", "database",
    "migration", "failed", "succeeded", "pending", "check", "status", "update", "summary",
]
# fmt: on


class Results:
    """Figures in print order; each target line says PASS or FAIL."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def figure(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.rows.append({"name": name, "value": value, "unit": unit, "note": note})
        print(f"  {name}: {value:,.2f} {unit} {note}".rstrip(), flush=True)

    def target(self, name: str, value: float, limit: float, note: str = "") -> None:
        passed = value <= limit
        self.rows.append(
            {"name": name, "value": value, "unit": "×", "target": limit, "pass": passed,
             "note": note}
        )  # fmt: skip
        verdict = "PASS" if passed else "FAIL"
        print(f"  {name}: {value:.2f}× (target ≤ {limit}×) {verdict} {note}".rstrip(), flush=True)

    @property
    def failed(self) -> list[str]:
        return [r["name"] for r in self.rows if r.get("pass") is False]

    def table(self) -> str:
        width = max(len(r["name"]) for r in self.rows)
        lines = [f"{'figure':<{width}}  {'value':>14}  {'target':>8}  result", "-" * (width + 36)]
        for r in self.rows:
            value = f"{r['value']:,.2f} {r['unit']}"
            target = f"≤ {r['target']}×" if "target" in r else ""
            verdict = ("PASS" if r["pass"] else "FAIL") if "pass" in r else ""
            lines.append(f"{r['name']:<{width}}  {value:>14}  {target:>8}  {verdict}")
        return "\n".join(lines)


def rounds(runs: int, work: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Seconds per call of each function, run in interleaved rounds so that drift in the
    machine's load (other processes on the same cores) hits every figure alike."""
    samples: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(runs):
        for name, run in work.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return samples


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median of the round-by-round ratios: robust to load that changes between rounds."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


# --- the record ----------------------------------------------------------------------


def sentence(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words).capitalize() + "."


def small_pngs() -> list[str]:
    from PIL import Image

    images = []
    for color in ((200, 30, 30), (30, 200, 30), (30, 30, 200)):
        buffer = io.BytesIO()
        Image.new("RGB", (16, 12), color).save(buffer, "PNG")
        images.append(base64.b64encode(buffer.getvalue()).decode())
    return images


def message_blocks(index: int, rng: random.Random, images: list[str]) -> tuple[str, list[Any]]:
    """A realistic agent turn: users ask and return tool results, assistants reason,
    answer and call tools; a few user messages carry a small image. Three blocks each."""
    from conversations.schemas import ImageIn, ReasoningIn, TextIn, ToolResultIn, ToolUseIn

    call = f"call_{index // 2:05d}"
    if index == 0:
        return "system", [
            TextIn(type="text", text="You are a careful operations agent."),
            TextIn(type="text", text=sentence(rng, 400)),
            TextIn(type="text", text="Answer in English."),
        ]
    if index % 2 == 1:
        blocks: list[Any] = [TextIn(type="text", text=sentence(rng, rng.choice((20, 80, 300))))]
        if index % 97 == 1:
            blocks.append(ImageIn(type="image", media_type="image/png", data=images[index % 3]))
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


def build_conversation(title: str, messages: int) -> Any:
    """Store a conversation through the real services, in batches of one transaction."""
    from django.db import transaction

    from conversations import services

    rng = random.Random(title)
    images = small_pngs()
    conversation = services.conversation_create(title=title)
    for start in range(0, messages, 500):
        with transaction.atomic():
            for index in range(start, min(start + 500, messages)):
                role, blocks = message_blocks(index, rng, images)
                services.message_append(conversation=conversation, role=role, blocks=blocks)
    return conversation


# --- the server ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def daphne(env: dict[str, str], log: Path) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "replaysite.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited: {log.read_text()}")
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daphne did not start: {log.read_text()}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- the measurements ----------------------------------------------------------------


def bench_projection(results: Results, conversation: Any) -> None:
    import orjson

    from conversations import replay, selectors

    print("a) projection of the 30,000-block record vs orjson.dumps of its plain data")
    plain = selectors.record_data(conversation, url="http://127.0.0.1/c/x/")
    stored = selectors.stored_messages(selectors.message_rows(conversation))
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
                       PROJECTION_TARGET)  # fmt: skip


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
    results.target(
        "b: replay / record", paired_ratio(samples["replay"], samples["record"]), REPLAY_TARGET
    )

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
                       INGEST_TARGET)  # fmt: skip

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-"))
    try:
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "replaysite.settings",
            "DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite3'}",
            "REPLAY_DATA_DIR": str(tmp),
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
            "DJANGO_DEBUG": "0",
        }
        env.pop("REDIS_URL", None)  # the embedded default: in-memory channel layer
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env=env, check=True,
        )  # fmt: skip
        os.environ.pop("REDIS_URL", None)
        os.environ.update(env)
        import django

        django.setup()
        from django.db import connection

        from conversations import services

        print(f"building the records in {tmp} …", flush=True)
        start = time.perf_counter()
        big = build_conversation("bench 10,000 messages", RECORD_MESSAGES)
        small = build_conversation("bench 100 messages", SMALL_MESSAGES)
        _, token = services.api_token_create(label="bench")
        print(f"  built in {time.perf_counter() - start:.1f} s", flush=True)
        connection.close()

        results = Results()
        bench_projection(results, big)
        with daphne(env, tmp / "daphne.log") as url:
            bench_replay_over_http(results, url, token, big, small)
            bench_ingest(results, url, token)
        connection.close()

        print()
        print(results.table())
        took = time.perf_counter() - began
        print(f"\n{len(results.failed)} target(s) missed; the bench took {took:.0f} s.")
        if args.json:
            import orjson

            args.json.write_bytes(
                orjson.dumps({"seconds": took, "figures": results.rows}, option=orjson.OPT_INDENT_2)
            )
        return 1 if results.failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
