"""The dashboard's performance targets (issue 3), on a throwaway database and a real daphne.

Run with `python -m tests.bench_dashboard [--json PATH]`. It prints each figure with its
target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) first load of /c/ID/ in headless Chromium (a fresh browser context per run, so an
   empty cache): time to the `load` event of a 10,000-message conversation vs a
   100-message one, and the size of each page (HTML bytes, DOM elements);
b) the server's time for the first page of the 10,000-message conversation next to
   GET /api/conversations/ID/replay of the same conversation, and the number of SQL
   queries of the page at 100 and at 10,000 messages.

The server runs as deployed (SPEC §5): DJANGO_DEBUG=0 after `collectstatic` into a
temporary STATIC_ROOT, so static files come from WhiteNoise with their hashed names.
The helpers at the top (Results, daphne) are shared with tests/bench_live.py.
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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"

BIG = 10_000
SMALL = 100
BROWSER_RUNS = 7
HTTP_RUNS = 9
LOAD_TARGET = 1.5  # the 10,000-message page loads in at most 1.5× the 100-message one
SIZE_TARGET = 1.5  # …and its HTML and DOM stay within 1.5× of it (bounded)


# --- shared with bench_live ------------------------------------------------------------


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
        print()
        print(self.table())
        took = time.perf_counter() - began
        print(f"\n{len(self.failed)} target(s) missed; the bench took {took:.0f} s.", flush=True)
        if json_path:
            import orjson

            body = {"seconds": took, "figures": self.rows, **extra}
            json_path.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2))
        return 1 if self.failed else 0


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


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


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


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def rounds(runs: int, work: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Seconds per call of each function, in interleaved rounds, so that drift in the
    machine's load hits every figure alike."""
    samples: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(runs):
        for name, run in work.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return samples


# --- the records -----------------------------------------------------------------------

# fmt: off
WORDS = [
    "the", "agent", "reads", "file", "config", "yaml", "and", "then", "calls", "search",
    "tool", "with", "query", "results", "were", "found", "in", "repository", "function",
    "returns", "value", "error", "because", "timeout", "retry", "request", "response",
    "deployment", "logs", "database", "migration", "failed", "succeeded", "status", "summary",
]
# fmt: on


def sentence(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        words.append(rng.choice(WORDS))
        size += len(words[-1]) + 1
    return " ".join(words).capitalize() + "."


def tiny_png() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (16, 12), (30, 120, 200)).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def turn(index: int, rng: random.Random, png: str) -> tuple[str, list[Any]]:
    """An agent turn of three blocks: assistants reason, answer and call a tool; users
    return the result (now and then an error, or a screenshot) and say something."""
    from conversations.schemas import ImageIn, ReasoningIn, TextIn, ToolResultIn, ToolUseIn

    call = f"call_{index // 2:05d}"
    if index == 0:
        return "system", [
            TextIn(type="text", text="You are a careful operations agent."),
            TextIn(type="text", text=sentence(rng, 400)),
            TextIn(type="text", text="Answer in English."),
        ]
    if index % 2 == 1:
        if index % 97 == 1:
            middle: Any = ImageIn(type="image", media_type="image/png", data=png)
        else:
            middle = ToolResultIn(
                type="tool_result", tool_use_id=call, name="search",
                content="\n".join(sentence(rng, 70) for _ in range(rng.randint(2, 20))),
                is_error=index % 23 == 0,
            )  # fmt: skip
        return "user", [
            TextIn(type="text", text=sentence(rng, rng.choice((20, 80, 300)))),
            middle,
            TextIn(type="text", text=sentence(rng, rng.choice((10, 60, 600)))),
        ]
    return "assistant", [
        ReasoningIn(type="reasoning", text=sentence(rng, rng.randint(80, 600))),
        TextIn(type="text", text=sentence(rng, rng.choice((40, 200, 900)))),
        ToolUseIn(
            type="tool_use", id=call, name="search",
            input={"query": sentence(rng, 30), "filters": {"paths": ["src/", "tests/"]},
                   "page": index},
        ),
    ]  # fmt: skip


