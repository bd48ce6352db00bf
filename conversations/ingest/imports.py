"""Imports (docs/contract.md §6): a transcript read by `core.importers`, stored whole or
not at all; the same bytes again answer with the first conversation."""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from pydantic import ValidationError

from conversations.core import importers
from conversations.record import events, metrics
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Block, Conversation
from conversations.record.schemas import (
    BLOCK_ADAPTER,
    BlockIn,
    ConversationIn,
    MessageIn,
    TextIn,
    error_sentence,
)
from conversations.record.services.appending import messages_append
from conversations.record.services.search_entries import index_title

IMPORT_TITLE_MAX = 500


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while an import builds its rows.

    An import creates hundreds of thousands of short-lived objects (parsed lines, schema
    values, model rows); each gen-2 pass walks all of them, which more than doubled the
    time of a 10,000-message import. Reference counting still frees everything; cycles
    wait until the import is done. The previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class ImportOutcome:
    """The stored conversation; `created` is False when these bytes were imported before."""

    conversation: Conversation
    created: bool
    messages: int
    blocks: int
    gaps: list[dict[str, Any]]
    linked: list[Conversation]


def transcript_import(
    *, raw: bytes, format: str | None, title: str | None, file_name: str | None
) -> ImportOutcome:
    """Read a whole transcript file (`format` or detected) and store it as
    `conversation_import` does; raises ImportFormatError or IngestError naming the problem.

    The format is chosen before the same bytes are looked for: a named format the content
    shows to be another is refused even when those bytes were imported before."""
    if format is not None and format not in importers.FORMATS:
        raise IngestError("format", f"{format!r} is not one of {', '.join(importers.FORMATS)}")
    if title is not None and not 1 <= len(title) <= IMPORT_TITLE_MAX:
        raise IngestError("title", f"must be 1 to {IMPORT_TITLE_MAX} characters")
    chosen = importers.choose(raw, format)
    sha256 = hashlib.sha256(raw).hexdigest()
    earlier = import_find(sha256=sha256, format=chosen)
    if earlier is not None:
        return earlier
    with gc_paused():
        imported = importers.read_as(raw, chosen)
        return conversation_import(
            sha256=sha256, imported=imported, title=title, file_name=file_name
        )


def conversation_import(
    *,
    sha256: str,
    imported: importers.Imported,
    title: str | None = None,
    file_name: str | None = None,
) -> ImportOutcome:
    """Store an import in one transaction through `messages_append` (bulk inserts; on commit
    conversation.created and one message_added per conversation stored); the same bytes
    again return the first conversation and store nothing.

    Those bytes stored by another format are an IngestError, never the answer (the same
    bytes rule is per reading, docs/contract.md §6 rule 6). Blocks are validated as at
    ingest first: an image that is not what it claims becomes a
    gap marker; any other invalid block is an IngestError naming its source path.
    """
    digest = sha256
    earlier = import_find(sha256=digest, format=imported.format)
    if earlier is not None:
        return earlier
    with gc_paused():
        return _import(digest, imported, title, file_name)


def _import(
    digest: str, imported: importers.Imported, title: str | None, file_name: str | None
) -> ImportOutcome:
    main, gaps = _prepared(imported)
    linked = [_prepared(part) for part in imported.linked]
    metadata: dict[str, Any] = {
        **imported.metadata,
        "import": {
            "format": imported.format,
            "file_name": file_name,
            "sha256": digest,
            "stats": imported.stats,
        },
        "gaps": gaps,
    }
    chosen = title or imported.title or file_name or f"{imported.format} import {digest[:12]}"
    try:
        with transaction.atomic():
            conversation = _store(chosen[:IMPORT_TITLE_MAX], metadata, main, digest)
            stored_linked = []
            for index, ((part, part_gaps), source) in enumerate(
                zip(linked, imported.linked, strict=True)
            ):
                part_metadata = {
                    **source.metadata,
                    "import": {"format": source.format, "file_name": file_name, "sha256": digest},
                    "linked_from": str(conversation.id),
                    "gaps": part_gaps,
                }
                kind = "sidechain" if source.format == "claude-code" else "linked conversation"
                part_title = source.title or f"{chosen} — {kind} {index + 1}"
                stored_linked.append(
                    _store(part_title[:IMPORT_TITLE_MAX], part_metadata, part, None)
                )
            if stored_linked:
                conversation.metadata["linked"] = [str(c.id) for c in stored_linked]
                conversation.save(update_fields=["metadata"])
    except IntegrityError:
        # A concurrent import of the same bytes committed first: answer with its conversation.
        earlier = import_find(sha256=digest, format=imported.format)
        if earlier is None:
            raise
        return earlier
    blocks = sum(len(message.blocks) for message in main)
    return ImportOutcome(conversation, True, len(main), blocks, gaps, stored_linked)


