"""The one write path: every conversation, message and block is created here.

Callers (API, admin, management commands, the demo loader) pass validated
`schemas` values. Each function is atomic and announces what it stored on commit.
"""

from __future__ import annotations

import gc
import hashlib
import secrets
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_never

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from conversations.core import importers, replay
from conversations.record import events
from conversations.record.models import (
    ApiToken,
    Block,
    BlockType,
    Conversation,
    IdempotentResponse,
    Message,
    Role,
)
from conversations.record.schemas import (
    BLOCK_ADAPTER,
    BlockIn,
    ConversationIn,
    ImageIn,
    MessageIn,
    ReasoningIn,
    TextIn,
    ToolResultIn,
    ToolUseIn,
    error_sentence,
    image_size,
)

UNKNOWN_TOOL = "unknown"
IDEMPOTENCY_TTL = timedelta(hours=48)


class IngestError(Exception):
    """A request that is well-formed but cannot be stored; `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def conversation_create(*, title: str, metadata: dict[str, Any] | None = None) -> Conversation:
    """Create an empty conversation; broadcasts conversation.created on commit."""
    with transaction.atomic():
        conversation = Conversation.objects.create(title=title, metadata=metadata or {})
        events.publish_on_commit(
            {"type": "conversation.created", "conversation_id": str(conversation.id)}
        )
    return conversation


def conversation_update(
    *, conversation: Conversation, title: str, metadata: dict[str, Any]
) -> Conversation:
    """Change what describes a conversation (never its messages)."""
    conversation.title = title
    conversation.metadata = metadata
    conversation.save(update_fields=["title", "metadata", "updated_at"])
    return conversation


def conversation_delete(*, conversation: Conversation) -> tuple[int, int]:
    """Delete a conversation with its messages and blocks, whole or not at all; returns
    (messages, blocks) deleted. Broadcasts conversation.deleted on commit."""
    with transaction.atomic():
        locked = _lock(conversation)  # no append can land in a half-deleted conversation
        # Children first, each in one statement: the collector would load every message.
        blocks, _ = Block.objects.filter(message__conversation=locked).delete()
        messages, _ = Message.objects.filter(conversation=locked).only("pk").delete()
        Conversation.objects.filter(pk=locked.pk).delete()
        events.publish_on_commit(
            {"type": "conversation.deleted", "conversation_id": str(locked.id)}
        )
    return messages, blocks


def conversations_prune(
    *, older_than: timedelta, dry_run: bool = False
) -> list[tuple[uuid.UUID, str]]:
    """Delete (unless `dry_run`) every conversation without activity for `older_than`,
    one transaction each through conversation_delete; returns their (id, title)."""
    cutoff = timezone.now() - older_than
    stale = list(
        Conversation.objects.filter(updated_at__lt=cutoff)
        .order_by("updated_at", "id")
        .values_list("id", "title")
    )
    if not dry_run:
        for pk, _title in stale:
            # Activity since the list was read keeps a conversation (it is no longer stale).
            found = Conversation.objects.filter(pk=pk, updated_at__lt=cutoff).first()
            if found is not None:
                conversation_delete(conversation=found)
    return stale


def message_append(
    *,
    conversation: Conversation,
    role: str,
    blocks: Sequence[BlockIn],
    metadata: dict[str, Any] | None = None,
) -> tuple[Message, list[Block]]:
    """Append a message and its blocks, whole or not at all: `messages_append` of one.

    Broadcasts conversation.message_added on commit.
    """
    if role not in Role.values:
        raise IngestError("role", f"{role!r} is not one of {', '.join(Role.values)}")
    _check_images(role, blocks, "blocks")
    [(message, rows)] = _append(conversation, [(role, blocks, metadata or {})])
    return message, rows


def messages_append(
    *, conversation: Conversation, messages: Sequence[MessageIn]
) -> list[tuple[Message, list[Block]]]:
    """Append many messages with their blocks in one transaction, whole or not at all.

    Bulk inserts (statements bounded by the database's parameter limit, not one per row);
    tool_result names resolve across the batch as they would one message at a time.
    Broadcasts ONE conversation.message_added, for the last message, on commit.
    """
    if not messages:
        raise IngestError("messages", "must hold at least one message")
    for index, message in enumerate(messages):
        _check_images(message.role, message.blocks, f"messages[{index}].blocks")
    return _append(conversation, [(m.role, m.blocks, m.metadata) for m in messages])


def block_append(*, message: Message, block: BlockIn) -> Block:
    """Append one block at the end of a message; broadcasts conversation.block_added on commit."""
    _check_images(message.role, [block], "block")
    with transaction.atomic():
        locked = _lock(message.conversation)
        # The conversation lock serialises appends, so this count is current.
        current = Message.objects.get(pk=message.pk)
        names = _resolve_names(locked, [block], up_to_message_seq=current.seq)
        row = _row(current, current.block_count, block, names[0])
        row.save(force_insert=True)
        Message.objects.filter(pk=current.pk).update(block_count=F("block_count") + 1)
        _touch(locked)
        message.block_count = current.block_count + 1
        events.publish_on_commit(
            {
                "type": "conversation.block_added",
                "conversation_id": str(locked.id),
                "message_seq": current.seq,
                "block_seq": row.seq,
            }
        )
    return row


def _append(
    conversation: Conversation,
    messages: Sequence[tuple[str, Sequence[BlockIn], dict[str, Any]]],
) -> list[tuple[Message, list[Block]]]:
    """The one append path: lock, insert messages then blocks in bulk, count, announce.

    The conversation row is locked, so `seq` stays dense under concurrent writers.
    """
    with transaction.atomic():
        locked = _lock(conversation)
        first = locked.message_count
        names = _resolve_names(
            locked,
            [block for _, blocks, _ in messages for block in blocks],
            up_to_message_seq=first - 1,
        )
        now = timezone.now()
        stored = [
            Message(
                conversation=locked,
                seq=first + index,
                role=role,
                block_count=len(blocks),
                metadata=metadata,
                created_at=now,
            )
            for index, (role, blocks, metadata) in enumerate(messages)
        ]
        _bulk_insert(Message, stored)
        rows: list[list[Block]] = []
        next_name = iter(names)
        for message, (_, blocks, _) in zip(stored, messages, strict=True):
            rows.append(
                [_row(message, seq, block, next(next_name)) for seq, block in enumerate(blocks)]
            )
        _bulk_insert(Block, [row for message_rows in rows for row in message_rows])
        _touch(locked, message_count=F("message_count") + len(stored))
        conversation.message_count = first + len(stored)
        last = stored[-1]
        events.publish_on_commit(
            {
                "type": "conversation.message_added",
                "conversation_id": str(locked.id),
                "message_seq": last.seq,
                "block_count": last.block_count,
            }
        )
    return list(zip(stored, rows, strict=True))


PLAIN_FIELDS = {"CharField", "TextField", "PositiveIntegerField", "BooleanField"}


def _bulk_insert(model: type[Message] | type[Block], objs: Sequence[Message | Block]) -> None:
    """Insert `objs` and set their ids, in multi-row INSERTs of as many rows as the
    database's parameter limit allows: a bounded number of statements.

    `bulk_create` does the same, but prepares each value's placeholder through the query
    compiler, which costs more than the database does for a 10,000-message batch.
    """
    if not objs:
        return
    if not connection.features.can_return_rows_from_bulk_insert:
        model.objects.bulk_create(objs)  # type: ignore[arg-type]
        return
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    # Plain ints, strings and bools go as they are; the rest (JSON, datetimes, UUID keys)
    # through their field's conversion.
    prepared = {f.attname for f in fields if f.get_internal_type() not in PLAIN_FIELDS}
    quote = connection.ops.quote_name
    head = (
        f"INSERT INTO {quote(model._meta.db_table)} "
        f"({', '.join(quote(str(f.column)) for f in fields)}) VALUES "
    )
    # The database answers the new ids in the order of the rows, as bulk_create relies on.
    tail = f" RETURNING {quote(str(model._meta.pk.column))}"
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    limit = connection.features.max_query_params
    per_statement = max(1, limit // len(fields)) if limit else len(objs)
    with connection.cursor() as cursor:
        for start in range(0, len(objs), per_statement):
            chunk = objs[start : start + per_statement]
            params: list[Any] = []
            for obj in chunk:
                for f in fields:
                    value = getattr(obj, f.attname)
                    if f.attname in prepared:
                        value = f.get_db_prep_save(value, connection)
                    params.append(value)
            cursor.execute(head + ", ".join([row_sql] * len(chunk)) + tail, params)
            for obj, (pk,) in zip(chunk, cursor.fetchall(), strict=True):
                obj.pk = pk
                obj._state.adding = False


def api_token_create(*, label: str) -> tuple[ApiToken, str]:
    """Create a token; the clear token is returned once and only its SHA-256 is kept."""
    clear = f"rpl_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(label=label, digest=token_digest(clear), prefix=clear[:8])
    return token, clear


def api_token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def token_digest(clear: str) -> str:
    return hashlib.sha256(clear.encode()).hexdigest()


def idempotent_response_save(
    *, token: ApiToken, key: str, fingerprint: str, status: int, body: bytes
) -> None:
    """Keep a POST's first answer (inside the POST's transaction) and forget expired ones."""
    IdempotentResponse.objects.filter(created_at__lt=timezone.now() - IDEMPOTENCY_TTL).delete()
    IdempotentResponse.objects.create(
        token=token, key=key, fingerprint=fingerprint, status=status, body=body
    )


def _lock(conversation: Conversation) -> Conversation:
    # select_for_update locks the row on PostgreSQL; SQLite's IMMEDIATE transactions
    # already hold the database write lock from BEGIN.
    return Conversation.objects.select_for_update().get(pk=conversation.pk)


def _touch(conversation: Conversation, **changes: Any) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now(), **changes)


def _check_images(role: str, blocks: Iterable[BlockIn], field: str) -> None:
    """Images only in user messages; `field` is the blocks' list (`…blocks`) or `block`."""
    if role == Role.USER:
        return
    for index, block in enumerate(blocks):
        if isinstance(block, ImageIn):
            where = field if field == "block" else f"{field}[{index}]"
            raise IngestError(where, f"images may only be in user messages, not {role}")


