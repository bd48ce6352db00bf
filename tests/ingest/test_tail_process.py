"""`manage.py tail` as a real process: a session written line by line by this test,
the follower killed (SIGKILL) and restarted mid-file, the file truncated and replaced
under it. What it stores must equal importing the whole file, every time."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command

from conversations.ingest.models import TailCursor
from conversations.record.models.conversation import Conversation
from tests.taildata import PARALLEL, REJECTED, append, imported, lines, stored
from tests.tailprocess import TailProcess, eventually

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "-home-me-app"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def tail(project: Path, tmp_path: Path) -> Iterator[TailProcess]:
    process = TailProcess(project.parent, tmp_path / "tail.log")
    process.start()
    yield process
    process.stop()


def stored_equals_import(path: Path, source: Path) -> bool:
    cursor = TailCursor.objects.filter(path=str(path.resolve())).first()
    return cursor is not None and stored(cursor.conversation) == imported(source)


def test_killed_and_restarted_mid_file_it_stores_every_line_once(project, tail):
    session = project / "6f1c.jsonl"
    all_lines = lines(PARALLEL)
    for line in all_lines[:15]:
        append(session, line)
        time.sleep(0.02)
    eventually(lambda: TailCursor.objects.filter(lines__gte=10).exists(), "the first lines")
    tail.kill()
    for line in all_lines[15:25]:  # written while nothing follows
        append(session, line)
    tail.start()
    for line in all_lines[25:]:
        append(session, line)
        time.sleep(0.02)
    eventually(lambda: stored_equals_import(session, PARALLEL), "the whole session, once")
    assert Conversation.objects.count() == 1
    assert tail.stop() == 0  # SIGTERM ends it cleanly


def test_truncated_then_replaced_under_the_follower_it_stores_nothing_twice(project, tail):
    session = project / "9a2e.jsonl"
    all_lines = lines(REJECTED)
    append(session, b"".join(all_lines[:8]))
    eventually(lambda: TailCursor.objects.filter(lines=8).exists(), "eight lines")
    with session.open("r+b") as handle:
        handle.truncate(0)  # the agent starts the file again…
    time.sleep(0.3)
    append(session, b"".join(all_lines[:10]))  # …with the same session, a little further
    eventually(lambda: TailCursor.objects.filter(lines=10).exists(), "ten lines")
    replacement = project / "9a2e.jsonl.tmp"
    replacement.write_bytes(b"".join(all_lines))
    os.replace(replacement, session)  # an atomic rewrite: a new file at the same path
    eventually(lambda: stored_equals_import(session, REJECTED), "the whole session, once")
    assert Conversation.objects.count() == 1


def test_once_stores_what_is_there_and_stops(project):
    session = project / "s.jsonl"
    append(session, b"".join(lines(REJECTED)))
    call_command("tail", str(project), "--once")
    assert stored_equals_import(session, REJECTED)
    call_command("tail", str(project), "--once")  # again: nothing new, nothing twice
    assert stored_equals_import(session, REJECTED)


def test_a_fifo_in_the_followed_folder_neither_blocks_following_nor_sigterm(project, tmp_path):
    # Any process that can write into the agents' folder could stop live following by
    # leaving a FIFO named like a session: a plain open() waits for a writer forever.
    os.mkfifo(project / "trap.jsonl")
    session = project / "s.jsonl"
    append(session, b"".join(lines(REJECTED)))
    process = TailProcess(project.parent, tmp_path / "tail.log")
    process.start()
    try:
        eventually(lambda: stored_equals_import(session, REJECTED), "the session beside a FIFO")
        # SIGTERM ends it cleanly (stop() kills after 10 s, and a killed process is not 0);
        # the bound is a loaded machine's, well under that kill: a FIFO open would never end.
        started = time.monotonic()
        assert process.stop() == 0
        assert time.monotonic() - started < 8.0
    finally:
        process.stop()
    assert "trap.jsonl" not in (tmp_path / "tail.log").read_text()
