"""Comparing two runs (issue 19, docs/contract.md §9): the API's first page against reading
one of the runs, and the server's memory for two long runs.

Run with `python -m bench.compare [--json PATH]`. It prints each figure with its
target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) two 10,000-message runs (tool rounds: call, result, call, result…) with 20 scattered
   differences: GET /api/compare?a=&b= (its first page) against GET /api/conversations/A,
   in interleaved rounds on one daphne, each after a message appended to B (so each
   comparison is made afresh); the paired median ratio, target ≤ 10×. The first, cold,
   comparison (token counts not yet cached) is reported beside it;
b) two 100,000-message runs that differ in 10 places: the daphne process's peak RSS growth
   (VmHWM after the first page, reset before it, minus VmRSS before), target ≤ 200 MB,
   cold (the token counts of both runs made and cached on the way) and warm.

Both on a throwaway SQLite database; the runs are stored in batches through the services.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from bench import kit as benchkit
from bench.dashboard import peak_rss_mb, reset_peak_rss
from bench.kit import Results, ms, sentence

SMALL_RUN = 10_000
SMALL_DIFFERENCES = 20
LONG_RUN = 100_000
LONG_DIFFERENCES = 10
RUNS = 5
RATIO_TARGET = 10.0
RSS_TARGET = 200  # MB
TOOLS = ["read_file", "grep", "run_tests", "edit_file"]
BATCH = 2_000


def messages(count: int, rng: random.Random) -> list[tuple[str, list[dict[str, Any]]]]:
    """An agent's run: a system prompt, a task, then tool rounds (an assistant's call with a
    line of text, the user's result), every tenth round a short exchange in prose."""
    out: list[tuple[str, list[dict[str, Any]]]] = [
        ("system", [{"type": "text", "text": "You are a careful coding agent."}]),
        ("user", [{"type": "text", "text": sentence(rng, 200)}]),
    ]
    i = 0
    while len(out) < count:
        if i % 10 == 9:
            out.append(("assistant", [{"type": "text", "text": sentence(rng, 120)}]))
            out.append(("user", [{"type": "text", "text": sentence(rng, 40)}]))
        else:
            name = TOOLS[i % len(TOOLS)]
            call = {"type": "tool_use", "id": f"c{i}", "name": name, "input": {"path": f"f{i}"}}
            out.append(("assistant", [{"type": "text", "text": sentence(rng, 60)}, call]))
            result = {"type": "tool_result", "tool_use_id": f"c{i}", "content": sentence(rng, 300)}
            out.append(("user", [result]))
        i += 1
    return out[:count]


def edited(
    base: list[tuple[str, list[dict[str, Any]]]], differences: int, rng: random.Random
) -> list[tuple[str, list[dict[str, Any]]]]:
    """`base` with `differences` scattered edits: another tool called, a message inserted or
    deleted, a result's text changed."""
    out = list(base)
    spots = sorted(rng.sample(range(10, len(base) - 10), differences), reverse=True)
    for k, spot in enumerate(spots):
        role, blocks = out[spot]
        match k % 4:
            case 0 if role == "assistant" and len(blocks) == 2:
                call = dict(blocks[1]) | {"name": "search_web"}
                out[spot] = (role, [blocks[0], call])
            case 1:
                out.insert(spot, ("user", [{"type": "text", "text": "Also check the logs."}]))
            case 2:
                del out[spot]
            case _:
                out[spot] = (role, [{"type": "text", "text": "Something else entirely."}])
    return out


def store(title: str, run: list[tuple[str, list[dict[str, Any]]]]) -> Any:
    from conversations.record.schemas import MessageIn
    from conversations.record.services.appending import messages_append
    from conversations.record.services.conversations import conversation_create

    conversation = conversation_create(title=title)
    for start in range(0, len(run), BATCH):
        messages_append(
            conversation=conversation,
            messages=[MessageIn.model_validate({"role": r, "blocks": b})
                      for r, b in run[start : start + BATCH]],
        )  # fmt: skip
    conversation.refresh_from_db()
    return conversation


def pair(size: int, differences: int) -> tuple[Any, Any]:
    rng = random.Random(size)
    base = messages(size, rng)
    print(f"building two {size:,}-message runs, {differences} differences …", flush=True)
    began = time.perf_counter()
    a = store(f"bench A {size:,}", base)
    b = store(f"bench B {size:,}", edited(base, differences, rng))
    print(f"  built in {time.perf_counter() - began:.1f} s", flush=True)
    return a, b


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


def main(argv: list[str] | None = None) -> int:
    args = benchkit.arguments(__doc__).parse_args(argv)
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-compare-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
        benchkit.setup_django(env)
        from conversations.record.services.api_tokens import api_token_create

        _, token = api_token_create(label="bench")
        small = pair(SMALL_RUN, SMALL_DIFFERENCES)
        long = pair(LONG_RUN, LONG_DIFFERENCES)
        results = Results()
        with benchkit.daphne(env, tmp / "daphne.log") as server:
            bench_ratio(results, server, token, *small)
            bench_memory(results, server, token, *long)
        return results.finish(began, args.json)


