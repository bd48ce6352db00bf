"""The whole-record reads' memory and time targets (docs/contract.md §3, §4 Bounds), against a
real daphne on a throwaway PostgreSQL database.

Run with `python -m bench.streams [--json PATH] [--quick]`. It prints each figure with
its target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) a record of 30 messages × 10 MB: the server's peak RSS over its baseline (VmHWM, reset
   before each read) while it serves GET /api/conversations/ID, …/replay, …/markdown, the
   payload download (/c/ID/replay.json) and the Markdown export (/c/ID/export.md): each at
   most +300 MB;
b) a record of 100,000 messages (about 385 MB, as the scale run's): GET …/ID and
   …/replay at most +100 MB each, and their time at most 2× the time this process takes to
   read the same record whole and serialise it with orjson (what the server did before);
c) memory returned: the server's RSS after all of it at most 2× its RSS after start-up,
   read once it answers /readyz and before any other request (its modules imported and the
   tokenizer, 73 MB, loaded: the server loads it as it starts, since it counts every block
   it stores); the ratio to its RSS warm (its first pages served) is printed too;
d) ingest of one message of many one-character text blocks through the API: 400,000
   blocks within 4.6× the time of 100,000 (linear, with 15 % for the noise of a shared
   machine; it was 6.5×);
e) the same record's compaction previews (/c/ID/context?compact=…, the page and the API)
   and the diff page against microcompact: each at most +300 MB over the RSS just before
   it (a window of the record, its counts from the stored figures).

`--quick` builds 3,000 messages for b) and skips d) (a smoke run, no targets for b, d).
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from typing import Any

from bench import kit as benchkit
from bench.dashboard import peak_rss_mb, reset_peak_rss
from bench.kit import Daphne, Results, sentence
from bench.live import postgres_database

HUGE_MESSAGES = 30
HUGE = 10 * 1024 * 1024  # characters of each of its messages
MANY = 100_000
MANY_CHARS = 3_800  # characters of each of those messages' texts (385 MB in all)
HUGE_TARGET = 300  # MB over the baseline
MANY_TARGET = 100  # MB over the baseline
TIME_TARGET = 2.0  # × reading and serialising the record whole in this process
RETURNED_TARGET = 2.0  # × the RSS after start-up
BLOCKS = (100_000, 400_000)
INGEST_TARGET = 4.6  # × for 4× the blocks


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def huge_turn(index: int, rng: random.Random) -> tuple[str, list[Any]]:
    from conversations.record.schemas import TextIn

    line = f"{index:02d} " + sentence(rng, 60) + "\n"
    text = (line * (HUGE // len(line) + 1))[:HUGE]
    return ("user" if index % 2 == 0 else "assistant"), [TextIn(type="text", text=text)]


def build_many(count: int) -> Any:
    """`count` messages of one text block each, through the batch service (1,000 a call)."""
    from conversations.record.schemas import MessageIn
    from conversations.record.services.appending import messages_append
    from conversations.record.services.conversations import conversation_create

    rng = random.Random("many")
    conversation = conversation_create(title=f"bench {count:,} messages")
    for start in range(0, count, 1000):
        batch = [
            MessageIn.model_validate(
                {
                    "role": "user" if i % 2 == 0 else "assistant",
                    "blocks": [{"type": "text", "text": sentence(rng, MANY_CHARS)}],
                }
            )  # fmt: skip
            for i in range(start, min(start + 1000, count))
        ]
        messages_append(conversation=conversation, messages=batch)
    conversation.refresh_from_db()
    return conversation


def fetch(client: Any, path: str) -> tuple[int, float]:
    """GET `path`, reading the body as it comes and keeping none of it: (bytes, seconds)."""
    began = time.perf_counter()
    size = 0
    with client.stream("GET", path) as response:
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.read()[:300]!r}")
        for chunk in response.iter_raw():
            size += len(chunk)
    return size, time.perf_counter() - began


def serve(
    results: Results,
    server: Daphne,
    client: Any,
    name: str,
    path: str,
    baseline: float,
    target: float | None,
) -> float:
    """One read: its peak over `baseline` (a figure, or a target when `target` is given)."""
    pid = server.process.pid
    reset_peak_rss(pid)
    size, took = fetch(client, path)
    peak = peak_rss_mb(pid) - baseline
    note = f"{size / 1e6:,.0f} MB in {took:.1f} s"
    if target is None:
        results.figure(f"{name}: peak RSS over the baseline", peak, "MB", note)
    else:
        results.target(f"{name}: peak RSS over the baseline", peak, target, "MB", note)
    return took


def whole_read_seconds(conversation: Any, what: str) -> float:
    """This process: the record (or the replay) read whole and serialised with orjson."""
    import orjson

    from conversations.record.reads import selectors, shapes

    began = time.perf_counter()
    if what == "record":
        body = orjson.dumps(shapes.record_data(conversation, url="u"))
    else:
        body = selectors.replay_json(conversation, vision=True, shape="openai")
    took = time.perf_counter() - began
    del body
    return took


def ingest(results: Results, server: Daphne, token: str) -> None:
    import httpx2 as httpx
    import orjson

    print("d) one message of many one-character text blocks through the API")
    took = {}
    with httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=900
    ) as api:
        for count in BLOCKS:
            created = api.post("/api/conversations", json={"title": f"{count:,} blocks"})
            cid = created.raise_for_status().json()["id"]
            body = orjson.dumps({"role": "user", "blocks": [{"type": "text", "text": "a"}] * count})
            began = time.perf_counter()
            answer = api.post(
                f"/api/conversations/{cid}/messages", content=body,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            took[count] = time.perf_counter() - began
            if answer.status_code != 201:
                raise RuntimeError(f"ingest of {count:,} blocks: {answer.status_code}")
            results.figure(f"d: ingest of {count:,} blocks", took[count], "s")
    low, high = BLOCKS
    results.target(
        f"d: ingest time, {high:,} vs {low:,} blocks", took[high] / took[low], INGEST_TARGET, "×"
    )


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (see above)")
    parser.add_argument("--many", type=int, help="messages of b)'s record (a figure run)")
    args = parser.parse_args(argv)
    many = args.many or (3_000 if args.quick else MANY)
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(benchkit.scratch("replay-bench-streams-"))
        env = benchkit.base_env(tmp, stack.enter_context(postgres_database()))
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
        print(f"building {HUGE_MESSAGES} messages × 10 MB and {many:,} messages …", flush=True)
        start = time.perf_counter()
        (huge,), token = benchkit.records(env, huge_turn, HUGE_MESSAGES)
        small = build_many(4)
        big = build_many(many)
        session = benchkit.operator_session("bench-streams")
        print(f"  built in {time.perf_counter() - start:.0f} s", flush=True)
        from django.db import connections

        connections.close_all()
        results = Results()
        server = stack.enter_context(benchkit.daphne(env, tmp / "daphne.log"))
        pid = server.process.pid
        import httpx2 as httpx

        with httpx.Client(base_url=server.url, timeout=60) as probe:
            probe.get("/readyz").raise_for_status()
        started = rss_mb(pid)
        results.figure("RSS after start-up (modules and tokenizer loaded, /readyz answered)",
                       started, "MB")  # fmt: skip
        run(results, server, token, session, (huge, small, big), started, quick=args.quick)
        if not args.quick:
            ingest(results, server, token)
        load = open("/proc/loadavg").read().split()[:3]  # noqa: SIM115
        print(f"load average: {' '.join(load)}")
        return results.finish(began, args.json, load=load)


def run(
    results: Results,
    server: Daphne,
    token: str,
    session: str,
    records: tuple[Any, Any, Any],
    started: float,
    *,
    quick: bool,
) -> None:
    import httpx2 as httpx

    huge, small, big = records
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"},
                       timeout=900)  # fmt: skip
    web = httpx.Client(base_url=server.url, cookies={"sessionid": session}, timeout=900)
    with api, web:
        pid = server.process.pid
        fetch(api, f"/api/conversations/{small.pk}/replay")
        fetch(web, f"/c/{small.pk}/")
        fetch(web, f"/c/{small.pk}/export.md")
        baseline = rss_mb(pid)
        results.figure("baseline RSS (warm)", baseline, "MB")

        print(f"a) a record of {HUGE_MESSAGES} messages × 10 MB")
        reads = [
            (api, "record", f"/api/conversations/{huge.pk}"),
            (api, "replay", f"/api/conversations/{huge.pk}/replay"),
            (api, "markdown (API)", f"/api/conversations/{huge.pk}/markdown"),
            (web, "payload download", f"/c/{huge.pk}/replay.json"),
            (web, "export.md", f"/c/{huge.pk}/export.md"),
        ]
        for client, name, path in reads:
            serve(results, server, client, f"a: {name}", path, baseline, HUGE_TARGET)

        print(f"b) a record of {big.message_count:,} messages")
        for what, path in (("record", f"/api/conversations/{big.pk}"),
                           ("replay", f"/api/conversations/{big.pk}/replay")):  # fmt: skip
            took = serve(results, server, api, f"b: {what}", path, baseline,
                         None if quick else MANY_TARGET)  # fmt: skip
            reference = whole_read_seconds(big, what)
            results.figure(f"b: {what}, read whole and serialised in this process", reference,
                           "s")  # fmt: skip
            if quick:
                results.figure(f"b: {what} time vs the whole read", took / reference, "×")
            else:
                results.target(f"b: {what} time vs the whole read", took / reference,
                               TIME_TARGET, "×")  # fmt: skip
        after = rss_mb(pid)
        results.figure("c: RSS after the streamed reads", after, "MB")
        results.target("c: … vs after start-up", after / started, RETURNED_TARGET, "×")
        results.figure("c: … vs the warm start (first pages served)", after / baseline, "×")

        print("e) the compaction previews and the diff: one window each")
        fetch(web, f"/c/{small.pk}/context?compact=microcompact")  # the tokenizer, loaded
        results.figure("e: baseline RSS (the tokenizer loaded)", rss_mb(pid), "MB")
        for client, name, path in (
            (web, "compaction preview", f"/c/{huge.pk}/context?compact=microcompact"),
            (web, "preview, clear_thinking", f"/c/{huge.pk}/context?compact=clear_thinking"),
            (
                web,
                "preview, full payload",
                f"/c/{huge.pk}/context?compact=microcompact&payload=full",
            ),
            (api, "preview (API)", f"/api/conversations/{huge.pk}/context?compact=microcompact"),
            (web, "diff", f"/c/{huge.pk}/diff?b_compact=microcompact"),
        ):
            # Each over the RSS just before it: what a page left unreturned is not its own.
            serve(results, server, client, f"e: {name}", path, rss_mb(pid), HUGE_TARGET)
        results.figure("e: RSS after those pages", rss_mb(pid), "MB")


if __name__ == "__main__":
    sys.exit(main())
