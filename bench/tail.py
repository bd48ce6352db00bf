"""`manage.py tail` latency (issue 9): from a line's write to the frame at an open socket.

Run with `python -m bench.tail [--json PATH]`. A real daphne (DJANGO_DEBUG=0) and a
real `manage.py tail DIR` (polling every 0.25 s, its default) share a SQLite database and
a private redis-server (the channel layer that reaches across processes). A `websockets`
client signed in as an operator watches the session's conversation; this process writes
a real Claude Code session into the followed folder, one line every 0.3 s, noting when
each write returned. Latency = arrival of the first frame that carries the line's
position (message seq, block count) − the write. Target: p95 ≤ 1 s with polling.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bench import kit as benchkit
from bench.kit import Results, base_env, daphne, manage
from bench.live import redis_server

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"
SESSION = SOURCE / "claude_code_tool_heavy_parallel_interrupts.jsonl"
OPENING = 6  # lines written before the socket opens (the conversation must exist)
SPACING = 0.3  # seconds between two lines
INTERVAL = "0.25"  # the command's default poll
ARTICLE = re.compile(r'<article id="m-(\d+)"[^>]*? data-blocks="(\d+)"')
DELIVERY_WAIT = 10.0


@dataclass
class Frames:
    arrived: list[tuple[float, list[tuple[int, int]]]] = field(default_factory=list)
    error: str = ""

    def first_holding(self, key: tuple[int, int], after: float) -> float | None:
        seq, blocks = key
        for when, pairs in self.arrived:
            if when >= after and any(s == seq and b >= blocks for s, b in pairs):
                return when
        return None


def watch(url: str, headers: dict[str, str], frames: Frames, stop: threading.Event) -> None:
    try:
        with connect(url, additional_headers=headers, open_timeout=10, max_size=None) as ws:
            while not stop.is_set():
                try:
                    frame = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                pairs = [(int(s), int(b)) for s, b in ARTICLE.findall(str(frame))]
                frames.arrived.append((time.perf_counter(), pairs))
    except (OSError, ConnectionClosed) as exc:
        frames.error = f"{type(exc).__name__}: {exc}"


def positions(lines: list[bytes]) -> list[tuple[int, int] | None]:
    """After each line: (seq, blocks) of the message it grew, or None if it added none."""
    from conversations.core.importers import claude_code

    out: list[tuple[int, int] | None] = []
    previous: tuple[int, int] | None = None
    for count in range(1, len(lines) + 1):
        messages = claude_code.read(lines[:count]).messages
        now = (len(messages) - 1, len(messages[-1].blocks)) if messages else None
        out.append(now if now != previous else None)
        previous = now
    return out


def append(path: Path, line: bytes) -> float:
    with path.open("ab") as out:
        out.write(line)
        out.flush()
    return time.perf_counter()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run(results: Results) -> None:
    with benchkit.scratch("bench-tail-") as tmp, redis_server(tmp) as redis:
        env = base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}") | {"REDIS_URL": redis}
        manage(env, "migrate", "--noinput")
        benchkit.setup_django(env)
        from conversations.ingest.models import TailCursor

        session_id = benchkit.operator_session(f"bench-tail-{os.getpid()}")
        folder = tmp / "projects" / "-srv-app"
        folder.mkdir(parents=True)
        target = folder / "d6e0bada.jsonl"
        lines = SESSION.read_bytes().splitlines(keepends=True)
        expected = positions(lines)
        log = (tmp / "tail.log").open("wb")
        follower = subprocess.Popen(
            [sys.executable, "manage.py", "tail", str(folder.parent), "--interval", INTERVAL],
            cwd=benchkit.ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            with daphne(env, tmp / "daphne.log") as server:
                for line in lines[:OPENING]:
                    append(target, line)
                deadline = time.monotonic() + 30
                while (cursor := TailCursor.objects.first()) is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError((tmp / "tail.log").read_text()[-2000:])
                    time.sleep(0.1)
                url = f"{server.ws_url}/ws/conversations/{cursor.conversation_id}/?vision=1"
                frames = Frames()
                stop = threading.Event()
                headers = {"Cookie": f"sessionid={session_id}", "Origin": server.url}
                watcher = threading.Thread(target=watch, args=(url, headers, frames, stop))
                watcher.start()
                time.sleep(1.0)  # connected and joined
                writes: list[tuple[float, tuple[int, int]]] = []
                for line, position in zip(lines[OPENING:], expected[OPENING:], strict=True):
                    written = append(target, line)
                    if position is not None:
                        writes.append((written, position))
                    time.sleep(SPACING)
                time.sleep(DELIVERY_WAIT if writes and not _all_in(frames, writes) else 0.5)
                stop.set()
                watcher.join(5)
        finally:
            benchkit.stop(follower)
            log.close()
    latencies = []
    missed = 0
    for written, position in writes:
        arrived = frames.first_holding(position, written)
        if arrived is None:
            missed += 1
        else:
            latencies.append((arrived - written) * 1000)
    if frames.error:
        print(f"  the watcher's socket: {frames.error}")
    results.figure("tail: lines that grew the record", len(writes), "lines")
    results.target("tail: lines never seen at the socket", missed, 0, "lines")
    if latencies:
        results.figure("tail: latency median", statistics.median(latencies), "ms")
        results.target("tail: latency p95 (polling every 0.25 s)", percentile(latencies, 95),
                       1000, "ms")  # fmt: skip
        results.figure("tail: latency max", max(latencies), "ms")


def _all_in(frames: Frames, writes: list[tuple[float, tuple[int, int]]]) -> bool:
    return all(frames.first_holding(position, written) for written, position in writes)


def main(argv: list[str] | None = None) -> int:
    args = benchkit.arguments(__doc__).parse_args(argv)
    began = time.perf_counter()
    results = Results()
    print("manage.py tail: a line's write → the frame at an open socket")
    run(results)
    return results.finish(began, args.json, spacing_ms=SPACING * 1e3, interval_s=INTERVAL)


if __name__ == "__main__":
    sys.exit(main())
