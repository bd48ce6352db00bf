"""`manage.py tail` (docs/contract.md §6, "Following live agents"): each complete line is stored as
it is written; a restart, a truncation, a replacement or a rotation loses nothing and
stores nothing twice. In-process here (the follower the command runs); the command
itself, killed and restarted, is in test_tail_process.py and the browser test."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import orjson
import pytest
from django.core.management import CommandError, call_command

from conversations.core.importers import claude_code
from conversations.ingest.file_follower import FileFollower, Tail
from conversations.ingest.models import TailCursor
from conversations.record.models.conversation import Conversation, Message
from tests.taildata import (
    COMPACT,
    PARALLEL,
    REJECTED,
    SUBAGENT,
    append,
    conversation_of,
    imported,
    lines,
    stored,
)

pytestmark = pytest.mark.django_db


def follow_line_by_line(source: Path, target: Path, tail: Tail) -> list[tuple[int, int]]:
    """Write `source` into `target` a line at a time, polling after each; the record's
    (messages, blocks) after each line."""
    counts = []
    for line in lines(source):
        append(target, line)
        tail.discover()
        tail.poll()
        conversation = Conversation.objects.filter(tail_cursors__path=str(target.resolve()))
        found = conversation.first()
        if found is None:
            counts.append((0, 0))
            continue
        blocks = sum(m.block_count for m in found.messages.all())
        counts.append((found.message_count, blocks))
    return counts


def test_each_line_lands_as_it_is_written_and_the_record_equals_an_import(tmp_path):
    target = tmp_path / "session.jsonl"
    counts = follow_line_by_line(REJECTED, target, Tail(target))
    assert stored(conversation_of(target)) == imported(REJECTED)
    # The five assistant lines of one API message grow one message block by block.
    grew_in_place = [
        (before, after)
        for before, after in zip(counts, counts[1:], strict=False)
        if after[0] == before[0] and after[1] == before[1] + 1
    ]
    assert len(grew_in_place) >= 4, counts
    # Nothing is ever stored twice: counts only grow.
    assert counts == sorted(counts)


@pytest.mark.parametrize("source", [PARALLEL, COMPACT, SUBAGENT], ids=lambda p: p.stem)
def test_every_real_recording_followed_equals_its_import(tmp_path, source):
    target = tmp_path / source.name
    follow_line_by_line(source, target, Tail(tmp_path))
    assert stored(conversation_of(target)) == imported(source)


def test_a_compaction_boundary_marks_the_next_message(tmp_path):
    target = tmp_path / "compact.jsonl"
    follow_line_by_line(COMPACT, target, Tail(target))
    conversation = conversation_of(target)
    [boundary] = conversation.metadata["compact_boundaries"]
    assert boundary["kind"] == "compact_boundary"
    marked = conversation.messages.get(seq=boundary["seq"])
    assert marked.metadata["compact_boundary"]["trigger"] == "manual"
    assert conversation.metadata["sessionId"] == "0e26ec2f-937e-482c-b889-bc126f996913"


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    target = tmp_path / "s.jsonl"
    all_lines = lines(REJECTED)
    first = b"".join(all_lines[:4])  # a snapshot, two progress lines, the user's question
    second = all_lines[4]  # the answer's first line
    append(target, first + second[:40])
    tail = Tail(target)
    tail.discover()
    tail.poll()
    assert TailCursor.objects.get().offset == len(first)
    assert Message.objects.count() == 1
    append(target, second[40:])
    tail.poll()
    assert TailCursor.objects.get().offset == len(first) + len(second)
    assert Message.objects.count() == 2


def test_a_restart_mid_message_resumes_it_without_duplicating_a_line(tmp_path):
    target = tmp_path / "s.jsonl"
    all_lines = lines(REJECTED)
    # Stop inside the five-line assistant message (lines 5 to 10 of the file).
    first_tail = Tail(target)
    for line in all_lines[:6]:
        append(target, line)
        first_tail.discover()
        first_tail.poll()
    first_tail.close()
    messages_then = Message.objects.count()
    # A new process: its state comes back from the database cursor and the file.
    second_tail = Tail(target)
    second_tail.discover()
    second_tail.poll()
    assert Message.objects.count() == messages_then
    for line in all_lines[6:]:
        append(target, line)
        second_tail.poll()
    assert stored(conversation_of(target)) == imported(REJECTED)
    assert Conversation.objects.count() == 1


def test_a_cursor_lost_after_the_lines_were_stored_stores_nothing_twice(tmp_path):
    # The crash window the source uuids close: the cursor rewound (as after a file was
    # replaced by a copy of itself), every line read again.
    target = tmp_path / "s.jsonl"
    follow_line_by_line(REJECTED, target, Tail(target))
    TailCursor.objects.update(offset=0, head_len=0, head_digest="x")
    tail = Tail(target)
    tail.discover()
    tail.poll()
    assert stored(conversation_of(target)) == imported(REJECTED)


def test_a_truncated_file_written_again_is_read_from_its_start_once(tmp_path):
    target = tmp_path / "s.jsonl"
    tail = Tail(target)
    all_lines = lines(PARALLEL)
    for line in all_lines[:20]:
        append(target, line)
        tail.discover()
        tail.poll()
    with target.open("r+b") as handle:
        handle.truncate(0)
    tail.poll()
    for line in all_lines:  # the same session written again, then further
        append(target, line)
        tail.poll()
    assert stored(conversation_of(target)) == imported(PARALLEL)


def test_a_file_replaced_by_another_is_drained_then_read_again(tmp_path):
    target = tmp_path / "s.jsonl"
    tail = Tail(target)
    all_lines = lines(REJECTED)
    for line in all_lines[:8]:
        append(target, line)
        tail.discover()
        tail.poll()
    # An atomic rewrite (write a new file, rename it over): new inode, same beginning.
    replacement = tmp_path / "s.jsonl.tmp"
    replacement.write_bytes(b"".join(all_lines))
    os.replace(replacement, target)
    tail.poll()
    assert stored(conversation_of(target)) == imported(REJECTED)


def test_a_rotated_file_gives_its_last_lines_before_the_new_one_is_read(tmp_path):
    target = tmp_path / "s.jsonl"
    tail = Tail(target)
    all_lines = lines(REJECTED)
    for line in all_lines[:8]:
        append(target, line)
        tail.discover()
        tail.poll()
    rotated = tmp_path / "s.jsonl.1"
    target.rename(rotated)
    for line in all_lines[8:]:  # the writer still holds the old file
        append(rotated, line)
    tail.poll()  # the path is gone: the old file is read to its end
    assert stored(conversation_of(target)) == imported(REJECTED)
    append(target, lines(COMPACT)[0])  # a new file at the path, another session
    tail.poll()
    assert TailCursor.objects.count() == 1


def test_a_directory_follows_every_session_and_links_subagents_both_ways(tmp_path):
    project = tmp_path / "projects" / "-home-me-app"
    session = project / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    subagent = project / "258c7280-ae70-4798-800f-63464d01a85d" / "subagents" / "agent-a1.jsonl"
    subagent.parent.mkdir(parents=True)
    tail = Tail(tmp_path / "projects")
    for line in lines(REJECTED):
        append(session, line)
    tail.discover()
    tail.poll()
    for line in lines(SUBAGENT):
        append(subagent, line)
    tail.discover()  # a file that appeared while following
    tail.poll()
    parent = conversation_of(session)
    child = conversation_of(subagent)
    assert child.metadata["linked_from"] == str(parent.id)
    assert parent.metadata["linked"] == [str(child.id)]
    assert stored(child) == imported(SUBAGENT)
    assert stored(parent) == imported(REJECTED)


def test_a_bad_line_is_skipped_and_the_following_ones_stored(tmp_path, caplog):
    target = tmp_path / "s.jsonl"
    all_lines = lines(REJECTED)
    append(target, b"".join(all_lines[:4]) + b"{not json\n" + b"".join(all_lines[4:]))
    tail = Tail(target)
    tail.discover()
    tail.poll()
    assert "line 5 is not storable JSON" in caplog.text
    assert stored(conversation_of(target)) == imported(REJECTED)


def test_an_unstorable_step_is_logged_and_the_rest_of_the_batch_stored(tmp_path, caplog):
    target = tmp_path / "s.jsonl"
    all_lines = lines(REJECTED)
    bad = orjson.loads(all_lines[3])
    assert bad["type"] == "user"
    bad["uuid"] = "bad-image-line"
    bad["message"]["content"] = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    ]
    append(target, b"".join(all_lines[:4]) + orjson.dumps(bad) + b"\n" + b"".join(all_lines[4:]))
    tail = Tail(target)
    tail.discover()
    tail.poll()
    assert "not valid base64" in caplog.text
    assert stored(conversation_of(target)) == imported(REJECTED)


def test_subagent_lines_inside_a_session_file_are_not_mixed_into_it(tmp_path, caplog):
    target = tmp_path / "s.jsonl"
    all_lines = lines(REJECTED)
    side = orjson.loads(all_lines[3]) | {"isSidechain": True, "uuid": "side-1", "agentId": "a1"}
    append(target, b"".join(all_lines[:4]) + orjson.dumps(side) + b"\n" + b"".join(all_lines[4:]))
    tail = Tail(target)
    tail.discover()
    tail.poll()
    assert "a subagent's line inside a session file is not followed live" in caplog.text
    assert stored(conversation_of(target)) == imported(REJECTED)


def test_a_conversation_deleted_while_followed_is_not_brought_back(tmp_path, caplog):
    target = tmp_path / "s.jsonl"
    other = tmp_path / "t.jsonl"
    all_lines = lines(REJECTED)
    append(target, b"".join(all_lines[:6]))
    append(other, b"".join(all_lines[:6]))
    tail = Tail(tmp_path)
    tail.discover()
    tail.poll()
    conversation_of(target).delete()
    append(target, b"".join(all_lines[6:]))
    append(other, b"".join(all_lines[6:]))
    tail.poll()
    tail.discover()
    tail.poll()
    assert "its conversation was deleted; no longer following it" in caplog.text
    assert not TailCursor.objects.filter(path=str(target.resolve())).exists()
    assert stored(conversation_of(other)) == imported(REJECTED)  # the others go on


def same_gaps(found: list[dict], expected: list[dict]) -> bool:
    def key(gap: dict) -> bytes:
        return orjson.dumps(gap, option=orjson.OPT_SORT_KEYS)

    return sorted(map(key, found)) == sorted(map(key, expected))


@pytest.mark.parametrize("source", [REJECTED, PARALLEL, COMPACT], ids=lambda p: p.stem)
def test_a_followed_session_lists_its_gaps_as_its_import_does(tmp_path, source):
    target = tmp_path / source.name
    follow_line_by_line(source, target, Tail(target))
    conversation = conversation_of(target)
    expected = [gap.as_json() for gap in claude_code.read(source.read_bytes().splitlines()).gaps]
    assert same_gaps(conversation.metadata["gaps"], expected)
    assert conversation.metadata["import"]["format"] == "claude-code"


def test_gaps_in_a_continued_message_are_placed_as_the_import_places_them(tmp_path):
    all_lines = lines(REJECTED)
    line = orjson.loads(all_lines[6])
    assert line["type"] == "assistant"
    line["message"]["content"] = [{"type": "mystery_block", "payload": {"x": 1}}]
    source = tmp_path / "source.jsonl"
    source.write_bytes(
        b"".join(all_lines[:6]) + orjson.dumps(line) + b"\n" + b"".join(all_lines[7:])
    )
    target = tmp_path / "s.jsonl"
    follow_line_by_line(source, target, Tail(target))
    expected = [gap.as_json() for gap in claude_code.read(source.read_bytes().splitlines()).gaps]
    placed = [gap for gap in expected if "message" in gap]
    assert placed and placed[0]["block"] > 0  # inside a message written over several lines
    assert same_gaps(conversation_of(target).metadata["gaps"], expected)
    assert stored(conversation_of(target)) == imported(source)


def test_old_sessions_are_read_and_let_go_of(tmp_path):
    old = time.time() - 3600
    for n in range(20):
        session = tmp_path / f"old-{n}.jsonl"
        append(session, b"".join(lines(REJECTED)))
        os.utime(session, (old, old))
    tail = Tail(tmp_path)
    tail.discover()
    tail.poll()
    assert TailCursor.objects.count() == 20
    assert all(follower.handle is None for follower in tail.followers.values())
    active = tmp_path / "old-0.jsonl"
    append(active, lines(COMPACT)[0])  # it comes back to life: followed again
    tail.poll()
    assert tail.followers[active].handle is not None


@pytest.mark.django_db
def test_a_fifo_put_where_a_followed_file_was_is_not_opened(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    os.mkfifo(path)
    follower = FileFollower(path)
    polled: list[int] = []
    worker = threading.Thread(target=lambda: polled.append(follower.poll()), daemon=True)
    worker.start()
    worker.join(2)
    assert not worker.is_alive(), "poll blocked opening a FIFO"
    assert polled == [0] and follower.handle is None


def test_tail_refuses_a_path_that_is_no_file_or_folder(tmp_path: Path) -> None:
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(CommandError, match="neither a directory nor a regular file"):
        call_command("tail", str(fifo), "--once")
