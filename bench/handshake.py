"""Socket handshakes under a mass reconnect (issue 8): N clients of one operator open a
conversation's live socket at once (CONCURRENCY handshakes in flight), on one daphne on
SQLite with DEBUG off. Prints the time to connect them all, the slowest handshake, and
how many daphne dropped. `python -m bench.handshake [--sockets N]`; under 60 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from bench import kit as benchkit
from bench.kit import Results, base_env, daphne, manage

CONCURRENCY = 50
UNCAPPED = {"REPLAY_MAX_SOCKETS_PER_USER": "100000"}


def provision() -> None:
    """Print as JSON an operator's session id and a conversation's id."""
    import django

    django.setup()
    from conversations.record.services.conversations import conversation_create

    session = benchkit.operator_session(f"bench-handshake-{os.getpid()}")
    conversation = conversation_create(title="bench handshake")
    print(json.dumps({"session": session, "conversation": str(conversation.id)}))


async def connect_all(url: str, origin: str, session: str, n: int) -> tuple[float, float, int]:
    from websockets.asyncio.client import connect

    gate = asyncio.Semaphore(CONCURRENCY)
    slowest = 0.0
    failed = 0
    opened = []
    headers = {"Cookie": f"sessionid={session}", "Origin": origin}

    async def one() -> None:
        nonlocal slowest, failed
        async with gate:
            start = time.perf_counter()
            try:
                ws = await connect(url, additional_headers=headers, open_timeout=30)
            except Exception:
                failed += 1
                return
            slowest = max(slowest, time.perf_counter() - start)
            opened.append(ws)

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    took = time.perf_counter() - began
    await asyncio.gather(*(ws.close() for ws in opened))
    return took, slowest, failed


def main(argv: list[str] | None = None) -> int:
    parser = benchkit.arguments(__doc__)
    parser.add_argument("--sockets", type=int, default=500)
    parser.add_argument("--provision", action="store_true", help="(internal)")
    args = parser.parse_args(argv)
    if args.provision:
        provision()
        return 0
    began = time.perf_counter()
    results = Results()
    with benchkit.scratch("replay-bench-handshake-") as tmp:
        env = base_env(tmp, f"sqlite:///{tmp / 'handshake.sqlite3'}") | UNCAPPED
        manage(env, "migrate", "--noinput", "-v", "0")
        done = subprocess.run(
            [sys.executable, "-m", "bench.handshake", "--provision"],
            cwd=benchkit.ROOT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        data = json.loads(done.stdout.strip().splitlines()[-1])
        with daphne(env, tmp / "daphne.log") as server:
            url = f"{server.ws_url}/ws/conversations/{data['conversation']}/"
            took, slowest, failed = asyncio.run(
                connect_all(url, server.url, data["session"], args.sockets)
            )
        n = args.sockets
        note = f"{CONCURRENCY} handshakes in flight"
        results.figure(f"time to connect {n:,} sockets", took, "s", note)
        results.figure("handshakes per second", n / took, "/s")
        results.figure("slowest handshake", slowest * 1000, "ms")
        results.target("handshakes dropped", failed, 0, "sockets", op="=")
    return results.finish(began, args.json, sockets=args.sockets)


if __name__ == "__main__":
    sys.exit(main())
