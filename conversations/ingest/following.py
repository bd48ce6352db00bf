"""Following live sources (docs/contract.md §6 "Following live agents"): `manage.py tail`
(file cursors) and `POST /v1/traces` (OTLP spans continuing a conversation). Both only
ever append, each append idempotent by its source."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, assert_never

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from conversations.core import live_sources
from conversations.ingest.models import RejectedSpan, TailCursor, TraceConversation
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation, Message
from conversations.record.schemas import BLOCK_ADAPTER, BlockIn, MessageIn, error_sentence
from conversations.record.services import token_figures
from conversations.record.services.appending import block_append, messages_append
from conversations.record.services.conversations import (
    conversation_create,
    conversation_update,
    lock_conversation,
)


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
            locked = lock_conversation(parent)
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
        conversation = lock_conversation(cursor.conversation)
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
    message.metadata = live_sources.merge_provenance(message.metadata, step.metadata)
    Message.objects.filter(pk=message.pk).update(metadata=message.metadata)
    token_figures.metadata_changed(conversation, message)
    return gaps


class TailServer(Protocol):
    """The running server's API, for a `tail` whose channel layer is its own (`--url`):
    what it stores there, it broadcasts to its open pages (docs/contract.md §6)."""

    def messages(self, *, conversation_id: str, messages: list[dict[str, Any]]) -> None: ...

    def block(self, *, conversation_id: str, seq: int, block: dict[str, Any]) -> None: ...


def tail_send(
    *,
    server: TailServer,
    cursor: TailCursor,
    steps: Sequence[live_sources.Step],
    position: live_sources.Position,
    lines: int,
    known: set[str],
    device: int | None = None,
    inode: int | None = None,
) -> int:
    """As `tail_append`, but the messages and blocks go through `server` (which shares
    this database), then the cursor moves here. No transaction is held across a request
    (the server locks the same conversation); `known` gains each step's ids as soon as
    the server has it, so a line read again (a failed batch retried line by line, a
    replaced file) is sent once. Returns the steps sent or stored."""
    conversation = Conversation.objects.get(pk=cursor.conversation_id)  # DoesNotExist: deleted
    target = str(conversation.id)
    batch: list[dict[str, Any]] = []
    batch_ids: list[str] = []
    gaps: list[dict[str, Any]] = []
    boundaries: list[dict[str, Any]] = []
    stored = 0

    def flush() -> None:
        nonlocal conversation
        if batch:
            server.messages(conversation_id=target, messages=list(batch))
            known.update(batch_ids)
            batch.clear()
            batch_ids.clear()
            conversation = Conversation.objects.get(pk=conversation.pk)

    for step in steps:
        if not isinstance(step, live_sources.Describe) and _all_known(
            step.source_ids, known, set()
        ):
            continue
        match step:
            case live_sources.NewMessage():
                metadata = dict(step.metadata)
                seq = conversation.message_count + len(batch)
                if step.marker is not None:
                    metadata["compact_boundary"] = step.marker
                    boundaries.append(step.marker | {"seq": seq})
                gaps += [live_sources.placed_gap(gap, seq, 0) for gap in step.gaps]
                message_in(step.role, step.blocks, metadata, "line")  # refused here as at ingest
                batch.append({"role": step.role, "blocks": list(step.blocks), "metadata": metadata})
                batch_ids.extend(step.source_ids)
            case live_sources.MoreBlocks():
                flush()
                gaps += _send_blocks(server, conversation, step)
                known.update(step.source_ids)
            case live_sources.Describe():
                flush()
                with transaction.atomic():
                    locked = lock_conversation(conversation)
                    conversation = conversation_update(
                        conversation=locked,
                        title=step.title if step.title is not None else locked.title,
                        metadata=locked.metadata | (step.metadata or {}),
                    )
            case _:
                assert_never(step)
        stored += 1
    flush()
    with transaction.atomic():
        locked = lock_conversation(conversation)
        if gaps or boundaries:  # listed on the conversation, as an import lists them
            metadata = dict(locked.metadata)
            if gaps:
                metadata["gaps"] = [*(metadata.get("gaps") or []), *gaps]
            if boundaries:
                metadata["compact_boundaries"] = [
                    *(metadata.get("compact_boundaries") or []),
                    *boundaries,
                ]
            conversation_update(conversation=locked, title=locked.title, metadata=metadata)
        cursor.offset = position.offset
        cursor.head_len = position.head_len
        cursor.head_digest = position.head
        cursor.lines = lines
        cursor.device = device
        cursor.inode = inode
        cursor.save()
    return stored


def _send_blocks(
    server: TailServer, conversation: Conversation, step: live_sources.MoreBlocks
) -> list[dict[str, Any]]:
    """Send the step's blocks to the latest message, then keep the lines it was read from
    in its provenance here (so a restart knows them); its gaps, placed."""
    message = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    if message is None:
        raise IngestError("line", "continues a message, but none is stored yet")
    gaps = [live_sources.placed_gap(gap, message.seq, message.block_count) for gap in step.gaps]
    blocks_in(step.blocks, "blocks")  # refused here as at ingest, before any is sent
    for block in step.blocks:
        server.block(conversation_id=str(conversation.id), seq=message.seq, block=dict(block))
    with transaction.atomic():
        locked = lock_conversation(conversation)
        message = Message.objects.get(pk=message.pk)
        message.metadata = live_sources.merge_provenance(message.metadata, step.metadata)
        Message.objects.filter(pk=message.pk).update(metadata=message.metadata)
        token_figures.metadata_changed(locked, message)
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


REJECTIONS_KEPT = timedelta(hours=24)
REJECTIONS_MAX = 10_000  # rows at most, whatever a client sends within a day
REASON_CHARS = 1_000


def span_rejected(*, trace_id: str, span_id: str, reason: str) -> RejectedSpan:
    """Keep why an OTLP span was not stored (the list page counts the last day's, the admin
    lists them). Older rows and rows past the most recent `REJECTIONS_MAX` go as new ones
    come, through indexed deletes, so the table stays small."""
    row = RejectedSpan.objects.create(
        trace_id=trace_id[:64], span_id=span_id[:32], reason=reason[:REASON_CHARS]
    )
    RejectedSpan.objects.filter(
        Q(received_at__lt=timezone.now() - REJECTIONS_KEPT) | Q(id__lte=row.id - REJECTIONS_MAX)
    ).delete()
    return row


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
        locked = lock_conversation(conversation)
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