def _resolve_names(
    conversation: Conversation, blocks: Sequence[BlockIn], *, up_to_message_seq: int
) -> list[str]:
    """The stored name of each block's tool: a result without one takes the name of the
    latest earlier tool_use with its id in the conversation, else `unknown`."""
    wanted: set[str] = set()
    called: set[str] = set()  # ids a tool_use earlier in `blocks` already names
    for block in blocks:
        if isinstance(block, ToolUseIn):
            called.add(block.id)
        elif (
            isinstance(block, ToolResultIn)
            and block.name is None
            and block.tool_use_id not in called
        ):
            wanted.add(block.tool_use_id)
    known: dict[str, str] = {}
    ordered = sorted(wanted)
    # One query unless the ids outgrow the database's parameter limit (SQLite's real one).
    limit = connection.features.max_query_params
    chunk = max(1, limit - 10) if limit else max(1, len(ordered))
    for start in range(0, len(ordered), chunk):
        earlier = (
            Block.objects.filter(
                message__conversation=conversation,
                message__seq__lte=up_to_message_seq,
                type=BlockType.TOOL_USE,
                call_id__in=ordered[start : start + chunk],
            )
            .order_by("message__seq", "seq")
            .values_list("call_id", "name")
        )
        known.update(earlier)  # later rows overwrite earlier ones: the latest wins
    names: list[str] = []
    for block in blocks:
        if isinstance(block, ToolUseIn):
            known[block.id] = block.name
            names.append(block.name)
        elif isinstance(block, ToolResultIn):
            names.append(block.name or known.get(block.tool_use_id, UNKNOWN_TOOL))
        else:
            names.append("")
    return names


