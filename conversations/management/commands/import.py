"""`manage.py import FILE… [--format] [--title]`: one line per file (id, messages, blocks,
gaps, URL). Claude Code files are streamed line by line; others are read whole. Both are
read in bounded pieces: a line, or a whole file of another format, over the body limit
(REPLAY_MAX_BODY_MB, as on the API) stops that file with an error naming the limit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.core import importers
from conversations.ingest.imports import (
    ImportOutcome,
    conversation_import,
    gc_paused,
    transcript_import,
)
from conversations.record.errors import IngestError


class Command(BaseCommand):
    help = "Import transcript files (docs/contract.md §6); the same bytes again store nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--format", choices=importers.FORMATS, default=None)
        parser.add_argument("--title", default=None)

    def handle(self, *args: Any, files: list[str], **options: Any) -> None:
        failed = 0
        for name in files:
            try:
                outcome = self._one(Path(name), options["format"], options["title"])
            except importers.ImportFormatError as exc:
                failed += 1
                named = exc.format or options["format"]
                self.stderr.write(f"{name}: not imported{f' as {named}' if named else ''}: {exc}")
                continue
            except (IngestError, OSError) as exc:
                failed += 1
                self.stderr.write(f"{name}: not imported: {exc}")
                continue
            conversation = outcome.conversation
            state = "imported" if outcome.created else "already imported"
            self.stdout.write(
                f"{conversation.id} {outcome.messages} messages {outcome.blocks} blocks "
                f"{len(outcome.gaps)} gaps {conversation.get_absolute_url()} "
                f"({name}: {state})"
            )
        if failed:
            raise CommandError(f"{failed} of {len(files)} files were not imported.")

    def _one(self, path: Path, format: Any, title: str | None) -> ImportOutcome:
        limit = settings.REPLAY_MAX_BODY_MB * 1024 * 1024
        with path.open("rb") as file, gc_paused():
            first = _line(file, limit, 1)
            if not first:  # nothing at all, whatever the format: worded as the API words it
                raise importers.EmptyFileError()
            if format == "claude-code" or (format is None and _is_jsonl(first)):
                digest = hashlib.sha256()
                lines = _hashed_lines(_lines(file, first, limit), digest)
                imported = importers.read_lines(lines)
                sha256 = digest.hexdigest()
            else:
                raw = first + file.read(limit + 1 - len(first))
                if len(raw) > limit:
                    raise importers.ImportFormatError(
                        "file",
                        f"is over the {settings.REPLAY_MAX_BODY_MB} MB limit "
                        "(REPLAY_MAX_BODY_MB); a Claude Code file is streamed instead",
                    )
                # As the API: the format chosen (a named one checked) before the same bytes.
                return transcript_import(raw=raw, format=format, title=title, file_name=path.name)
        return conversation_import(
            sha256=sha256, imported=imported, title=title, file_name=path.name
        )


def _line(file: IO[bytes], limit: int, number: int) -> bytes:
    """One line of at most `limit` bytes (a file with no newline, such as /dev/zero, ends
    here instead of filling memory)."""
    line = file.readline(limit + 1)
    if len(line) > limit:
        raise importers.ImportFormatError(
            f"line {number}",
            f"is over the {settings.REPLAY_MAX_BODY_MB} MB limit (REPLAY_MAX_BODY_MB)",
        )
    return line


def _lines(file: IO[bytes], first: bytes, limit: int) -> Iterator[bytes]:
    """The file's lines from the first (already read: no seek, so pipes work too)."""
    number, line = 1, first
    while line:
        yield line
        number += 1
        line = _line(file, limit, number)


def _is_jsonl(first: bytes) -> bool:
    """The first line is a whole JSON object of a session file (then stream the rest)."""
    try:
        value = json.loads(first)
        return isinstance(value, dict) and importers.detect(first) == "claude-code"
    except (ValueError, RecursionError, importers.ImportFormatError):
        return False


def _hashed_lines(lines: Iterable[bytes], digest: Any) -> Iterator[bytes]:
    for line in lines:
        digest.update(line)
        yield line
