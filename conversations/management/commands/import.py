"""`manage.py import FILE… [--format] [--title]`: one line per file (id, messages, blocks,
gaps, URL). Claude Code files are streamed line by line; others are read whole."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.core import importers
from conversations.record import services


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
            except (importers.ImportFormatError, services.IngestError, OSError) as exc:
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

    def _one(self, path: Path, format: Any, title: str | None) -> services.ImportOutcome:
        with path.open("rb") as file, services.gc_paused():
            if format == "claude-code" or (format is None and _is_jsonl(file)):
                digest = hashlib.sha256()
                imported = importers.read_lines(_hashed_lines(file, digest))
                sha256 = digest.hexdigest()
            else:
                raw = file.read()
                sha256 = hashlib.sha256(raw).hexdigest()
                earlier = services.import_find(sha256=sha256)
                if earlier is not None:
                    return earlier
                imported = importers.read(raw, format)
        return services.conversation_import(
            sha256=sha256, imported=imported, title=title, file_name=path.name
        )


def _is_jsonl(file: IO[bytes]) -> bool:
    """The first line is a whole JSON object of a session file (then stream the rest)."""
    first = file.readline()
    file.seek(0)
    try:
        value = json.loads(first)
        return isinstance(value, dict) and importers.detect(first) == "claude-code"
    except (ValueError, importers.ImportFormatError):
        return False


def _hashed_lines(file: IO[bytes], digest: Any) -> Iterator[bytes]:
    for line in file:
        digest.update(line)
        yield line
