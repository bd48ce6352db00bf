"""The one write path: every conversation, message and block is created here.

Callers (API, admin, management commands, the demo loader) pass validated
`schemas` values. Each function is atomic and announces what it stored on commit.
Whatever stores a block or a title also stores its search entry in the same
transaction (`_search_entries`, `_index_title`); entries go with their conversation.
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
from typing import Any, assert_never, cast

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from conversations.core import importers, list_status, live_sources, replay, search
from conversations.core.blocks import BlockKind, kind_named, tool_side
from conversations.record import events, selectors
from conversations.record.models import (
    ApiToken,
    Block,
    BlockType,
    Conversation,
    IdempotentResponse,
    Message,
    Role,
    SearchEntry,
    ShareLink,
    TailCursor,
    TraceConversation,
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
        _index_title(conversation)
        events.publish_on_commit(
            {"type": "conversation.created", "conversation_id": str(conversation.id)}
        )
    return conversation


def conversation_update(
    *, conversation: Conversation, title: str, metadata: dict[str, Any]
) -> Conversation:
    """Change what describes a conversation (never its messages)."""
    with transaction.atomic():
        conversation.title = title
        conversation.metadata = metadata
        conversation.save(update_fields=["title", "metadata", "updated_at"])
        _index_title(conversation)
    return conversation


def conversation_delete(*, conversation: Conversation) -> tuple[int, int]:
    """Delete a conversation with its messages and blocks, whole or not at all; returns
    (messages, blocks) deleted. Broadcasts conversation.deleted on commit."""
    with transaction.atomic():
        locked = _lock(conversation)  # no append can land in a half-deleted conversation
        # Children first, each in one statement: the collector would load every message.
        blocks, _ = Block.objects.filter(message__conversation=locked).delete()
        # Its search entries too (on SQLite the FTS5 index follows by trigger).
        SearchEntry.objects.filter(conversation=locked).delete()
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
        _insert_search_entries(
            locked,
            [
                entry
                for message, message_rows in zip(stored, rows, strict=True)
                for entry in _search_entries(message, message_rows)
            ],
        )
        added_blocks = sum(len(blocks) for _, blocks, _ in messages)
        # The list row's state: errors add up; the last message's open calls replace the
        # previous last message's; the latest model named is kept.
        errors = sum(1 for message_rows in rows for row in message_rows if row.is_error)
        unanswered = len(list_status.open_calls((_kind(row), row.call_id) for row in rows[-1]))
        model = list_status.latest_model(metadata for _, _, metadata in messages) or locked.model
        _touch(
            locked,
            message_count=F("message_count") + len(stored),
            block_count=F("block_count") + added_blocks,
            error_count=F("error_count") + errors,
            unanswered_calls=unanswered,
            model=model,
        )
        conversation.message_count = first + len(stored)
        conversation.block_count = locked.block_count + added_blocks
        conversation.error_count = locked.error_count + errors
        conversation.unanswered_calls = unanswered
        conversation.model = model
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
    rows = [
        [
            f.get_db_prep_save(getattr(obj, f.attname), connection)
            if f.attname in prepared
            else getattr(obj, f.attname)
            for f in fields
        ]
        for obj in objs
    ]
    # The database answers the new ids in the order of the rows, as bulk_create relies on.
    pks = _insert_rows(
        model._meta.db_table, [str(f.column) for f in fields], rows, str(model._meta.pk.column)
    )
    for obj, pk in zip(objs, pks, strict=True):
        obj.pk = pk
        obj._state.adding = False


def _insert_rows(
    table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], returning: str | None
) -> list[Any]:
    """Insert rows of prepared values in multi-row INSERTs of as many rows as the
    database's parameter limit allows (a bounded number of statements); the `returning`
    column of each, in order, when one is named."""
    quote = connection.ops.quote_name
    head = f"INSERT INTO {quote(table)} ({', '.join(quote(c) for c in columns)}) VALUES "
    tail = f" RETURNING {quote(returning)}" if returning else ""
    row_sql = "(" + ", ".join(["%s"] * len(columns)) + ")"
    limit = connection.features.max_query_params
    per_statement = max(1, limit // len(columns)) if limit else len(rows)
    answered: list[Any] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [value for row in chunk for value in row]
            cursor.execute(head + ", ".join([row_sql] * len(chunk)) + tail, params)
            if returning:
                answered += [value for (value,) in cursor.fetchall()]
    return answered


def block_append(*, message: Message, block: BlockIn) -> Block:
    """Append one block at the end of a message; broadcasts conversation.block_added on commit."""
    _check_images(message.role, [block], "block")
    with transaction.atomic():
        locked = _lock(message.conversation)
        # The conversation lock serialises appends, so this count is current.
        current = Message.objects.get(pk=message.pk)
        names = _resolve_names(locked, [block], up_to_message_seq=current.seq)
        row = _row(current, current.block_count, block, names[0])
        changes: dict[str, Any] = {"block_count": F("block_count") + 1}
        if row.is_error:
            changes["error_count"] = F("error_count") + 1
        if current.seq == locked.message_count - 1 and tool_side(kind_named(row.type)) is not None:
            # Only the last message's calls count; only this call's id can change.
            change = _open_change(current, row)
            if change:
                changes["unanswered_calls"] = F("unanswered_calls") + change
        row.save(force_insert=True)
        _insert_search_entries(locked, _search_entries(current, [row]))
        Message.objects.filter(pk=current.pk).update(block_count=F("block_count") + 1)
        _touch(locked, **changes)
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


def _kind(row: Block) -> BlockKind:
    return cast(BlockKind, row.type)


def _open_change(message: Message, row: Block) -> int:
    """How a new block `row` (not yet saved) changes the number of `message`'s open calls:
    +1, -1 or 0. Reads only the message's blocks with the same call id (an indexed column)."""
    earlier = (
        Block.objects.filter(message=message, call_id=row.call_id)
        .order_by("seq")
        .values_list("type", flat=True)
    )
    before = list_status.open_calls((cast(BlockKind, kind), row.call_id) for kind in earlier)
    after = list_status.open_calls([(_kind(row), row.call_id)], already=before)
    return int(row.call_id in after) - int(row.call_id in before)


