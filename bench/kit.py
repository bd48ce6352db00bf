"""What the benchmarks share: the figure table, timing, records and throwaway servers.

bench/targets.py, bench/dashboard.py and bench/live.py each print figures
through `Results`, time work with `rounds`, store records with `build_conversation` (each
with its own message generator, so each keeps its record's shape) and run real daphne
processes with `daphne` on settings from `base_env`.
"""

from __future__ import annotations

import argparse
import base64
import functools
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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent

# --- the figures -------------------------------------------------------------------------


def number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


class Results:
    """Figures in print order; a target line says PASS or FAIL."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def figure(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.rows.append({"name": name, "value": value, "unit": unit, "note": note})
        print(f"  {name}: {number(value)} {unit} {note}".rstrip(), flush=True)

    def target(
        self, name: str, value: float, limit: float, unit: str, note: str = "", op: str = "≤"
    ) -> bool:
        passed = value <= limit if op == "≤" else value >= limit if op == "≥" else value == limit
        self.rows.append(
            {"name": name, "value": value, "unit": unit, "target": f"{op} {number(limit)}",
             "pass": passed, "note": note}
        )  # fmt: skip
        verdict = "PASS" if passed else "FAIL"
        print(
            f"  {name}: {number(value)} {unit} (target {op} {number(limit)}) {verdict} {note}"
            .rstrip(), flush=True,
        )  # fmt: skip
        return passed

    @property
    def failed(self) -> list[str]:
        return [r["name"] for r in self.rows if r.get("pass") is False]

    def table(self) -> str:
        width = max(len(r["name"]) for r in self.rows)
        cells = [(f"{number(r['value'])} {r['unit']}", r.get("target", "")) for r in self.rows]
        value_width = max(len(c[0]) for c in cells)
        target_width = max(8, *(len(c[1]) for c in cells))
        lines = [
            f"{'figure':<{width}}  {'value':>{value_width}}  {'target':>{target_width}}  result",
            "-" * (width + value_width + target_width + 12),
        ]
        for r, (value, target) in zip(self.rows, cells, strict=True):
            verdict = ("PASS" if r["pass"] else "FAIL") if "pass" in r else ""
            lines.append(
                f"{r['name']:<{width}}  {value:>{value_width}}  {target:>{target_width}}  "
                f"{verdict}".rstrip()
            )
        return "\n".join(lines)

    def finish(self, began: float, json_path: Path | None, **extra: Any) -> int:
        """Print the table and the verdict, write the JSON if asked; the exit status."""
        print()
        print(self.table())
        took = time.perf_counter() - began
        print(f"\n{len(self.failed)} target(s) missed; the bench took {took:.0f} s.", flush=True)
        if json_path:
            import orjson

            body = {"seconds": took, "figures": self.rows, **extra}
            json_path.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
        return 1 if self.failed else 0


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """A bench's command line: its docstring's first line, and --json."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    return parser


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


def alternating(
    pairs: int,
    a: Callable[[], object],
    b: Callable[[], object],
    settle: Callable[[], object] = lambda: None,
) -> list[tuple[float, float]]:
    """Seconds of `a` and of `b` in `pairs` rounds, in the order A B, B A, A B, … so that
    load that drifts during a round pair weighs on both alike; `settle` runs (untimed)
    after each, so that no work one leaves behind is timed in the next."""
    taken: list[tuple[float, float]] = []
    for n in range(pairs):
        times = {}
        for name, run in (("a", a), ("b", b)) if n % 2 == 0 else (("b", b), ("a", a)):
            start = time.perf_counter()
            run()
            times[name] = time.perf_counter() - start
            settle()
        taken.append((times["a"], times["b"]))
    return taken


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile), interpolated."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median of the round-by-round ratios: robust to load that changes between rounds."""
    return statistics.median(a / b for a, b in zip(numerator, denominator, strict=True))


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


# --- the records ---------------------------------------------------------------------------

# fmt: off
WORDS = [
    "the", "agent", "reads", "file", "config", "yaml", "and", "then", "calls", "search",
    "tool", "with", "query", "results", "were", "found", "in", "repository", "function",
    "returns", "value", "error", "because", "timeout", "retry", "request", "response", "model",
    "token", "context", "window", "user", "asked", "about", "deployment", "logs", "database",
    "migration", "failed", "succeeded", "pending", "check", "status", "update", "summary",
]
# fmt: on

Turn = Callable[[int, random.Random], tuple[str, list[Any]]]


def sentence(rng: random.Random, length: int, words: list[str] = WORDS) -> str:
    """Words drawn from `words` until there are at least `length` characters."""
    chosen: list[str] = []
    size = 0
    while size < length:
        chosen.append(rng.choice(words))
        size += len(chosen[-1]) + 1
    return " ".join(chosen).capitalize() + "."


