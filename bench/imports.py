"""The importers' performance target (issue 9), on a throwaway SQLite database.

Run with `python -m bench.imports [--json PATH]`. It writes a 10,000-message Claude
Code session file by repeating a real fixture's lines with fresh uuids and message ids
(chained one repetition after the other), then measures:

a) `manage.py import FILE` (the CLI, which streams the file) in its own process: wall time
   and peak RSS, next to the file's size;
b) the same import in this process (read and store, no start-up) against GET
   /api/conversations/ID of the resulting record, in interleaved rounds: the median of
   the round-by-round ratios is at most 10.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, ms

FIXTURE = (
    benchkit.ROOT
    / "tests"
    / "fixtures"
    / "real"
    / "claude_code_tool_heavy_parallel_interrupts.jsonl"
)
MESSAGES = 10_000
RATIO_TARGET = 10.0
ROUNDS = 3  # interleaved import and GET rounds, so load drift hits both alike


def session_file(path: Path, messages: int) -> int:
    """Write repetitions of the fixture until the main chain holds `messages` messages;
    answers the number of lines written."""
    from conversations.core import importers

    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]
    per_copy = len(importers.read(FIXTURE.read_bytes()).messages)
    copies = -(-messages // per_copy)
    written = 0
    previous_last: str | None = None
    with path.open("w") as out:
        for _copy in range(copies):
            fresh: dict[str, str] = {}

            def renew(old: Any, fresh: dict[str, str] = fresh) -> Any:
                if not isinstance(old, str):
                    return old
                return fresh.setdefault(old, str(uuid.uuid4()))

            for line in lines:
                copy = dict(line)
                if "uuid" in copy:
                    copy["uuid"] = renew(copy["uuid"])
                parent = line.get("parentUuid")
                copy_parent = renew(parent) if parent is not None else previous_last
                if "parentUuid" in line:
                    copy["parentUuid"] = copy_parent
                message = copy.get("message")
                if isinstance(message, dict) and isinstance(message.get("id"), str):
                    copy["message"] = {**message, "id": renew(message["id"])}
                out.write(json.dumps(copy) + "\n")
                written += 1
            last = [line["uuid"] for line in lines if "uuid" in line][-1]
            previous_last = fresh[last]
    return written


def main() -> int:
    args = benchkit.arguments(__doc__).parse_args()
    began = time.perf_counter()
    results = Results()
    with benchkit.scratch("replay-bench-import-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        (tmp / "data").mkdir()
        benchkit.manage(env, "migrate", "--noinput")
        benchkit.setup_django(env)
        path = tmp / "session.jsonl"
        lines = session_file(path, MESSAGES)
        results.figure("session file", path.stat().st_size // 1024, "KB", f"({lines:,} lines)")

        # a) The CLI in its own process: its time (start-up included) and peak memory.
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "manage.py", "import", str(path)],
            cwd=benchkit.ROOT, env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        cli = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
        results.figure("manage.py import (whole process)", round(cli, 2), "s")
        results.figure("manage.py import peak RSS", peak, "MB")
        print("  " + done.stdout.strip().splitlines()[-1][:160])

        # b) The service in this process against GET of the resulting record.
        from django.test import Client

        from conversations.core import importers
        from conversations.ingest.imports import conversation_import, gc_paused
        from conversations.record.models.conversation import Conversation
        from conversations.record.services.api_tokens import api_token_create

        raw = path.read_bytes()
        _, token = api_token_create(label="bench")
        client = Client(HTTP_HOST="localhost")
        stored: list[Conversation] = []

        def import_once() -> None:
            with gc_paused():  # as manage.py import and POST /api/imports do
                imported = importers.read_lines(raw.splitlines())
                outcome = conversation_import(
                    sha256=uuid.uuid4().hex, imported=imported, file_name="bench"
                )
            assert outcome.messages >= MESSAGES, outcome.messages
            stored.append(outcome.conversation)

        def get_record() -> None:
            response = client.get(
                f"/api/conversations/{stored[0].id}", headers={"Authorization": f"Bearer {token}"}
            )
            assert response.status_code == 200, response.status_code
            # the record is streamed: reading it is what a client waits for
            body = b"".join(response.streaming_content)
            assert body.endswith(b"}"), body[-100:]

        import_once()  # the record the GETs read, and a warm-up
        samples = benchkit.rounds(ROUNDS, {"import": import_once, "get": get_record})
        results.figure("messages imported", stored[0].message_count, "messages")
        results.figure(
            "import (read + store, in process, median)", round(ms(samples["import"])), "ms"
        )
        results.figure("GET /api/conversations/ID (median)", round(ms(samples["get"])), "ms")
        ratio = benchkit.paired_ratio(samples["import"], samples["get"])
        results.target(
            "import ÷ GET of the record (paired rounds)", round(ratio, 2), RATIO_TARGET, "×"
        )
    return results.finish(began, args.json)


if __name__ == "__main__":
    sys.exit(main())