def api_token_create(*, label: str) -> tuple[ApiToken, str]:
    """Create a token; the clear token is returned once and only its SHA-256 is kept."""
    clear = f"rpl_{secrets.token_urlsafe(32)}"
    token = ApiToken.objects.create(label=label, digest=token_digest(clear), prefix=clear[:8])
    return token, clear


def api_token_revoke(*, token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def api_token_delete(*, token: ApiToken) -> None:
    """Delete a token (with the answers kept for its Idempotency-Keys): for a temporary
    token that nobody needs listed once its work is done."""
    ApiToken.objects.filter(pk=token.pk).delete()


SHARE_TOKEN_BYTES = 32  # 256 random bits (docs/contract.md §8 asks for at least 128)
SHARE_MAX_EXPIRY = timedelta(days=30)
SHARE_DEFAULT_EXPIRY = timedelta(days=7)


def share_create(
    *,
    conversation: Conversation,
    created_by: Any = None,
    up_to_seq: int | None = None,
    expires_in: timedelta | None = SHARE_DEFAULT_EXPIRY,
    vision: bool | None = None,
    shape: str | None = None,
    images: bool = True,
) -> tuple[ShareLink, str]:
    """Create a share link; the clear token is returned once, only its SHA-256 is kept.

    `up_to_seq` must name a stored message; `expires_in` runs from 1 s to 30 days (None:
    never); a link without images cannot fix vision on. Raises IngestError naming the field.
    """
    if up_to_seq is not None and not 0 <= up_to_seq < conversation.message_count:
        last = conversation.message_count - 1
        raise IngestError(
            "up_to_seq",
            f"must name a stored message (0 to {last})"
            if last >= 0
            else "cannot freeze a conversation with no messages",
        )
    if expires_in is not None and not timedelta(seconds=1) <= expires_in <= SHARE_MAX_EXPIRY:
        raise IngestError("expires_in", "must be from 1 second up to 30 days, or null for none")
    if shape is not None and shape not in replay.SHAPES:
        raise IngestError("shape", f"must be one of {', '.join(replay.SHAPES)}, or null (free)")
    if vision and not images:
        raise IngestError("images", "a link without images cannot fix vision on")
    clear = secrets.token_urlsafe(SHARE_TOKEN_BYTES)
    link = ShareLink.objects.create(
        conversation=conversation,
        digest=token_digest(clear),
        created_by=created_by,
        up_to_seq=up_to_seq,
        vision=vision,
        shape=shape or "",
        images=images,
        expires_at=timezone.now() + expires_in if expires_in is not None else None,
    )
    return link, clear


def share_revoke(*, link: ShareLink) -> None:
    """Revoke a link (once); broadcasts share.revoked on commit, closing its sockets."""
    with transaction.atomic():
        updated = ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if updated:
            events.share_revoked_on_commit(link.pk)
    link.refresh_from_db(fields=["revoked_at"])


def share_viewed(*, link: ShareLink) -> None:
    """Count one view of a share page (a page load, not its images or downloads)."""
    ShareLink.objects.filter(pk=link.pk).update(
        view_count=F("view_count") + 1, last_viewed_at=timezone.now()
    )


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


def _index_title(conversation: Conversation) -> None:
    """Make the conversation's title entry hold its current title's words (untouched when
    they did not change: most updates are of the metadata)."""
    entries = SearchEntry.objects.filter(conversation=conversation, message_seq__isnull=True)
    found = search.index_words(conversation.title)
    if found == (entries.values_list("words", flat=True).first() or ""):
        return
    entries.delete()
    if found:
        SearchEntry.objects.create(conversation=conversation, words=found)


def _search_entries(message: Message, rows: Iterable[Block]) -> list[tuple[int, int, str]]:
    """The search entries (message seq, block seq, words) of a message's new blocks (none
    for a block without words); every path that stores blocks inserts these with them."""
    entries = []
    for row in rows:
        if found := search.index_words(search.block_text(selectors.block_value(row))):
            entries.append((message.seq, row.seq, found))
    return entries


def _insert_search_entries(conversation: Conversation, entries: list[tuple[int, int, str]]) -> None:
    """Insert a conversation's block entries as plain rows (`_insert_rows`): a
    10,000-message batch has tens of thousands of them, too many for model instances."""
    if not entries:
        return
    key = SearchEntry._meta.get_field("conversation").get_db_prep_save(conversation.pk, connection)
    _insert_rows(
        SearchEntry._meta.db_table,
        ("conversation_id", "message_seq", "block_seq", "words"),
        [(key, message_seq, block_seq, words) for message_seq, block_seq, words in entries],
        None,
    )


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


# Imports (docs/contract.md §6): a transcript read by `core.importers`, stored whole or not at all.

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
    try:  # the source's own top-level keys are in the metadata: docs/contract.md §3's limits apply
        checked = ConversationIn(title=title, metadata=metadata)
    except ValidationError as exc:
        raise IngestError("metadata", error_sentence(exc)) from None
    conversation = Conversation.objects.create(
        title=checked.title, metadata=checked.metadata, import_sha256=digest
    )
    _index_title(conversation)
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


# Following live sources (docs/contract.md §6 "Following live agents"): `manage.py tail` and
# `POST /v1/traces`. Both only ever append, each append idempotent by its source.


def message_in(
    role: str, blocks: Sequence[dict[str, Any]], metadata: dict[str, Any], field: str
) -> MessageIn:
    """An imported message (block dicts, `origin` included) validated exactly as at ingest;
    IngestError names the field under `field`."""
    try:
        return MessageIn.model_validate({"role": role, "blocks": blocks, "metadata": metadata})
    except ValidationError as exc:
        raise IngestError(field, error_sentence(exc)) from None


def blocks_in(blocks: Sequence[dict[str, Any]], field: str) -> list[BlockIn]:
    """Imported block dicts validated exactly as at ingest, `origin` included."""
    out: list[BlockIn] = []
    for index, block in enumerate(blocks):
        try:
            out.append(BLOCK_ADAPTER.validate_python(block))
        except ValidationError as exc:
            raise IngestError(f"{field}[{index}]", error_sentence(exc)) from None
    return out


def tail_cursor_create(
    *, path: str, title: str, metadata: dict[str, Any], parent: Conversation | None = None
) -> TailCursor:
    """The cursor of a file followed for the first time, with the conversation it feeds;
    a subagent's conversation and its `parent` session's are linked both ways in metadata
    (`linked_from`, `linked`), as an import links them."""
    with transaction.atomic():
        if parent is not None:
            metadata = metadata | {"linked_from": str(parent.id)}
        conversation = conversation_create(title=title, metadata=metadata)
        if parent is not None:
            locked = _lock(parent)
            linked = list(locked.metadata.get("linked") or [])
            conversation_update(
                conversation=locked,
                title=locked.title,
                metadata=locked.metadata | {"linked": [*linked, str(conversation.id)]},
            )
        return TailCursor.objects.create(
            path=path, path_digest=path_digest(path), conversation=conversation
        )


def path_digest(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()


def tail_append(
    *,
    cursor: TailCursor,
    steps: Sequence[live_sources.Step],
    position: live_sources.Position,
    lines: int,
    known: set[str],
    device: int | None = None,
    inode: int | None = None,
) -> int:
    """Store what a file's new lines hold and move its cursor past them, in one transaction.

    A step whose source ids are all in `known` (already stored) is skipped, so a file read
    again stores nothing twice; `known` gains the ids stored, once committed. Consecutive
    new messages go in as one batch (one message_added on commit); blocks continuing the
    latest message broadcast block_added each. Returns the steps stored.
    """
    stored = 0
    added: set[str] = set()  # into `known` only once committed: a rollback stores nothing
    with transaction.atomic():
        conversation = _lock(cursor.conversation)
        batch: list[MessageIn] = []
        gaps: list[dict[str, Any]] = []

        def flush() -> None:
            if batch:
                messages_append(conversation=conversation, messages=batch)
                batch.clear()

        for step in steps:
            if not isinstance(step, live_sources.Describe) and _all_known(
                step.source_ids, known, added
            ):
                continue
            match step:
                case live_sources.NewMessage():
                    metadata = dict(step.metadata)
                    if step.marker is not None:
                        metadata["compact_boundary"] = step.marker
                        _mark_boundary(
                            conversation, step.marker, conversation.message_count + len(batch)
                        )
                    seq = conversation.message_count + len(batch)
                    gaps += [live_sources.placed_gap(gap, seq, 0) for gap in step.gaps]
                    batch.append(message_in(step.role, step.blocks, metadata, "line"))
                case live_sources.MoreBlocks():
                    flush()
                    gaps += _continue_latest(conversation, step)
                case live_sources.Describe():
                    flush()
                    conversation_update(
                        conversation=conversation,
                        title=step.title if step.title is not None else conversation.title,
                        metadata=conversation.metadata | (step.metadata or {}),
                    )
                case _:
                    assert_never(step)
            if not isinstance(step, live_sources.Describe):
                added.update(step.source_ids)
            stored += 1
        flush()
        if gaps:  # listed on the conversation, as an import lists them (docs/contract.md §6 rule 3)
            conversation_update(
                conversation=conversation,
                title=conversation.title,
                metadata=conversation.metadata
                | {"gaps": [*(conversation.metadata.get("gaps") or []), *gaps]},
            )
        cursor.offset = position.offset
        cursor.head_len = position.head_len
        cursor.head_digest = position.head
        cursor.lines = lines
        cursor.device = device
        cursor.inode = inode
        cursor.save()
    known |= added
    return stored


def _all_known(ids: tuple[str, ...], known: set[str], added: set[str]) -> bool:
    return bool(ids) and all(i in known or i in added for i in ids)


def _mark_boundary(conversation: Conversation, marker: dict[str, Any], before_seq: int) -> None:
    """A compaction boundary before message `before_seq`, kept in the conversation's
    metadata as the importer keeps it (docs/contract.md §6 rule 5)."""
    boundaries = list(conversation.metadata.get("compact_boundaries") or [])
    conversation_update(
        conversation=conversation,
        title=conversation.title,
        metadata=conversation.metadata
        | {"compact_boundaries": [*boundaries, marker | {"seq": before_seq}]},
    )


def _continue_latest(
    conversation: Conversation, step: live_sources.MoreBlocks
) -> list[dict[str, Any]]:
    """Append the step's blocks to the latest message; its gaps, placed."""
    message = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    if message is None:
        raise IngestError("line", "continues a message, but none is stored yet")
    gaps = [live_sources.placed_gap(gap, message.seq, message.block_count) for gap in step.gaps]
    for block in blocks_in(step.blocks, "blocks"):
        block_append(message=message, block=block)
    # Its provenance names every line it was read from, as an import's does.
    Message.objects.filter(pk=message.pk).update(
        metadata=live_sources.merge_provenance(message.metadata, step.metadata)
    )
    return gaps


def tail_rewind(*, cursor: TailCursor) -> None:
    """Forget where a file was read up to (it was truncated or replaced): it is read again
    from its start, and what is already stored is recognised by its source ids."""
    TailCursor.objects.filter(pk=cursor.pk).update(offset=0, head_len=0, head_digest="", lines=0)
    cursor.offset, cursor.head_len, cursor.head_digest, cursor.lines = 0, 0, "", 0


@dataclass(frozen=True, slots=True)
class Traced:
    """What one span did to its conversation: `appended` messages, or `diverges_at`."""

    conversation: Conversation
    appended: int
    diverges_at: int | None = None


@dataclass(frozen=True, slots=True)
class TracedMessage:
    """One message of a span's history, validated, with its `live_sources.fingerprint`."""

    message: MessageIn
    fingerprint: str
    gaps: tuple[dict[str, Any], ...] = ()  # what its blocks could not hold (`block` index)


def trace_continue(
    *, key: str, title: str, metadata: dict[str, Any], messages: Sequence[TracedMessage]
) -> Traced:
    """Append what a span's whole history holds past the stored one (the suffix rule).

    The conversation is found (or created) by `key`; each stored message keeps the chain
    fingerprint of the history up to it, so one stored value decides. A history that
    disagrees with the stored one stores nothing and names the first differing message.
    Broadcasts one message_added on commit when something was appended.
    """
    chained = live_sources.chain([message.fingerprint for message in messages])
    with transaction.atomic():
        conversation = _trace_conversation(key=key, title=title, metadata=metadata)
        locked = _lock(conversation)
        index = live_sources.compared_index(len(chained), locked.message_count)
        stored: str | None = None
        if index is not None:
            row = Message.objects.filter(conversation=locked, seq=index).first()
            stored = row.metadata.get(live_sources.FINGERPRINT_KEY) if row is not None else None
        plan = live_sources.continuation(chained, locked.message_count, stored)
        if plan.diverges:
            values = [
                m.get(live_sources.FINGERPRINT_KEY, "")
                for m in Message.objects.filter(conversation=locked, seq__lt=len(chained))
                .order_by("seq")
                .values_list("metadata", flat=True)
            ]
            return Traced(locked, 0, live_sources.first_difference(chained, values))
        new = [
            item.message.model_copy(
                update={
                    "metadata": item.message.metadata
                    | {live_sources.FINGERPRINT_KEY: chained[plan.start + offset]}
                }
            )
            for offset, item in enumerate(messages[plan.start :])
        ]
        if new:
            first = locked.message_count
            gaps = [
                live_sources.placed_gap(gap, first + offset, 0)
                for offset, item in enumerate(messages[plan.start :])
                for gap in item.gaps
            ]
            messages_append(conversation=locked, messages=new)
            if gaps:  # listed on the conversation, as an import lists them
                conversation_update(
                    conversation=locked,
                    title=locked.title,
                    metadata=locked.metadata
                    | {"gaps": [*(locked.metadata.get("gaps") or []), *gaps]},
                )
    return Traced(locked, len(new))


def _trace_conversation(*, key: str, title: str, metadata: dict[str, Any]) -> Conversation:
    source = TraceConversation.objects.select_related("conversation").filter(key=key).first()
    if source is not None:
        return source.conversation
    try:
        with transaction.atomic():
            conversation = conversation_create(title=title, metadata=metadata)
            TraceConversation.objects.create(key=key, conversation=conversation)
            return conversation
    except IntegrityError:
        # A concurrent span of the same conversation created it first.
        return TraceConversation.objects.select_related("conversation").get(key=key).conversation