def _row(message: Message, seq: int, block: BlockIn, name: str) -> Block:
    row = Block(message=message, seq=seq, type=block.type, name=name, origin=block.origin)
    match block:
        case TextIn(text=text) | ReasoningIn(text=text):
            row.text = text
        case ToolUseIn(id=call_id, input=value):
            row.call_id = call_id
            row.input_json = replay.tool_input_json(value)
        case ToolResultIn(tool_use_id=call_id, content=content, is_error=is_error):
            row.call_id = call_id
            row.text = content
            row.is_error = is_error
        case ImageIn(media_type=media_type, data=data):
            row.media_type = media_type
            row.data = data
            row.width, row.height = image_size(data, media_type)
        case _:
            assert_never(block)
    return row


# Imports (SPEC §6): a transcript read by `core.importers`, stored whole or not at all.

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
    `conversation_import` does; raises ImportFormatError or IngestError naming the problem."""
    if format is not None and format not in importers.FORMATS:
        raise IngestError("format", f"{format!r} is not one of {', '.join(importers.FORMATS)}")
    if title is not None and not 1 <= len(title) <= IMPORT_TITLE_MAX:
        raise IngestError("title", f"must be 1 to {IMPORT_TITLE_MAX} characters")
    sha256 = hashlib.sha256(raw).hexdigest()
    earlier = import_find(sha256=sha256)
    if earlier is not None:
        return earlier
    with gc_paused():
        imported = importers.read(raw, format)
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

    Blocks are validated as at ingest first: an image that is not what it claims becomes a
    gap marker; any other invalid block is an IngestError naming its source path.
    """
    digest = sha256
    earlier = import_find(sha256=digest)
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
        earlier = import_find(sha256=digest)
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
        blocks: list[BlockIn] = []
        for seq, block in enumerate(message.blocks):
            where = f"{message.metadata.get('source', f'message {index}')}, block {seq}"
            try:
                blocks.append(BLOCK_ADAPTER.validate_python(block))
            except ValidationError as exc:
                if block.get("type") != "image":
                    raise IngestError(where, error_sentence(exc)) from None
                problem = error_sentence(exc).split(": ", 1)[-1]
                media_type = str(block.get("media_type"))
                text = f"[image ({media_type}): not stored — {problem}]"
                origin = {"type": "image", "media_type": media_type, "problem": problem}
                blocks.append(TextIn(type="text", text=text, origin=origin))
                gaps.append(
                    {
                        "kind": "image",
                        "detail": f"{media_type}, {problem}",
                        "where": where,
                        "message": index,
                        "block": seq,
                    }
                )
        try:
            messages.append(MessageIn(role=message.role, blocks=blocks, metadata=message.metadata))
        except ValidationError as exc:
            raise IngestError(f"message {index}", error_sentence(exc)) from None
    return messages, gaps


def _store(
    title: str, metadata: dict[str, Any], messages: list[MessageIn], digest: str | None
) -> Conversation:
    try:  # the source's own top-level keys are in the metadata: SPEC §3's limits apply
        checked = ConversationIn(title=title, metadata=metadata)
    except ValidationError as exc:
        raise IngestError("metadata", error_sentence(exc)) from None
    conversation = Conversation.objects.create(
        title=checked.title, metadata=checked.metadata, import_sha256=digest
    )
    events.publish_on_commit(
        {"type": "conversation.created", "conversation_id": str(conversation.id)}
    )
    if messages:
        messages_append(conversation=conversation, messages=messages)
    return conversation


def import_find(*, sha256: str) -> ImportOutcome | None:
    """The outcome of an earlier import of the bytes with this SHA-256, if any."""
    conversation = Conversation.objects.filter(import_sha256=sha256).first()
    if conversation is None:
        return None
    blocks = Block.objects.filter(message__conversation=conversation).count()
    linked_ids = conversation.metadata.get("linked") or []
    linked = list(Conversation.objects.filter(pk__in=linked_ids))
    gaps = conversation.metadata.get("gaps") or []
    return ImportOutcome(conversation, False, conversation.message_count, blocks, gaps, linked)
