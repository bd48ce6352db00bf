"""`manage.py tail` live against a server of its own in-memory channel layer (the quick
start): without a shared layer it says how to be live, and with `--url` each new line goes
through the running server's API, so a socket open on that server sees it arrive."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from conversations.ingest.models import TailCursor
from conversations.record.models.conversation import Conversation
from tests.conftest import ROOT, Server, database_url, free_port, start_daphne
from tests.live.test_live_e2e import LiveClient, operator_cookie
from tests.taildata import PARALLEL, append, imported, lines, stored
from tests.tailprocess import TailProcess, eventually

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "-home-me-app"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def cookie(transactional_db: None) -> str:
    return operator_cookie()


def test_without_a_shared_layer_it_says_in_one_line_how_to_be_live(project: Path) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "REDIS_URL"} | {
        "DATABASE_URL": database_url(),
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
    }
    process = subprocess.Popen(
        [sys.executable, "manage.py", "tail", str(project), "--interval", "0.1"],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    first = process.stderr.readline().decode()
    process.terminate()
    process.wait(10)
    process.stderr.close()
    assert "REDIS_URL" in first and "--url http://127.0.0.1:8000" in first
    assert first.endswith("\n")


@pytest.fixture
def following(project: Path, tmp_path: Path, daphne: Server) -> Iterator[TailProcess]:
    process = TailProcess(
        project.parent, tmp_path / "tail.log", {"REDIS_URL": ""}, ("--url", daphne.url)
    )
    process.start()
    yield process
    process.stop()


def test_with_url_a_watcher_on_the_server_sees_each_new_line_arrive(
    project: Path, following: TailProcess, daphne: Server, cookie: str
) -> None:
    session = project / "6f1c.jsonl"
    all_lines = lines(PARALLEL)
    append(session, b"".join(all_lines[:4]))
    eventually(lambda: TailCursor.objects.filter(lines=4).exists(), "the first lines")
    conversation = TailCursor.objects.get().conversation
    client = LiveClient(daphne.url, str(conversation.id), cookie)
    client.load_page()
    client.connect()
    try:
        for line in all_lines[4:]:
            append(session, line)
            time.sleep(0.02)
        eventually(lambda: stored(conversation) == imported(PARALLEL), "the whole session")
        client.wait_for_record()  # every message and block, pushed by the server
        assert len(client.received) > 0
        client.assert_equals_fresh_page()
    finally:
        client.close()


def test_with_url_killed_and_restarted_mid_file_it_sends_every_line_once(
    project: Path, following: TailProcess
) -> None:
    session = project / "9a2e.jsonl"
    all_lines = lines(PARALLEL)
    for line in all_lines[:15]:
        append(session, line)
    eventually(lambda: TailCursor.objects.filter(lines__gte=10).exists(), "the first lines")
    following.kill()
    for line in all_lines[15:25]:  # written while nothing follows
        append(session, line)
    following.start()
    for line in all_lines[25:]:
        append(session, line)
    conversation = lambda: TailCursor.objects.get().conversation  # noqa: E731
    eventually(lambda: stored(conversation()) == imported(PARALLEL), "the whole session, once")
    assert Conversation.objects.count() == 1
    replacement = project / "9a2e.jsonl.tmp"
    replacement.write_bytes(b"".join(all_lines[:10]))
    replacement.replace(session)  # a shorter file in its place: read again from its start
    eventually(lambda: TailCursor.objects.filter(lines=10).exists(), "the replacement")
    append(session, b"".join(all_lines[10:]))
    eventually(lambda: TailCursor.objects.filter(lines=len(all_lines)).exists(), "to its end")
    assert stored(conversation()) == imported(PARALLEL)


def test_with_url_lines_written_while_the_server_is_down_arrive_once_it_answers(
    project: Path, tmp_path: Path
) -> None:
    port = free_port()
    process = TailProcess(
        project.parent,
        tmp_path / "tail.log",
        {"REDIS_URL": ""},
        ("--url", f"http://127.0.0.1:{port}"),
    )
    session = project / "5d0b.jsonl"
    all_lines = lines(PARALLEL)
    append(session, b"".join(all_lines[:12]))
    process.start()
    server: Server | None = None
    try:
        eventually(lambda: "sending again" in (tmp_path / "tail.log").read_text(), "the outage")
        append(session, b"".join(all_lines[12:]))
        server = start_daphne(tmp_path, {"REPLAY_WEBHOOK_SENDER": "0"}, port=port)
        conversation = lambda: TailCursor.objects.get().conversation  # noqa: E731
        eventually(lambda: TailCursor.objects.filter(lines=len(all_lines)).exists(), "all")
        assert stored(conversation()) == imported(PARALLEL)
        assert Conversation.objects.count() == 1
    finally:
        assert process.stop() == 0
        if server is not None:
            server.stop()
