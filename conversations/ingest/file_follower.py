"""`manage.py tail`: follow Claude Code session files as they grow (docs/contract.md §6).

Each complete new line is mapped (the importer's `SessionMapper`, one line at a time) and
stored through the services together with the file's cursor, in one transaction: a
restart resumes exactly after the last stored line. A truncated, replaced or rotated
file is read again from its start; lines already stored are known by their uuids.
Polling (a `stat` per file per tick) works on every filesystem, network ones included.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from django.core.exceptions import ObjectDoesNotExist

from conversations.core import live_sources, strictjson
from conversations.core.importers import claude_code
from conversations.core.importers.common import ImportFormatError
from conversations.ingest import reads as ingest_reads
from conversations.ingest.following import (
    TailServer,
    tail_append,
    tail_cursor_create,
    tail_rewind,
    tail_send,
)
from conversations.ingest.models import TailCursor
from conversations.ingest.tail_remote import ServerUnreachable
from conversations.record.errors import IngestError
from conversations.record.reads import selectors

log = logging.getLogger(__name__)

PATTERN = "*.jsonl"
READ_LIMIT = 16 * 1024 * 1024  # at most this much is read from one file per tick
BATCH_LINES = 200  # lines stored per transaction while catching up
# A file unchanged this long is read, then let go (reopened when it changes): an open
# handle is what lets a rotated file be read to its end, and only active files rotate.
IDLE_CLOSE = 60.0


@dataclass(slots=True)
class Translator:
    """A session file's lines → the services' steps: the importer's mapper, plus the
    compaction marker waiting for the next message and the session's metadata so far."""

    mapper: claude_code.SessionMapper = field(default_factory=claude_code.SessionMapper)
    marker: dict[str, Any] | None = None
    described: dict[str, Any] = field(default_factory=dict)
    # Whether the file's session is a sidechain (a subagent's own file); lines of the
    # other kind (older Claude Code wrote subagents' lines into the session's file) are
    # not followed live: `manage.py import` of the file makes them their own conversations.
    sidechain: bool | None = None
    foreign: int = 0

    def steps(self, line: Any, where: str) -> list[live_sources.Step]:
        if isinstance(line, dict) and line.get("type") in ("user", "assistant"):
            side = bool(line.get("isSidechain"))
            if self.sidechain is None:
                self.sidechain = side
            elif side != self.sidechain:
                self.foreign += 1
                if self.foreign == 1:
                    log.warning(
                        "%s: a subagent's line inside a session file is not followed "
                        "live (nor are the next ones); import the file to store "
                        "them as their own conversation",
                        where,
                    )
                return []
        out: list[live_sources.Step] = []
        for action in self.mapper.feed(line, where):
            match action:
                case claude_code.NewMessage():
                    ids = (action.uuid,) if action.uuid else ()
                    gaps = tuple(gap.as_json() for gap in action.gaps)
                    out.append(
                        live_sources.NewMessage(
                            action.role, action.blocks, action.metadata, ids, self.marker, gaps
                        )
                    )
                    self.marker = None
                case claude_code.AppendBlocks():
                    ids = (action.uuid,) if action.uuid else ()
                    gaps = tuple(gap.as_json() for gap in action.gaps)
                    out.append(live_sources.MoreBlocks(action.blocks, action.metadata, ids, gaps))
                case claude_code.Marker():
                    self.marker = {"kind": action.kind, **action.detail}
                case claude_code.Title():
                    if action.text:
                        out.append(live_sources.Describe(title=action.text))
                case claude_code.Ignored():
                    pass
        session = dict(self.mapper.session)
        if session != self.described:
            out.append(live_sources.Describe(metadata=session))
            self.described = session
        return out