def bench_ratio(results: Results, server: benchkit.Daphne, token: str, a: Any, b: Any) -> None:
    import httpx2 as httpx

    print(f"a) the first page of two {SMALL_RUN:,}-message runs against reading one")
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=600) as api:
        compare = f"/api/compare?a={a.pk}&b={b.pk}"
        record = f"/api/conversations/{a.pk}"
        start = time.perf_counter()
        first = api.get(compare)
        cold = time.perf_counter() - start
        first.raise_for_status()
        data = first.json()
        start = time.perf_counter()
        api.get(record).raise_for_status()
        read_once = time.perf_counter() - start
        results.figure("a: first comparison, cold (counts not cached)", round(cold * 1e3), "ms")
        results.figure("a: cold comparison vs one read of the record", round(cold / read_once, 2),
                       "×")  # fmt: skip
        lone = sum(1 for r in data["rows"] if r["a_seq"] is None or r["b_seq"] is None)
        results.figure("a: rows on the first page", len(data["rows"]), "rows",
                       f"of {data['total_rows']:,}; {data['pages']} pages")  # fmt: skip
        results.figure("a: first divergence", data["first_divergence"]["a_seq"] or 0, "seq (A)")
        unpaired = 0
        page: dict[str, Any] | None = data
        while page is not None:
            unpaired += sum(1 for r in page["rows"] if r["a_seq"] is None or r["b_seq"] is None)
            nxt = page["next"]
            page = api.get(nxt).json() if nxt else None
        results.target("a: messages without a partner (all pages)", unpaired,
                       4 * SMALL_DIFFERENCES, "rows", f"{lone} on the first page")  # fmt: skip

        # Each round first appends a message to B (untimed): a new record state, so the
        # comparison is made afresh (only the new message is counted), as after an agent's
        # turn; the record read is of A.
        samples: dict[str, list[float]] = {"compare": [], "record": []}
        for i in range(RUNS):
            turn = {"role": "user", "blocks": [{"type": "text", "text": f"round {i}"}]}
            api.post(f"/api/conversations/{b.pk}/messages", json=turn).raise_for_status()
            start = time.perf_counter()
            fresh = api.get(compare)
            samples["compare"].append(time.perf_counter() - start)
            fresh.raise_for_status()
            assert fresh.json()["b"]["messages"] == data["b"]["messages"] + i + 1
            start = time.perf_counter()
            api.get(record).raise_for_status()
            samples["record"].append(time.perf_counter() - start)
        results.figure("a: GET /api/compare (first page), afresh", round(ms(samples["compare"])),
                       "ms", f"median of {RUNS}")  # fmt: skip
        results.figure("a: GET /api/conversations/ID", round(ms(samples["record"])), "ms",
                       f"median of {RUNS}")  # fmt: skip
        ratio = benchkit.paired_ratio(samples["compare"], samples["record"])
        results.target("a: compare first page vs the record", round(ratio, 2), RATIO_TARGET, "×")
        start = time.perf_counter()
        api.get(compare + "&page=2").raise_for_status()
        later = round((time.perf_counter() - start) * 1e3)
        results.figure("a: a later page of the same comparison", later, "ms", "alignment kept")


def bench_memory(results: Results, server: benchkit.Daphne, token: str, a: Any, b: Any) -> None:
    import httpx2 as httpx

    print(f"b) peak RSS of the server comparing two {LONG_RUN:,}-message runs")
    pid = server.process.pid
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=1200) as api:
        reset_peak_rss(pid)
        before = rss_mb(pid)
        results.figure("b: RSS before", round(before), "MB")
        start = time.perf_counter()
        response = api.get(f"/api/compare?a={a.pk}&b={b.pk}")
        took = time.perf_counter() - start
        response.raise_for_status()
        data = response.json()
        peak = peak_rss_mb(pid)
        results.figure("b: first page, cold", round(took, 1), "s",
                       f"{data['total_rows']:,} rows, {data['pages']} pages")  # fmt: skip
        # The cold request also fills token_counts' caches (a count for every message and
        # block of both runs, kept for the next page and the conversation pages): the
        # warm request's growth is what the comparison itself holds.
        results.target("b: peak RSS growth, counts cold", round(peak - before), RSS_TARGET,
                       "MB", "the token counts' caches included")  # fmt: skip
        # A message appended to B first: a new record state, so the comparison is made
        # afresh, with every count but the new message's cached.
        turn = {"role": "user", "blocks": [{"type": "text", "text": "one more"}]}
        api.post(f"/api/conversations/{b.pk}/messages", json=turn).raise_for_status()
        reset_peak_rss(pid)
        before = rss_mb(pid)
        start = time.perf_counter()
        again = api.get(f"/api/compare?a={a.pk}&b={b.pk}")
        again.raise_for_status()
        assert again.json()["b"]["messages"] == data["b"]["messages"] + 1
        results.figure("b: first page afresh, counts warm", round(time.perf_counter() - start, 1),
                       "s")  # fmt: skip
        results.target("b: peak RSS growth, counts warm", round(peak_rss_mb(pid) - before),
                       RSS_TARGET, "MB")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
