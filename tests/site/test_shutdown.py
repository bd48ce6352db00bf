"""Stopping a server (SIGTERM) during an import (docs/contract.md §5): the import is stored
whole or not at all, and the process ends cleanly — no "Task exception was never
retrieved" and no traceback in its log."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.live
MESSAGES = 20_000


def claude_code_lines(count: int) -> bytes:
    lines = []
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(
            json.dumps({
                "type": role, "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i else None,
                "sessionId": "s", "timestamp": "2026-01-01T00:00:00Z",
                "message": {"role": role, "content": [{"type": "text", "text": "word " * 20}]},
            })
        )  # fmt: skip
    return "\n".join(lines).encode()


@pytest.mark.timeout(120)
def test_sigterm_during_an_import_ends_cleanly(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL") and not key.startswith("REPLAY_")
    } | {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'replay.sqlite3'}",
        "REPLAY_DATA_DIR": str(tmp_path),
        "DJANGO_DEBUG": "1",
    }

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return done.stdout

    manage("migrate", "--noinput", "-v", "0")
    token = manage("create_api_token", "shutdown").split()[-1]
    body = claude_code_lines(MESSAGES)
    port = free_port()
    log = tmp_path / "daphne.log"
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "replaysite.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "Listening on TCP" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        answers: list[object] = []

        def send() -> None:
            try:
                answers.append(
                    httpx.post(
                        f"http://127.0.0.1:{port}/api/imports?format=claude-code",
                        content=body, headers={"Authorization": f"Bearer {token}"}, timeout=60,
                    ).status_code
                )  # fmt: skip
            except httpx.HTTPError as exc:  # the server may close before answering
                answers.append(exc)

        client = threading.Thread(target=send)
        client.start()
        time.sleep(1.0)  # the body is sent; the import is being stored
        server.send_signal(signal.SIGTERM)
        client.join(60)
        assert server.wait(60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    text = log.read_text()
    assert "Killed 1 pending application instances" in text  # the stop did interrupt it
    assert "never retrieved" not in text, text
    assert "Traceback" not in text, text
    with sqlite3.connect(tmp_path / "replay.sqlite3") as db:
        stored = db.execute(
            "SELECT c.message_count, (SELECT COUNT(*) FROM conversations_message m "
            "WHERE m.conversation_id = c.id) FROM conversations_conversation c"
        ).fetchall()
    assert stored in ([], [(MESSAGES, MESSAGES)])  # whole or not at all
    if answers == [201]:
        assert stored == [(MESSAGES, MESSAGES)]