@functools.cache
def png(color: tuple[int, int, int]) -> str:
    """A 16×12 PNG of one colour, base64-encoded."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 12), color).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def system_turn(rng: random.Random, words: list[str] = WORDS) -> tuple[str, list[Any]]:
    """The first message of every bench conversation: a system prompt of three blocks."""
    from conversations.record.schemas import TextIn

    return "system", [
        TextIn(type="text", text="You are a careful operations agent."),
        TextIn(type="text", text=sentence(rng, 400, words)),
        TextIn(type="text", text="Answer in English."),
    ]


def build_conversation(
    title: str, messages: int, turn: Turn, rng: random.Random | None = None
) -> Any:
    """Store a conversation of `turn(index, rng)` messages through the real services, 500
    messages per transaction; `rng` is seeded with the title unless given."""
    from django.db import transaction

    from conversations.record.services.appending import message_append
    from conversations.record.services.conversations import conversation_create

    if rng is None:
        rng = random.Random(title)
    conversation = conversation_create(title=title)
    for start in range(0, messages, 500):
        with transaction.atomic():
            for index in range(start, min(start + 500, messages)):
                role, blocks = turn(index, rng)
                message_append(conversation=conversation, role=role, blocks=blocks)
    conversation.refresh_from_db()
    return conversation


def records(env: dict[str, str], turn: Turn, *sizes: int) -> tuple[list[Any], str]:
    """Django in this process on `env`'s settings; a conversation of each size built with
    `turn` (titled "bench N messages", so seeded by its size), and an API token."""
    setup_django(env)
    from conversations.record.services.api_tokens import api_token_create

    conversations = [build_conversation(f"bench {n:,} messages", n, turn) for n in sizes]
    _, token = api_token_create(label="bench")
    return conversations, token


def operator_session(username: str) -> str:
    """A new operator's session id (with conversations.view_conversation)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    user = get_user_model().objects.create_user(username=username)
    user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


# --- the servers ---------------------------------------------------------------------------


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder, removed on exit (also on error)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def base_env(tmp: Path, database_url: str) -> dict[str, str]:
    """The deployment's settings (DEBUG off) on throwaway data and static folders."""
    env = dict(os.environ) | {
        "DJANGO_SETTINGS_MODULE": "replaysite.settings",
        "DATABASE_URL": database_url,
        "REPLAY_DATA_DIR": str(tmp / "data"),
        "REPLAY_STATIC_ROOT": str(tmp / "static"),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        "DJANGO_DEBUG": "0",
    }
    env.pop("REDIS_URL", None)  # the embedded default unless a bench says otherwise
    return env


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


def setup_django(env: dict[str, str]) -> None:
    """Django in this process, on the same settings as the servers."""
    os.environ.pop("REDIS_URL", None)
    os.environ.update(env)
    import django

    django.setup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daphne:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1)


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start: {log.read_text()[-3000:]}") from None
            time.sleep(0.1)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def daphne(env: dict[str, str], log: Path) -> Iterator[Daphne]:
    """One daphne on a free port, stopped on exit (also on error)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "replaysite.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_port(port, process, log, "daphne")
        yield Daphne(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop(process)


def postgres_database(prefix: str) -> str | None:
    """A new, empty PostgreSQL database's URL, or None when no server answers."""
    from tests.services import postgres_url

    url = postgres_url()
    if url is None:
        return None
    parsed = urlparse(url)
    name = f"{prefix}_{os.getpid()}"
    _psql(parsed._replace(path="/postgres").geturl(), f"CREATE DATABASE {name}")
    return parsed._replace(path=f"/{name}").geturl()


def drop_database(url: str) -> None:
    parsed = urlparse(url)
    _psql(parsed._replace(path="/postgres").geturl(),
          f"DROP DATABASE IF EXISTS {parsed.path.lstrip('/')} WITH (FORCE)")  # fmt: skip


def _psql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)  # type: ignore[arg-type]


def in_process(
    doc: str | None,
    argv: list[str] | None,
    prefix: str,
    measure: Callable[[str, Results], None],
    *,
    static: bool = False,
) -> int:
    """A bench measured in this process, on a throwaway SQLite database or (`--postgres`)
    PostgreSQL one, migrated (and its static files collected with `static`), then dropped."""
    parser = arguments(doc)
    parser.add_argument("--postgres", action="store_true",
                        help="on a throwaway PostgreSQL database (DATABASE_URL's server, "
                             "else the local one) instead of SQLite")  # fmt: skip
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with scratch(f"{prefix.replace('_', '-')}-") as tmp:
        url = postgres_database(prefix) if args.postgres else f"sqlite:///{tmp / 'bench.sqlite3'}"
        if url is None:
            print("PostgreSQL is not reachable", file=sys.stderr)
            return 1
        try:
            env = base_env(tmp, url)
            manage(env, "migrate", "--noinput", "-v", "0")
            if static:
                manage(env, "collectstatic", "--noinput", "-v", "0")
            setup_django(env)
            results = Results()
            measure("postgresql" if args.postgres else "sqlite", results)
            return results.finish(began, args.json)
        finally:
            if args.postgres:
                drop_database(url)