def build_conversation(title: str, messages: int) -> Any:
    """Store a conversation through the real services, 500 messages per transaction."""
    from django.db import transaction

    from conversations import services

    rng = random.Random(title)
    png = tiny_png()
    conversation = services.conversation_create(title=title)
    for start in range(0, messages, 500):
        with transaction.atomic():
            for index in range(start, min(start + 500, messages)):
                role, blocks = turn(index, rng, png)
                services.message_append(conversation=conversation, role=role, blocks=blocks)
    conversation.refresh_from_db()
    return conversation


def operator_session() -> str:
    """A signed-in operator's session id (with conversations.view_conversation)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    user = get_user_model().objects.create_user(username=f"bench-{os.getpid()}")
    user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


# --- the measurements ------------------------------------------------------------------


def bench_server(
    results: Results, server: Daphne, session: str, token: str, big: Any, small: Any
) -> None:
    import httpx2 as httpx

    print(f"b) server time of /c/ID/ ({BIG:,} messages) next to …/replay, and SQL queries")
    page = f"/c/{big.pk}/"
    replay = f"/api/conversations/{big.pk}/replay"
    with httpx.Client(base_url=server.url, cookies={"sessionid": session}, timeout=120) as web:
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        )
        with api:
            for client, path in ((web, page), (web, f"/c/{small.pk}/"), (api, replay)):
                response = client.get(path)  # warm up, and check we are let in
                if response.status_code != 200:
                    raise RuntimeError(f"GET {path}: {response.status_code} {response.text[:300]}")
            samples = rounds(
                HTTP_RUNS,
                {
                    "page big": lambda: web.get(page).raise_for_status(),
                    "page small": lambda: web.get(f"/c/{small.pk}/").raise_for_status(),
                    "replay": lambda: api.get(replay).raise_for_status(),
                },
            )
            replay_size = len(api.get(replay).content)
    results.figure(f"b: GET /c/ID/, {BIG:,} messages (first page)", ms(samples["page big"]),
                   "ms", f"median of {HTTP_RUNS}")  # fmt: skip
    results.figure(f"b: GET /c/ID/, {SMALL} messages", ms(samples["page small"]), "ms",
                   f"median of {HTTP_RUNS}")  # fmt: skip
    results.figure(f"b: GET /api/conversations/ID/replay, {BIG:,} messages",
                   ms(samples["replay"]), "ms",
                   f"median of {HTTP_RUNS}; {replay_size / 1e6:.1f} MB")  # fmt: skip

    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    client.cookies["sessionid"] = session
    counts = {}
    for conversation, size in ((small, SMALL), (big, BIG)):
        path = f"/c/{conversation.pk}/"
        client.get(path)  # the session's first use is behind us
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path} in process: {response.status_code}")
        counts[size] = len(queries)
        results.figure(f"b: SQL queries of /c/ID/, {size:,} messages", len(queries), "queries")
    results.target(f"b: SQL queries at {BIG:,} minus at {SMALL}", counts[BIG] - counts[SMALL],
                   0, "queries", op="=")  # fmt: skip


LOAD_SCRIPT = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  return {
    load: nav.loadEventEnd, ttfb: nav.responseStart, dcl: nav.domContentLoadedEventEnd,
    html: nav.decodedBodySize, transfer: nav.transferSize,
    nodes: document.getElementsByTagName('*').length,
    articles: document.querySelectorAll('#messages > article').length,
  };
}"""