class FileFollower:
    """One followed file: its cursor, its open handle and its translator."""

    def __init__(self, path: Path, server: TailServer | None = None) -> None:
        self.path = path
        self.server = server  # None: stored here; else sent through the running server
        self.key = str(path.resolve())
        self.cursor: TailCursor | None = ingest_reads.tail_cursor(self.key)
        self.handle: IO[bytes] | None = None
        self.seen: tuple[int, int, int] | None = None  # (inode, size, mtime) at last read
        self.translator = Translator()
        self.known: set[str] = set()
        self.resumed = False
        # Before the file holds anything worth a conversation there is no cursor yet.
        self.offset = 0
        self.lines = 0

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def poll(self) -> int:
        """Store what was written since the last poll; the number of steps stored."""
        try:
            status = os.stat(self.path)
        except FileNotFoundError:
            return self._drain_and_close()  # removed or being rotated: finish what we had
        if not stat.S_ISREG(status.st_mode):
            return self._drain_and_close()  # a FIFO or device in its place: never opened
        stored = 0
        if self.handle is not None and os.fstat(self.handle.fileno()).st_ino != status.st_ino:
            stored += self._drain_and_close()  # rotated: the old file's last lines first
        seen = (status.st_ino, status.st_size, status.st_mtime_ns)
        idle = time.time() - status.st_mtime > IDLE_CLOSE
        if seen == self.seen:
            if idle:
                self.close()  # a folder of old sessions must not hold a descriptor each
            return stored
        if self.handle is None:
            self.handle = open_regular(self.path)
            if self.handle is None:
                return stored
        self.seen = seen
        try:
            stored += self._read()
        except ServerUnreachable:
            self._forget_read()
            raise
        if idle:
            self.close()
        return stored

    def _forget_read(self) -> None:
        """Unsent lines are read again on the next poll: from the cursor, the translator's
        state rebuilt as after a restart (it has consumed them already)."""
        self.seen = None
        self.resumed = False
        self.translator = Translator()
        if self.cursor is None:
            self.offset, self.lines = 0, 0

    def _drain_and_close(self) -> int:
        if self.handle is None:
            return 0
        try:
            return self._read()
        finally:
            self.close()
            self.seen = None

    def _read(self) -> int:
        assert self.handle is not None
        size = os.fstat(self.handle.fileno()).st_size
        self._check_identity(size)
        stored = 0
        while True:
            offset = self.cursor.offset if self.cursor is not None else self.offset
            if size <= offset:
                return stored
            self.handle.seek(offset)
            data = self.handle.read(min(size - offset, READ_LIMIT))
            lines, used = live_sources.complete_lines(data)
            if not lines:
                if len(data) >= READ_LIMIT:  # a line longer than we read at once
                    log.warning(
                        "%s: a line over %d bytes at byte %d is skipped",
                        self.path,
                        READ_LIMIT,
                        offset,
                    )
                    stored += self._skip_long_line(offset)
                    continue
                return stored
            stored += self._store(lines, offset)
            if used < len(data) or offset + used >= size:
                return stored

    def _check_identity(self, size: int) -> None:
        """Start again from the top if the file is not the one the cursor was read from."""
        if self.cursor is None:
            return
        if not self.resumed:
            self.cursor.refresh_from_db()  # after a failed send, where it really is
        assert self.handle is not None
        position = live_sources.Position(
            self.cursor.offset, self.cursor.head_len, self.cursor.head_digest
        )
        self.handle.seek(0)
        head = self.handle.read(live_sources.HEAD_BYTES)
        if not self.resumed:
            self._resume(position, size, head)
            return
        if not live_sources.still_the_same_file(position, size, head):
            log.info("%s was truncated or replaced: reading it again from its start", self.path)
            self._restart()

    def _resume(self, position: live_sources.Position, size: int, head: bytes) -> None:
        """After a restart: the translator's state comes back by reading again, without
        storing, the lines the cursor is past; a different file is read from its start."""
        self.resumed = True
        assert self.cursor is not None
        self.known = selectors.source_uuids(self.cursor.conversation)
        if not live_sources.still_the_same_file(position, size, head):
            self._restart()
            return
        for number, line in self._lines_before(position.offset):
            with contextlib.suppress(ImportFormatError):  # logged when first read
                self.translator.steps(line, f"line {number}")

    def _restart(self) -> None:
        assert self.cursor is not None
        tail_rewind(cursor=self.cursor)
        self.translator = Translator()

    def _lines_before(self, offset: int) -> Iterator[tuple[int, Any]]:
        assert self.handle is not None
        self.handle.seek(0)
        number = 0
        read = 0
        for raw in self.handle:
            if read + len(raw) > offset:
                break
            read += len(raw)
            number += 1
            try:
                yield number, strictjson.loads(raw)
            except strictjson.StrictJSONError:
                continue

    def _store(self, lines: list[bytes], offset: int) -> int:
        stored = 0
        end = offset
        number = self.cursor.lines if self.cursor is not None else self.lines
        for first in range(0, len(lines), BATCH_LINES):
            batch: list[tuple[int, int, list[live_sources.Step]]] = []  # (end, line number, steps)
            for raw in lines[first : first + BATCH_LINES]:
                number += 1
                end += len(raw) + 1
                batch.append((end, number, self._translate(raw, number)))
            steps = [step for _end, _number, line_steps in batch for step in line_steps]
            try:
                stored += self._apply(steps, end, number)
            except IngestError as exc:
                # One bad line must not stop the file: store the others line by line.
                log.warning(
                    "%s: lines %d to %d not all storable (%s); storing them one by one",
                    self.path,
                    batch[0][1],
                    number,
                    exc,
                )
                for line_end, line_number, line_steps in batch:
                    try:
                        stored += self._apply(line_steps, line_end, line_number)
                    except IngestError as one:
                        log.warning("%s: line %d was not stored: %s", self.path, line_number, one)
                        stored += self._apply([], line_end, line_number)
        return stored

    def _translate(self, raw: bytes, number: int) -> list[live_sources.Step]:
        if not raw.strip():
            return []
        where = f"line {number}"  # as an import names it; the log adds the file
        try:
            return self.translator.steps(strictjson.loads(raw, root="line"), where)
        except strictjson.StrictJSONError as exc:
            log.warning("%s: %s is not storable JSON (%s); skipped", self.path, where, exc)
        except ImportFormatError as exc:
            log.warning("%s: %s; skipped", self.path, exc)
        return []

    def _apply(self, steps: list[live_sources.Step], end: int, lines: int) -> int:
        if self.cursor is None:
            if not steps:
                self.offset, self.lines = end, lines  # nothing worth a conversation yet
                return 0
            parent = _parent_session(self.path)
            parent_cursor = ingest_reads.tail_cursor(str(parent.resolve())) if parent else None
            self.cursor = tail_cursor_create(
                path=self.key,
                title=self.path.stem,
                metadata={
                    # As an import of the file describes it, so its page says the same.
                    "import": {
                        "format": "claude-code",
                        "file_name": self.path.name,
                        "followed": True,
                    },
                    "gaps": [
                        {"kind": kind, "detail": detail, "where": ""}
                        for kind, detail in claude_code.NOT_RECORDED
                    ],
                },
                parent=parent_cursor.conversation if parent_cursor is not None else None,
            )
            self.resumed = True
        assert self.handle is not None
        self.handle.seek(0)
        head = self.handle.read(min(end, live_sources.HEAD_BYTES))
        status = os.fstat(self.handle.fileno())
        # Through the running server's API (`tail --url`), or stored here.
        store = (
            tail_append if self.server is None else functools.partial(tail_send, server=self.server)
        )
        return store(
            cursor=self.cursor,
            steps=steps,
            position=live_sources.Position(end, len(head), live_sources.head_digest(head)),
            lines=lines,
            known=self.known,
            device=status.st_dev,
            inode=status.st_ino,
        )

    def _skip_long_line(self, offset: int) -> int:
        assert self.handle is not None
        self.handle.seek(offset)
        skipped = 0
        while chunk := self.handle.read(1024 * 1024):
            end = chunk.find(b"\n")
            if end >= 0:
                skipped += end + 1
                break
            skipped += len(chunk)
        else:
            return 0  # its end is not written yet
        lines = (self.cursor.lines if self.cursor is not None else self.lines) + 1
        return self._apply([], offset + skipped, lines)


