"""Live updates' performance targets (issues 4 and 17): from the API's 201 to the frame at
the client.

Run with `python -m bench.live [--json PATH]`. Real daphne processes (DJANGO_DEBUG=0)
and many `websockets` asyncio clients in this one process, each signed in with an
operator's session cookie and the server's own Origin, watching
/ws/conversations/ID/?vision=1&shape=openai and sending, as the page does, its resume
report (the conversation's tail) when the socket opens. A poster thread in the same process is an
agent: it appends through the JSON API at most 20 times a second (a message or a block
every 50 ms; 10 a second for the 1,000 watchers), and each post waits until the agent's
own socket (the first watcher) holds the previous post's frame. It notes when each 201
returns; each watcher notes when each frame arrives and which (message seq, block count)
it carries. Both use time.perf_counter, one clock. Latency = frame arrival − 201.

1) 100 watchers, one process, in-memory layer (SQLite): p99 ≤ 100 ms, every frame
   delivered to every watcher;
2) 1,000 watchers, one process: p95 ≤ 250 ms, every frame delivered; the server's memory
   per socket (VmRSS before connecting vs after all connected);
3) 100 watchers over two processes on Redis (a private redis-server) and PostgreSQL (a
   fresh database, dropped at the end), posts through process A: p99 ≤ 150 ms.

(Ingest with 100 open sockets against ingest with none, ≥ 0.9×, is in bench/ingest.py.)

An event "reached" a watcher when a frame carried its position (message seq, block
count) or a later position of the same message (a fragment rendered after the next block
was stored, or a resync); the latency is that frame's. How many came with exactly their
own position, and how many frames repeated a position, are reported beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.exceptions import WebSocketException

from bench import kit as benchkit
from bench.dashboard import turn
from bench.kit import Daphne, Results, base_env, daphne, manage

POSTS = 60
SPACING = 0.05  # seconds at least between the starts of two posts: 20 a second
SLOWER = 0.1  # …and 10 a second for the 1,000 watchers (issue 4's pace)
FRAME_WAIT = 10.0  # seconds a post waits at most for the previous post's frame
CONNECT_CONCURRENCY = 10  # daphne drops a handshake that takes over 5 s (its default)
CONNECT_RETRIES = 8
DELIVERY_WAIT = 20.0  # seconds after the last 201 for every frame to arrive
POSTGRES = "postgres://127.0.0.1:5432"
# One operator's session watches with every socket here: lift the per-user cap (default 50).
UNCAPPED = {"REPLAY_MAX_SOCKETS_PER_USER": "100000"}
ARTICLE = re.compile(r'<article id="m-(\d+)"[^>]*? data-blocks="(\d+)"')


# --- the record and the accounts (in a subprocess, on the server's database) -------------


def provision(conversations: int) -> None:
    """Print as JSON: an operator's session id, an API token, and conversation ids that
    each hold a few realistic messages."""
    import random

    import django

    django.setup()
    from conversations.record.services.api_tokens import api_token_create

    session = benchkit.operator_session(f"bench-live-{os.getpid()}")
    _, token = api_token_create(label="bench-live")
    rng = random.Random(1)  # one sequence across the conversations
    ids = [
        str(benchkit.build_conversation(f"bench live {n}", 10, turn, rng).id)
        for n in range(conversations)
    ]
    print(json.dumps({"session": session, "token": token, "conversations": ids}))


@dataclass
class Accounts:
    session: str
    token: str
    conversations: list[str]


def provisioned(env: dict[str, str], conversations: int) -> Accounts:
    done = subprocess.run(
        [sys.executable, "-m", "bench.live", "--provision", str(conversations)],
        cwd=benchkit.ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Accounts(data["session"], data["token"], data["conversations"])


# --- the poster --------------------------------------------------------------------------


@dataclass(frozen=True)
class Posted:
    key: tuple[int, int]  # (message seq, block count) after this post
    sent: float
    answered: float  # when the 201 came back


def post_events(
    url: str,
    token: str,
    conversation_id: str,
    posts: int,
    agent: Watcher | None = None,
    spacing: float = SPACING,
) -> list[Posted]:
    """An agent's turns through the API, at most one post every `spacing` seconds, each
    after `agent` (its own socket) holds the previous post's frame: an assistant message
    (reasoning) then its text and tool call as blocks, a user message (the tool's result)
    then a text block."""
    import httpx2 as httpx

    base = f"/api/conversations/{conversation_id}/messages"
    posted: list[Posted] = []
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:
        client.get(f"/api/conversations/{conversation_id}/replay").raise_for_status()
        message = 0
        next_at = time.perf_counter()
        for i in range(posts):
            if agent is not None and posted:
                agent.wait_for(posted[-1].key, FRAME_WAIT)
            time.sleep(max(0.0, next_at - time.perf_counter()))
            next_at = time.perf_counter() + spacing
            call = f"call_bench_{i // 5}"
            kind = i % 5
            if kind in (0, 3):
                path = base
                body: dict[str, Any] = (
                    {"role": "assistant",
                     "blocks": [{"type": "reasoning", "text": f"Step {i}: look it up first."}]}
                    if kind == 0 else
                    {"role": "user",
                     "blocks": [{"type": "tool_result", "tool_use_id": call,
                                 "content": "3 matches\nsrc/app.py:12\nsrc/db.py:40"}]}
                )  # fmt: skip
            else:
                path = f"{base}/{message}/blocks"
                body = (
                    {"type": "text", "text": f"Searching the repository (post {i})."}
                    if kind != 2 else
                    {"type": "tool_use", "id": call, "name": "search",
                     "input": {"query": "timeout", "paths": ["src/"]}}
                )  # fmt: skip
            sent = time.perf_counter()
            response = client.post(path, json=body)
            answered = time.perf_counter()
            if response.status_code != 201:
                raise RuntimeError(f"POST {path}: {response.status_code} {response.text[:300]}")
            data = response.json()
            if path == base:
                message = int(data["seq"])
                key = (message, int(data["block_count"]))
            else:
                key = (int(data["message_seq"]), int(data["seq"]) + 1)
            posted.append(Posted(key, sent, answered))
    return posted


# --- the watchers ------------------------------------------------------------------------


@dataclass
class Watcher:
    server: Daphne
    conversation_id: str
    frames: list[tuple[float, list[tuple[str, str]]]] = field(default_factory=list)
    connected: float = 0.0
    retries: int = 0
    error: str = ""
    latest: dict[int, int] = field(default_factory=dict)  # message seq → most blocks seen

    @property
    def url(self) -> str:
        path = f"/ws/conversations/{self.conversation_id}/?vision=1&shape=openai&report=1"
        return self.server.ws_url + path

    def holds(self, key: tuple[int, int]) -> bool:
        wanted = (str(key[0]), str(key[1]))
        return any(wanted in pairs for _, pairs in self.frames)

    def arrived(self, at: float, pairs: list[tuple[str, str]]) -> None:
        self.frames.append((at, pairs))
        for seq, blocks in pairs:
            self.latest[int(seq)] = max(self.latest.get(int(seq), 0), int(blocks))

    def wait_for(self, key: tuple[int, int], timeout: float) -> None:
        """(From the poster's thread) until this watcher holds `key` or a later position of
        that message; a frame that never comes is a finding, so the poster goes on."""
        deadline = time.perf_counter() + timeout
        while self.latest.get(key[0], -1) < key[1] and time.perf_counter() < deadline:
            time.sleep(0.0005)


def resume_report(url: str, token: str, conversation_id: str) -> str:
    """What a page showing the conversation's tail reports when its socket opens (its URL
    says `report=1`, as the page's does: its changes wait for the report)."""
    import httpx2 as httpx

    response = httpx.get(f"{url}/api/conversations/{conversation_id}",
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
    response.raise_for_status()
    messages = response.json()["messages"][-300:]
    counts = [len(m["blocks"]) for m in messages]
    start = int(messages[0]["seq"]) if messages else 0
    return json.dumps({"type": "resume", "from": start, "counts": counts, "tail": True})


async def watch(
    watcher: Watcher, session: str, gate: asyncio.Semaphore, ready: Any, report: str
) -> None:
    """Connect (at most CONNECT_CONCURRENCY handshakes at a time, retrying a refused or
    timed-out handshake with backoff as the page does), send the page's resume report,
    then note every frame's arrival until the task is cancelled."""
    from websockets.asyncio.client import connect

    headers = {"Cookie": f"sessionid={session}", "Origin": watcher.server.url}
    delay = 0.2
    while True:
        try:
            async with gate:
                ws = await connect(
                    watcher.url, additional_headers=headers, open_timeout=30,
                    ping_interval=None, max_size=None, close_timeout=2,
                )  # fmt: skip
            break
        except (OSError, TimeoutError, WebSocketException) as exc:
            watcher.retries += 1
            if watcher.retries > CONNECT_RETRIES:
                watcher.error = f"{type(exc).__name__}: {exc}"
                ready()
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 3.0)
    await ws.send(report)
    watcher.connected = time.perf_counter()
    ready()
    try:
        async with ws:
            async for frame in ws:
                watcher.arrived(time.perf_counter(), ARTICLE.findall(str(frame)))
    except WebSocketException as exc:  # a dropped socket is a finding, not a crash
        watcher.error = f"{type(exc).__name__}: {exc}"


async def connect_all(watchers: list[Watcher], accounts: Accounts) -> list[asyncio.Task[None]]:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    left = len(watchers)
    all_in = asyncio.Event()

    def ready() -> None:
        nonlocal left
        left -= 1
        if left == 0:
            all_in.set()

    first = watchers[0]
    report = await asyncio.to_thread(
        resume_report, first.server.url, accounts.token, first.conversation_id
    )
    tasks = [asyncio.create_task(watch(w, accounts.session, gate, ready, report)) for w in watchers]
    await asyncio.wait_for(all_in.wait(), 180)
    # A socket closed by the server after its handshake is counted as dropped, later.
    errors = [w.error for w in watchers if w.error and not w.connected]
    if errors:
        raise RuntimeError(f"{len(errors)} socket(s) failed to connect, e.g. {errors[0]}")
    return tasks


async def close_all(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def wait_delivered(watchers: list[Watcher], last: tuple[int, int]) -> None:
    deadline = time.perf_counter() + DELIVERY_WAIT
    while time.perf_counter() < deadline:
        if all(w.holds(last) for w in watchers):
            return
        await asyncio.sleep(0.05)


async def warm_up(servers: list[Daphne], post_to: Daphne, accounts: Accounts) -> None:
    """One event end to end on every process, so templates and code paths are loaded."""
    conversation = accounts.conversations[0]
    watchers = [Watcher(server, conversation) for server in servers]
    tasks = await connect_all(watchers, accounts)
    posted = await asyncio.to_thread(
        post_events, post_to.url, accounts.token, conversation, 2, watchers[0]
    )
    await wait_delivered(watchers, posted[-1].key)
    await close_all(tasks)


# --- the figures -------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


@dataclass
class Outcome:
    latencies: list[float]  # ms, frame arrival − 201, one per (watcher, event) covered
    from_sent: list[float]  # ms, frame arrival − the POST's start
    expected: int
    delivered: int  # a frame with exactly the event's position
    covered: int  # delivered, or a later position of that message came
    duplicates: int
    by_server: dict[str, list[float]]


def outcome(watchers: list[Watcher], posted: list[Posted]) -> Outcome:
    latencies, from_sent = [], []
    by_server: dict[str, list[float]] = {}
    delivered = covered = duplicates = 0
    for w in watchers:
        first: dict[tuple[int, int], float] = {}
        for arrived, pairs in w.frames:
            for seq, blocks in pairs:
                key = (int(seq), int(blocks))
                if key in first:
                    duplicates += 1
                else:
                    first[key] = arrived
        for event in posted:
            seq, blocks = event.key
            arrived_at = first.get(event.key)
            if arrived_at is not None:
                delivered += 1
            else:
                later = [t for (s, n), t in first.items() if s == seq and n > blocks]
                arrived_at = min(later) if later else None
            if arrived_at is None:
                continue
            covered += 1
            latency = (arrived_at - event.answered) * 1e3
            latencies.append(latency)
            from_sent.append((arrived_at - event.sent) * 1e3)
            by_server.setdefault(w.server.url, []).append(latency)
    expected = len(watchers) * len(posted)
    return Outcome(latencies, from_sent, expected, delivered, covered, duplicates, by_server)


def report(
    results: Results, label: str, done: Outcome, posted: list[Posted], target: tuple[int, float]
) -> None:
    lat = done.latencies or [float("nan")]
    p, limit = target
    post_ms = statistics.median((e.answered - e.sent) * 1e3 for e in posted)
    results.figure(f"{label}: POST → 201", post_ms, "ms", f"median of {len(posted)} posts")
    for q in (50, 95, 99):
        if q == p:
            results.target(f"{label}: latency p{q}", percentile(lat, q), limit, "ms",
                           "201 → frame")  # fmt: skip
        else:
            results.figure(f"{label}: latency p{q}", percentile(lat, q), "ms", "201 → frame")
    results.figure(f"{label}: latency max", max(lat), "ms", "201 → frame")
    results.figure(f"{label}: latency p{p} from the POST's start",
                   percentile(done.from_sent or [float("nan")], p), "ms")  # fmt: skip
    results.target(f"{label}: events that reached every watcher", done.covered, done.expected,
                   "of (watcher, event)", "within 20 s of the last 201", op="=")  # fmt: skip
    results.figure(f"{label}: …of them in a frame of exactly their position", done.delivered,
                   "", "the rest came in a newer rendering of the same message")  # fmt: skip
    results.figure(f"{label}: duplicate frames", done.duplicates, "",
                   "a position a watcher had already received")  # fmt: skip


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def open_files_limit(pid: int) -> tuple[int, str]:
    """The process's soft and hard RLIMIT_NOFILE, from /proc."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), hard
    raise RuntimeError(f"no open-files limit for {pid}")


# --- the scenarios ---------------------------------------------------------------------


async def scenario(
    results: Results,
    label: str,
    servers: list[Daphne],
    watchers_each: int,
    post_to: Daphne,
    accounts: Accounts,
    conversation: str,
    target: tuple[int, float],
    memory: bool = False,
    spacing: float = SPACING,
) -> None:
    total = watchers_each * len(servers)
    print(f"{label}: {total:,} watchers on {len(servers)} process(es), {POSTS} posts "
          f"at least {spacing * 1e3:.0f} ms apart, each after the agent's socket holds the "
          "previous one", flush=True)  # fmt: skip
    await warm_up(servers, post_to, accounts)
    before = {s.url: rss_kb(s.process.pid) for s in servers}
    watchers = [Watcher(s, conversation) for s in servers for _ in range(watchers_each)]
    start = time.perf_counter()
    tasks = await connect_all(watchers, accounts)
    try:
        retries = sum(w.retries for w in watchers)
        note = f"{CONNECT_CONCURRENCY} handshakes at a time; {retries} retried"
        took = time.perf_counter() - start
        results.figure(f"{label}: time to connect {total:,} sockets", took, "s", note)
        if memory:
            await asyncio.sleep(1.0)
            (server,) = servers
            after = rss_kb(server.process.pid)
            grown = after - before[server.url]
            results.figure(f"{label}: daphne VmRSS before sockets", before[server.url] / 1024,
                           "MB")  # fmt: skip
            results.figure(f"{label}: daphne VmRSS with {total:,} sockets", after / 1024, "MB")
            results.figure(f"{label}: server memory per socket", grown / total, "KB")
            soft, hard = open_files_limit(server.process.pid)
            results.figure(f"{label}: daphne's own open-files limit", soft, "files",
                           f"soft (hard {hard}); inherited from this client")  # fmt: skip
        posted = await asyncio.to_thread(
            post_events, post_to.url, accounts.token, conversation, POSTS, watchers[0], spacing
        )
        await wait_delivered(watchers, posted[-1].key)
    finally:
        await close_all(tasks)
    done = outcome(watchers, posted)
    report(results, label, done, posted, target)
    dropped = [w.error for w in watchers if w.error]
    results.target(f"{label}: sockets dropped", len(dropped), 0, "sockets",
                   dropped[0] if dropped else "", op="=")  # fmt: skip
    # events.publish gives up after REPLAY_BROADCAST_TIMEOUT_MS and logs it: those
    # watchers only catch up through a gap resync or the periodic refresh.
    logged = sum(s.log.read_text(errors="replace").count("could not publish") for s in servers)
    results.figure(f"{label}: broadcasts that timed out", logged, "events",
                   "'could not publish' in the daphne logs")  # fmt: skip
    if len(servers) > 1:
        for name, server in zip("AB", servers, strict=False):
            lat = done.by_server.get(server.url, [float("nan")])
            results.figure(f"{label}: latency p{target[0]}, watchers on process {name}",
                           percentile(lat, target[0]), "ms")  # fmt: skip
    if memory:
        results.figure(f"{label}: daphne VmRSS after the posts",
                       rss_kb(servers[0].process.pid) / 1024, "MB")  # fmt: skip


@contextmanager
def redis_server(tmp: Path) -> Iterator[str]:
    """A private redis-server on a free port: no persistence, stopped on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    port = benchkit.free_port()
    log = tmp / "redis.log"
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp),
         "--save", "", "--appendonly", "no", "--logfile", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        benchkit.wait_for_port(port, process, log, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        benchkit.stop(process)


@contextmanager
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this run, dropped on exit."""
    import psycopg

    name = f"replay_bench_{os.getpid()}"
    admin = psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=5)
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{POSTGRES}/{name}"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


async def guarded(results: Results, label: str, servers: list[Daphne], **kwargs: Any) -> None:
    """A scenario that breaks is a missed target, with the servers' errors shown."""
    try:
        await scenario(results, label, servers, **kwargs)
    except Exception as exc:
        results.target(f"{label}: completed", 0, 1, "", f"{type(exc).__name__}: {exc}", op="=")
        for server in servers:
            lines = server.log.read_text(errors="replace").splitlines()
            print(f"--- the end of {server.log.name}:", *lines[-40:], sep="\n", flush=True)


async def run(results: Results, tmp: Path, scenarios: set[int]) -> None:
    if scenarios & {1, 2}:
        sqlite = base_env(tmp, f"sqlite:///{tmp / 'live.sqlite3'}") | UNCAPPED
        manage(sqlite, "migrate", "--noinput", "-v", "0")
        accounts = provisioned(sqlite, 3)
    if 1 in scenarios:
        with daphne(sqlite, tmp / "daphne-1.log") as server:
            await guarded(results, "1) 100 watchers, one process", [server], watchers_each=100,
                          post_to=server, accounts=accounts,
                          conversation=accounts.conversations[1], target=(99, 100.0))  # fmt: skip
    if 2 in scenarios:
        with daphne(sqlite, tmp / "daphne-2.log") as server:
            await guarded(results, "2) 1,000 watchers, one process", [server],
                          watchers_each=1000, post_to=server, accounts=accounts,
                          conversation=accounts.conversations[2], target=(95, 250.0),
                          memory=True, spacing=SLOWER)  # fmt: skip
    if 3 in scenarios:
        with ExitStack() as stack:
            redis = stack.enter_context(redis_server(tmp))
            database = stack.enter_context(postgres_database())
            env = base_env(tmp, database) | {"REDIS_URL": redis} | UNCAPPED
            manage(env, "migrate", "--noinput", "-v", "0")
            accounts = provisioned(env, 2)
            a = stack.enter_context(daphne(env, tmp / "daphne-a.log"))
            b = stack.enter_context(daphne(env, tmp / "daphne-b.log"))
            await guarded(results, "3) 100 watchers, two processes on Redis", [a, b],
                          watchers_each=50, post_to=a, accounts=accounts,
                          conversation=accounts.conversations[1], target=(99, 150.0))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--scenarios", default="1,2,3", help="which to run (default 1,2,3)")
    parser.add_argument("--provision", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.provision:
        provision(args.provision)
        return 0
    began = time.perf_counter()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, 65_536) if hard != resource.RLIM_INFINITY else 65_536
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    print(f"open-files limit of this client (and the daphnes it starts): {limit:,}; "
          "DJANGO_DEBUG=0", flush=True)  # fmt: skip
    sys.setswitchinterval(0.001)  # the poster thread notes each 201 without waiting long
    results = Results()
    with benchkit.scratch("replay-bench-live-") as tmp:
        results.figure("machine load average (1 min) at the start", os.getloadavg()[0], "",
                       f"on {os.cpu_count()} cores")  # fmt: skip
        chosen = {int(n) for n in args.scenarios.split(",")}
        asyncio.run(run(results, tmp, chosen))
        results.figure("machine load average (1 min) at the end", os.getloadavg()[0], "")
    return results.finish(began, args.json, posts=POSTS, spacing_ms=SPACING * 1e3)


if __name__ == "__main__":
    sys.exit(main())
