"""The dashboard's performance targets (issue 3), on a throwaway database and a real daphne.

Run with `python -m bench.dashboard [--json PATH]`. It prints each figure with its
target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) first load of /c/ID/ in headless Chromium (a fresh browser context per run, so an
   empty cache): time to the `load` event of a 10,000-message conversation vs a
   100-message one, and the size of each page (HTML bytes, DOM elements);
b) the server's time for the first page of the 10,000-message conversation next to
   GET /api/conversations/ID/replay of the same conversation, and the number of SQL
   queries of the page at 100 and at 10,000 messages; the page's server time at 10,000
   messages within 1.2× of it at 100 (docs/contract.md §4 Bounds: nothing on the page is O(N));
c) bounds (issue 7 finding 10): the daphne process's peak RSS (VmHWM, reset before each
   page) and the page size for a conversation of one 10 MB message and for one of
   60 × 10 MB messages; the target (issue 17 §3) is the peak's growth over what the
   process held before the page, which in a whole run includes parts a and b's caches.

`--only server|browser|bounds` runs one part.

The server runs as deployed (docs/contract.md §5): DJANGO_DEBUG=0 after `collectstatic` into a
temporary STATIC_ROOT, so static files come from WhiteNoise with their hashed names.
Its message generator, `turn`, also fills bench/live.py's conversations.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from typing import Any

from bench import kit as benchkit
from bench.kit import Daphne, Results, ms, rounds, sentence

CHROMIUM = "/usr/bin/chromium"

BIG = 10_000
SMALL = 100
BROWSER_RUNS = 7
HTTP_RUNS = 9
LOAD_TARGET = 1.5  # the 10,000-message page loads in at most 1.5× the 100-message one
SIZE_TARGET = 1.5  # …and its HTML and DOM stay within 1.5× of it (bounded)
SERVER_TARGET = 1.2  # the page's server time at 10,000 messages vs at 100
HUGE = 10 * 1024 * 1024  # characters of each huge message
HUGE_RUNS = 3
RSS_TARGET = 300  # MB: the server's peak growth while it serves the 60 × 10 MB page
PAGE_BYTES_TARGET = 16  # MB: that page's HTML (60 messages, each side of each ≤ 96 KB)


# --- the records -----------------------------------------------------------------------

# The dashboard's records draw from 35 of the shared 45 words.
WORDS = [
    word for word in benchkit.WORDS
    if word not in {"model", "token", "context", "window", "user", "asked", "about", "pending",
                    "check", "update"}
]  # fmt: skip
SCREENSHOT = (30, 120, 200)


def turn(index: int, rng: random.Random) -> tuple[str, list[Any]]:
    """An agent turn of three blocks: assistants reason, answer and call a tool; users
    return the result (now and then an error, or a screenshot) and say something."""
    from conversations.record.schemas import ImageIn, ReasoningIn, TextIn, ToolResultIn, ToolUseIn

    call = f"call_{index // 2:05d}"
    if index == 0:
        return benchkit.system_turn(rng, WORDS)
    if index % 2 == 1:
        if index % 97 == 1:
            middle: Any = ImageIn(
                type="image", media_type="image/png", data=benchkit.png(SCREENSHOT)
            )
        else:
            middle = ToolResultIn(
                type="tool_result", tool_use_id=call, name="search",
                content="\n".join(sentence(rng, 70, WORDS) for _ in range(rng.randint(2, 20))),
                is_error=index % 23 == 0,
            )  # fmt: skip
        return "user", [
            TextIn(type="text", text=sentence(rng, rng.choice((20, 80, 300)), WORDS)),
            middle,
            TextIn(type="text", text=sentence(rng, rng.choice((10, 60, 600)), WORDS)),
        ]
    return "assistant", [
        ReasoningIn(type="reasoning", text=sentence(rng, rng.randint(80, 600), WORDS)),
        TextIn(type="text", text=sentence(rng, rng.choice((40, 200, 900)), WORDS)),
        ToolUseIn(
            type="tool_use", id=call, name="search",
            input={"query": sentence(rng, 30, WORDS), "filters": {"paths": ["src/", "tests/"]},
                   "page": index},
        ),
    ]  # fmt: skip


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
    results.target(f"b: page server time, {BIG:,} vs {SMALL} messages",
                   benchkit.paired_ratio(samples["page big"], samples["page small"]),
                   SERVER_TARGET, "×")  # fmt: skip
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


def huge_turn(index: int, rng: random.Random) -> tuple[str, list[Any]]:
    """A 10 MB message: a tool's whole log, as agents paste it."""
    from conversations.record.schemas import TextIn

    line = f"{index:02d} " + sentence(rng, 12, WORDS) + "\n"
    return ("user", [TextIn(type="text", text=(line * (HUGE // len(line) + 1))[:HUGE])])


def peak_rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def reset_peak_rss(pid: int) -> None:
    # Linux ≥ 4.0: writing 5 resets the peak resident set size to the current one.
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")


def bench_bounds(results: Results, server: Daphne, session: str, one: Any, sixty: Any) -> None:
    import httpx2 as httpx

    print("c) peak RSS of the server for pages of 10 MB messages")
    pid = server.process.pid
    with httpx.Client(base_url=server.url, cookies={"sessionid": session}, timeout=300) as web:
        web.get("/").raise_for_status()  # warm: settings, templates, the session
        # What the process holds already (parts a and b, the tokenizer): the pages' own
        # cost is the peak minus this.
        reset_peak_rss(pid)
        before = peak_rss_mb(pid)
        results.figure("c: RSS before the 10 MB pages", before, "MB")
        for name, conversation in (("1 × 10 MB", one), ("60 × 10 MB", sixty)):
            path = f"/c/{conversation.pk}/"
            times, peaks = [], []
            size = 0
            for _ in range(HUGE_RUNS):
                reset_peak_rss(pid)
                began = time.perf_counter()
                response = web.get(path)
                times.append(time.perf_counter() - began)
                response.raise_for_status()
                size = len(response.content)
                peaks.append(peak_rss_mb(pid))
            results.figure(f"c: peak RSS serving /c/ID/, {name}", max(peaks), "MB",
                           f"max of {HUGE_RUNS}")  # fmt: skip
            results.figure(f"c: GET /c/ID/, {name}", ms(times), "ms", f"median of {HUGE_RUNS}")
            results.figure(f"c: page size, {name}", size / 1e6, "MB")
            if name.startswith("60"):
                results.target(f"c: peak RSS growth, {name}", max(peaks) - before, RSS_TARGET,
                               "MB", f"over the {before:.0f} MB before")  # fmt: skip
                results.target(f"c: page size, {name}", size / 1e6, PAGE_BYTES_TARGET, "MB")


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
    loads = {name: [run["load"] for run in runs] for name, runs in seen.items()}
    paired = benchkit.paired_ratio(loads["big"], loads["small"])
    results.target(f"a: load {BIG:,} / load {SMALL}", median("big", "load") /
                   median("small", "load"), LOAD_TARGET, "×",
                   f"(round-by-round median {paired:.2f}×)")  # fmt: skip
    results.target(f"a: HTML {BIG:,} / HTML {SMALL}", seen["big"][0]["html"] /
                   seen["small"][0]["html"], SIZE_TARGET, "×", "bounded")  # fmt: skip
    results.target(f"a: DOM {BIG:,} / DOM {SMALL}", seen["big"][0]["nodes"] /
                   seen["small"][0]["nodes"], SIZE_TARGET, "×", "bounded")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--only", choices=["server", "browser", "bounds"])
    args = parser.parse_args(argv)
    parts = {args.only} if args.only else {"server", "browser", "bounds"}
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-dashboard-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        print("DJANGO_DEBUG=0 (as deployed): migrate and collectstatic into a temporary "
              "STATIC_ROOT", flush=True)  # fmt: skip
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
        print(f"building a {BIG:,}- and a {SMALL}-message conversation …", flush=True)
        start = time.perf_counter()
        sizes = (BIG, SMALL) if parts & {"server", "browser"} else (1, 1)
        (big, small), token = benchkit.records(env, turn, *sizes)
        session = benchkit.operator_session(f"bench-{os.getpid()}")
        print(f"  built in {time.perf_counter() - start:.1f} s (3 blocks per message)",
              flush=True)  # fmt: skip
        if "bounds" in parts:
            start = time.perf_counter()
            one = benchkit.build_conversation("bench 1 × 10 MB", 1, huge_turn)
            sixty = benchkit.build_conversation("bench 60 × 10 MB", 60, huge_turn)
            print(f"  10 MB messages built in {time.perf_counter() - start:.1f} s", flush=True)
        from django.db import connection

        connection.close()
        results = Results()
        with benchkit.daphne(env, tmp / "daphne.log") as server:
            if "server" in parts:
                bench_server(results, server, session, token, big, small)
            if "bounds" in parts:
                bench_bounds(results, server, session, one, sixty)
            connection.close()  # Playwright's loop must not meet an open ORM connection
            if "browser" in parts:
                bench_browser(results, server, session, big, small)
        return results.finish(began, args.json, debug=False)


if __name__ == "__main__":
    sys.exit(main())