def _parent_session(path: Path) -> Path | None:
    """Claude Code writes a subagent's lines to SESSION/subagents/agent-ID.jsonl."""
    if path.parent.name != "subagents":
        return None
    return path.parent.parent.with_suffix(".jsonl")


def open_regular(path: Path) -> IO[bytes] | None:
    """`path` opened for reading if it is a regular file, else None. Never blocks: a FIFO
    swapped in after the stat would hang a plain `open()` until a writer came, and with it
    every other file followed and the handling of SIGTERM."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


class Tail:
    """Follows a file, or every session file under a directory (new ones as they appear)."""

    def __init__(self, root: Path, server: TailServer | None = None) -> None:
        self.root = root
        self.server = server
        self.followers: dict[Path, FileFollower] = {}
        self.dropped: set[Path] = set()  # their conversation was deleted while followed

    def files(self) -> list[Path]:
        if self.root.is_dir():
            # Shallower first: a session's file before its subagents', so they can link.
            # Regular files only (is_file follows links): a FIFO is never followed.
            found = (p for p in self.root.rglob(PATTERN) if p.is_file())
            return sorted(found, key=lambda p: (len(p.parts), str(p)))
        return [self.root]

    def discover(self) -> list[Path]:
        """Start following files not followed yet; returns them."""
        new = [p for p in self.files() if p not in self.followers and p not in self.dropped]
        for path in new:
            self.followers[path] = FileFollower(path, self.server)
        return new

    def poll(self) -> int:
        stored = 0
        for path, follower in list(self.followers.items()):
            try:
                stored += follower.poll()
            except ObjectDoesNotExist:
                # Deleted by an operator (or retention): not brought back while this runs.
                log.warning("%s: its conversation was deleted; no longer following it", path)
                follower.close()
                del self.followers[path]
                self.dropped.add(path)
        return stored

    def close(self) -> None:
        for follower in self.followers.values():
            follower.close()