def _prepared(imported: importers.Imported) -> tuple[list[MessageIn], list[dict[str, Any]]]:
    """The import's messages validated as at ingest, and its gaps (an invalid image adds one)."""
    gaps = [gap.as_json() for gap in imported.gaps]
    messages: list[MessageIn] = []
    for index, message in enumerate(imported.messages):
        where = str(message.metadata.get("source", f"message {index}"))
        checked, added = message_validated(message, index, where)
        messages.append(checked)
        gaps.extend(added)
    return messages, gaps


def message_validated(
    message: importers.ImportedMessage, index: int, where: str
) -> tuple[MessageIn, list[dict[str, Any]]]:
    """One imported message validated as at ingest (docs/contract.md §6 rule 3): an image
    the record refuses becomes a `[image (…): not stored — why]` text block and a gap
    (placed at `index`); anything else refused is an IngestError naming `where`."""
    blocks: list[BlockIn] = []
    gaps: list[dict[str, Any]] = []
    for seq, block in enumerate(message.blocks):
        try:
            blocks.append(BLOCK_ADAPTER.validate_python(block))
        except ValidationError as exc:
            if block.get("type") != "image":
                raise IngestError(f"{where}, block {seq}", error_sentence(exc)) from None
            problem = error_sentence(exc).split(": ", 1)[-1]
            media_type = str(block.get("media_type"))
            text = f"[image ({media_type}): not stored — {problem}]"
            origin = {"type": "image", "media_type": media_type, "problem": problem}
            blocks.append(TextIn(type="text", text=text, origin=origin))
            gaps.append(
                {
                    "kind": "image",
                    "detail": f"{media_type}, {problem}",
                    "where": f"{where}, block {seq}",
                    "message": index,
                    "block": seq,
                }
            )
    try:
        return MessageIn(role=message.role, blocks=blocks, metadata=message.metadata), gaps
    except ValidationError as exc:
        raise IngestError(f"message {index}", error_sentence(exc)) from None


def _store(
    title: str, metadata: dict[str, Any], messages: list[MessageIn], digest: str | None
) -> Conversation:
    try:  # the source's own top-level keys are in the metadata: docs/contract.md §3's limits apply
        checked = ConversationIn(title=title, metadata=metadata)
    except ValidationError as exc:
        raise IngestError("metadata", error_sentence(exc)) from None
    conversation = Conversation.objects.create(
        title=checked.title, metadata=checked.metadata, import_sha256=digest
    )
    index_title(conversation)
    if digest is not None:  # the import itself, not one of its linked parts
        transaction.on_commit(metrics.IMPORTS.inc)
    events.publish_on_commit(
        {"type": "conversation.created", "conversation_id": str(conversation.id)}
    )
    if messages:
        messages_append(conversation=conversation, messages=messages)
    return conversation


def import_find(*, sha256: str, format: importers.Format) -> ImportOutcome | None:
    """The outcome of an earlier import of the bytes with this SHA-256 read as `format`,
    if any; an IngestError when another format read them (its conversation is not theirs)."""
    conversation = Conversation.objects.filter(import_sha256=sha256).first()
    if conversation is None:
        return None
    stored = (conversation.metadata.get("import") or {}).get("format")
    if stored != format:
        raise IngestError(
            "format",
            f"these bytes were imported before as {stored} (conversation {conversation.id}), "
            f"not {format}: delete that conversation to import them as {format}",
        )
    blocks = Block.objects.filter(message__conversation=conversation).count()
    linked_ids = conversation.metadata.get("linked") or []
    linked = list(Conversation.objects.filter(pk__in=linked_ids))
    gaps = conversation.metadata.get("gaps") or []
    return ImportOutcome(conversation, False, conversation.message_count, blocks, gaps, linked)