def bench_browser(results: Results, server: Daphne, session: str, big: Any, small: Any) -> None:
    from playwright.sync_api import sync_playwright

    print(f"a) first load of /c/ID/ in headless Chromium, {BIG:,} vs {SMALL} messages")
    host = server.url.split("//", 1)[1].split(":")[0]
    pages = {"big": f"{server.url}/c/{big.pk}/", "small": f"{server.url}/c/{small.pk}/"}
    seen: dict[str, list[dict[str, Any]]] = {"big": [], "small": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-background-networking"]
        )
        try:

            def first_load(url: str) -> dict[str, Any]:
                # A fresh context per load: empty cache, as an operator's first visit.
                context = browser.new_context(viewport={"width": 1400, "height": 1000})
                try:
                    context.add_cookies(
                        [{"name": "sessionid", "value": session, "domain": host, "path": "/"}]
                    )
                    page = context.new_page()
                    response = page.goto(url, wait_until="load")
                    if response is None or response.status != 200:
                        raise RuntimeError(f"{url}: {response and response.status}")
                    page.wait_for_function(
                        "performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
                    )
                    return dict(page.evaluate(LOAD_SCRIPT))
                finally:
                    context.close()

            for url in pages.values():
                first_load(url)  # warm up the server and the browser
            for _ in range(BROWSER_RUNS):
                for name, url in pages.items():
                    seen[name].append(first_load(url))
        finally:
            browser.close()

    def median(name: str, key: str) -> float:
        return float(statistics.median(run[key] for run in seen[name]))

    for name, size in (("small", SMALL), ("big", BIG)):
        runs = seen[name]
        results.figure(f"a: load event, {size:,} messages", median(name, "load"), "ms",
                       f"median of {len(runs)}; first byte {median(name, 'ttfb'):.0f} ms, "
                       f"DOMContentLoaded {median(name, 'dcl'):.0f} ms")  # fmt: skip
        results.figure(f"a: HTML, {size:,} messages", runs[0]["html"] / 1024, "KB",
                       f"{runs[0]['transfer'] / 1024:.1f} KB on the wire")  # fmt: skip
        results.figure(f"a: DOM elements, {size:,} messages", int(runs[0]["nodes"]), "elements",
                       f"{runs[0]['articles']} messages rendered")  # fmt: skip
    paired = statistics.median(
        b["load"] / s["load"] for b, s in zip(seen["big"], seen["small"], strict=True)
    )
    results.target(f"a: load {BIG:,} / load {SMALL}", median("big", "load") /
                   median("small", "load"), LOAD_TARGET, "×",
                   f"(round-by-round median {paired:.2f}×)")  # fmt: skip
    results.target(f"a: HTML {BIG:,} / HTML {SMALL}", seen["big"][0]["html"] /
                   seen["small"][0]["html"], SIZE_TARGET, "×", "bounded")  # fmt: skip
    results.target(f"a: DOM {BIG:,} / DOM {SMALL}", seen["big"][0]["nodes"] /
                   seen["small"][0]["nodes"], SIZE_TARGET, "×", "bounded")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here as JSON")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="replay-bench-dashboard-"))
    try:
        env = base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        print("DJANGO_DEBUG=0 (as deployed): migrate and collectstatic into a temporary "
              "STATIC_ROOT", flush=True)  # fmt: skip
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "collectstatic", "--noinput", "-v", "0")
        os.environ.pop("REDIS_URL", None)
        os.environ.update(env)
        import django

        django.setup()
        from django.db import connection

        from conversations import services

        print(f"building a {BIG:,}- and a {SMALL}-message conversation …", flush=True)
        start = time.perf_counter()
        big = build_conversation(f"bench {BIG:,} messages", BIG)
        small = build_conversation(f"bench {SMALL} messages", SMALL)
        _, token = services.api_token_create(label="bench")
        session = operator_session()
        print(f"  built in {time.perf_counter() - start:.1f} s (3 blocks per message)",
              flush=True)  # fmt: skip
        connection.close()

        results = Results()
        with daphne(env, tmp / "daphne.log") as server:
            bench_server(results, server, session, token, big, small)
            connection.close()  # Playwright's loop must not meet an open ORM connection
            bench_browser(results, server, session, big, small)
        return results.finish(began, args.json, debug=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
