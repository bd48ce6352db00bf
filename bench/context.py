"""Context pressure's performance targets (issue 10), in-process on a throwaway database.

Run with `python -m bench.context [--json PATH]`. It prints each figure with its
target and PASS/FAIL, then a table; it exits 1 when a target is missed.

a) a cold count: `o200k_base` over every block's wire text of a 10,000-message
   conversation (MB of UTF-8 per second, target ≥ 2), and the first pressure view of it
   (reading the rows too);
b) once warm, GET /c/ID/ of that conversation with its pressure view against the same
   page with counting taken out (`token_counts.pressure` answering an empty record): ≤ 1.3×;
c) a live update: one block appended, then the socket's frame for it; the blocks
   counted, its storing included (target: exactly 1), and the frame's time.
"""

from __future__ import annotations

import sys
import time

from bench import kit as benchkit
from bench.dashboard import turn
from bench.kit import Results, ms, rounds
from tests.counted import BlocksCounted

BIG = 10_000
RUNS = 9
COLD_TARGET = 2.0  # MB/s
WARM_TARGET = 1.3  # the page with its pressure view vs the plain page


def main(argv: list[str] | None = None) -> int:
    args = benchkit.arguments(__doc__).parse_args(argv)
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-context-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        env["DJANGO_ALLOWED_HOSTS"] = "testserver"
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.manage(env, "collectstatic", "--noinput", "-v", "0")
        print(f"building a {BIG:,}-message conversation …", flush=True)
        start = time.perf_counter()
        (big,), _token = benchkit.records(env, turn, BIG)
        print(f"  built in {time.perf_counter() - start:.1f} s", flush=True)
        results = Results()
        bench(results, big)
        return results.finish(began, args.json)


def bench(results: Results, conversation: object) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    from conversations.core import replay
    from conversations.core.counting import tokens
    from conversations.core.options import ReplayOptions
    from conversations.live import fragments
    from conversations.record.counting import token_counts
    from conversations.record.models.conversation import Message
    from conversations.record.reads import selectors
    from conversations.record.reads.rows import stored_messages
    from conversations.record.schemas import TextIn
    from conversations.record.services.appending import block_append
    from conversations.record.services.conversations import conversation_create

    options = ReplayOptions(True, "openai")
    rows = selectors.message_rows(conversation)  # type: ignore[arg-type]
    stored = stored_messages(rows)
    blocks = [b for m in stored for b in m.blocks]
    text_bytes = sum(
        len(replay.prose(b).encode()) for b in blocks if not isinstance(b, replay.ImageBlock)
    )
    tokens.encoding()  # the file's load is start-up, not counting
    start = time.perf_counter()
    for block in blocks:
        tokens.block_tokens(block, vision=True, shape="openai")
    seconds = time.perf_counter() - start
    results.figure("wire text counted", round(text_bytes / 1e6, 2), "MB", f"{len(blocks):,} blocks")
    results.target("cold count rate", round(text_bytes / 1e6 / seconds, 2), COLD_TARGET, "MB/s",
                   op="≥")  # fmt: skip

    token_counts.pressure_cache.clear()
    start = time.perf_counter()
    p = token_counts.pressure(conversation, options)  # type: ignore[arg-type]
    results.figure("first pressure view (stored counts read)", round(
        (time.perf_counter() - start) * 1e3), "ms", f"≈{p.total:,} tokens")  # fmt: skip

    user = get_user_model().objects.create_user(username="bench-context")
    user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(user)
    url = f"/c/{conversation.id}/"  # type: ignore[attr-defined]
    assert client.get(url).status_code == 200  # warm

    real = token_counts.pressure
    empty = real(conversation_create(title="empty"), options)

    def plain() -> object:
        token_counts.pressure = lambda *a, **k: empty  # type: ignore[assignment]
        try:
            return client.get(url)
        finally:
            token_counts.pressure = real  # type: ignore[assignment]

    samples = rounds(RUNS, {"pressure": lambda: client.get(url), "plain": plain})
    results.figure("warm page with pressure view", round(ms(samples["pressure"])), "ms")
    results.figure("warm plain page", round(ms(samples["plain"])), "ms")
    results.target(
        "pressure view vs plain page, warm",
        round(benchkit.paired_ratio(samples["pressure"], samples["plain"]), 2),
        WARM_TARGET, "×",
    )  # fmt: skip

    last = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    assert last is not None
    with BlocksCounted() as counted:  # the new block is counted as it is stored
        block_append(message=last, block=TextIn(type="text", text="one more line"))
        start = time.perf_counter()
        frame = fragments.messages_frame(str(conversation.id), [last.seq], True, "openai")  # type: ignore[attr-defined]
        took = time.perf_counter() - start
    results.target("blocks recounted for a live update", counted.n, 1, "blocks", op="=")
    results.figure("live frame with the pressure view", round(took * 1e3), "ms",
                   f"{len(frame.html):,} bytes")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
