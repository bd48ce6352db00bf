"""The JSON API (docs/contract.md §3): bearer tokens only, strict schemas, one service per write."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import reverse
from pydantic import ValidationError

from conversations.alerts import reads as alert_reads
from conversations.compare import reads as comparing
from conversations.core import importers
from conversations.core.counting import compact
from conversations.core.counting.compact import Policy
from conversations.core.list_status import ListFilters
from conversations.core.options import OptionError, ReplayOptions
from conversations.core.search import QueryError
from conversations.ingest import uploads
from conversations.ingest.imports import ImportOutcome, transcript_import
from conversations.record import streams
from conversations.record.counting import preview_counts, token_counts
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation
from conversations.record.notes import reads as note_reads
from conversations.record.notes.services import note_add, note_delete, note_edit
from conversations.record.reads import selectors, shapes
from conversations.record.schemas import (
    BLOCK_ADAPTER,
    ConversationIn,
    ConversationPatch,
    MessageBatchIn,
    MessageIn,
    NoteIn,
    NotePatch,
    ShareIn,
)
from conversations.record.search import reads as search_reads
from conversations.record.services.appending import block_append, message_append, messages_append
from conversations.record.services.conversations import (
    conversation_create,
    conversation_delete,
    conversation_window_set,
)
from conversations.sharing import reads as sharing_reads
from conversations.sharing import shapes as sharing_shapes
from conversations.sharing.services import share_create, share_revoke
from conversations.web.api import (
    TOKEN_LABEL,
    api,
    json_response,
    parse_json,
    schema_error,
    validate,
)
from conversations.web.errors import ApiError, too_big

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_RECORD_LIMIT = 1000  # messages one page of the record holds at most (`?limit=`)


def _conversation(conversation_id: str) -> Conversation:
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        raise ApiError(404, f"Conversation {conversation_id} was not found.")
    return conversation


def _unread(conversation_id: str) -> Conversation:
    """The conversation an append names, not read (404 for an id that cannot name one): the
    append finds out itself whether it exists, with the statement that counts it in. Call
    the append within `_missing_first`."""
    found = selectors.conversation_ref(conversation_id)
    if found is None:
        raise ApiError(404, f"Conversation {conversation_id} was not found.")
    return found


@contextmanager
def _missing_first(conversation_id: str) -> Iterator[None]:
    """An unknown conversation is a 404 before any fault of the request's body, as it was
    when every write read its conversation first."""
    try:
        yield
    except (ApiError, IngestError, RequestDataTooBig, Conversation.DoesNotExist):
        _conversation(conversation_id)
        raise


def _url(request: HttpRequest, conversation: Conversation, fragment: str = "") -> str:
    return request.build_absolute_uri(conversation.get_absolute_url()) + fragment


def replay_options(request: HttpRequest) -> ReplayOptions:
    """`?vision=` and `?shape=` as docs/contract.md §3 defines them (defaults: vision on,
    openai)."""
    try:
        return ReplayOptions.from_query(request.GET)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None


def compact_policy(request: HttpRequest) -> Policy | None:
    """`?compact=POLICY&keep=…` as docs/contract.md §7 defines them; None without `compact`."""
    try:
        return Policy.from_query(request.GET)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None


def payload_policy(request: HttpRequest, conversation: Conversation) -> Policy | None:
    """The policy the payload is read under (docs/contract.md §7): `?compact=`, else the
    last stored boundary's; `compact=none` gives the whole record."""
    try:
        return compact.payload_policy(request.GET, conversation.metadata)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None


def _page_number(request: HttpRequest, name: str, default: int, maximum: int | None) -> int:
    value = request.GET.get(name, "")
    if value == "":
        return default
    if not re.fullmatch(r"[1-9][0-9]{0,8}", value):
        raise ApiError(
            400, f"{name} must be a whole number from 1, not {value[:40]!r}.", field=name
        )
    return min(int(value), maximum) if maximum else int(value)


@api("GET", "POST")
def conversations(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        data = validate(ConversationIn, parse_json(request))
        conversation = conversation_create(title=data.title, metadata=data.metadata)
        return json_response(
            shapes.conversation_data(conversation, url=_url(request, conversation)), 201
        )
    page_size = _page_number(request, "page_size", PAGE_SIZE, MAX_PAGE_SIZE)
    number = _page_number(request, "page", 1, None)
    q = request.GET.get("q", "")
    if "\x00" in q:
        raise ApiError(400, "q contains a NUL character (U+0000), which cannot be searched.")
    try:
        filters = ListFilters.from_query(request.GET)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    try:
        found = search_reads.conversation_list(
            q=q,
            has_errors=filters.has_errors,
            unanswered=filters.unanswered,
            label=filters.label,
        )
        if filters.alerts_open:
            found = alert_reads.with_open_alerts(found)
    except QueryError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    paginator = (search_reads.CappedPaginator if q.strip() else Paginator)(found, page_size)
    try:
        page = paginator.page(number)
    except (EmptyPage, PageNotAnInteger):
        raise ApiError(
            404, f"page {number} does not exist; there are {paginator.num_pages}."
        ) from None

    def link(n: int) -> str:
        query = request.GET.copy()
        query["page"] = str(n)
        return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")

    results = [shapes.conversation_data(c, url=_url(request, c)) for c in page.object_list]
    if q.strip():
        # Where each conversation matched: its first matching block, else its first matching
        # note (`note`: true), else None (the title only).
        hits = search_reads.search_hits(page.object_list, q)
        for conversation, result in zip(page.object_list, results, strict=True):
            hit = hits.get(conversation.pk)
            result["match"] = hit and {
                "message_seq": hit.message_seq,
                "block_seq": hit.block_seq,
                "snippet": hit.snippet,
                "url": _url(request, conversation, f"#m-{hit.message_seq}"),
                "note": hit.note,
            }
    return json_response(
        {
            "count": paginator.count,
            # A search counts at most SEARCH_COUNT_CAP conversations (docs/contract.md §3).
            "count_capped": bool(getattr(paginator, "capped", False)),
            "page": page.number,
            "pages": paginator.num_pages,
            "next": link(page.next_page_number()) if page.has_next() else None,
            "previous": link(page.previous_page_number()) if page.has_previous() else None,
            "results": results,
        }
    )


@api("GET", "PATCH", "DELETE")
def conversation(request: HttpRequest, conversation_id: str) -> HttpResponseBase:
    found = _conversation(conversation_id)
    if request.method == "DELETE":
        conversation_delete(conversation=found)
        return HttpResponse(status=204)
    if request.method == "PATCH":
        data = validate(ConversationPatch, parse_json(request))
        found = conversation_window_set(conversation=found, tokens=data.context_window)
        return json_response(shapes.conversation_data(found, url=_url(request, found)))
    return record_response(request, found)


def _whole_number(request: HttpRequest, name: str, low: int, high: int) -> int | None:
    value = request.GET.get(name, "")
    if value == "":
        return None
    if not re.fullmatch(r"[0-9]{1,10}", value) or not low <= int(value) <= high:
        raise ApiError(
            400,
            f"{name} must be a whole number from {low:,} to {high:,}, not {value[:40]!r}.",
            field=name,
        )
    return int(value)


def record_response(request: HttpRequest, found: Conversation) -> HttpResponseBase:
    """The record, streamed (docs/contract.md §3): whole by default; with `?from_seq=` or
    `?limit=`, the messages from `from_seq` (0), at most `limit` of them, and `next`, the
    URL of the following page (null at the end). Messages appended after `found` was read
    are left out, as its `message_count` says."""
    from_seq = _whole_number(request, "from_seq", 0, 2**31 - 1)
    limit = _whole_number(request, "limit", 1, MAX_RECORD_LIMIT)
    head = shapes.conversation_data(found, url=_url(request, found))
    count = found.message_count
    start, stop = 0, count
    if from_seq is not None or limit is not None:
        start = from_seq or 0
        stop = count if limit is None else min(count, start + limit)
        query = request.GET.copy()
        query["from_seq"] = str(stop)
        head["next"] = (
            request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
            if stop < count
            else None
        )
    body = streams.record_pieces(found, head, start=start, stop=stop)
    return streams.StreamedResponse(body, content_type="application/json")


@api("POST")
def messages(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _unread(conversation_id)
    with _missing_first(conversation_id):
        data = validate(MessageIn, parse_json(request))
        message, blocks = message_append(
            conversation=found, role=data.role, blocks=data.blocks, metadata=data.metadata
        )
    # Ids, seqs and the URL only: echoing the blocks would hold every body twice in memory.
    return json_response(
        {
            "seq": message.seq,
            "conversation_id": str(found.id),
            "role": message.role,
            "block_count": len(blocks),
            "created_at": message.created_at,
            "url": _url(request, found, f"#m-{message.seq}"),
        },
        201,
    )


@api("POST")
def messages_batch(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """Many messages at once, all or nothing, announced by one live event."""
    found = _unread(conversation_id)
    with _missing_first(conversation_id):
        data = validate(MessageBatchIn, parse_json(request))
        stored = messages_append(conversation=found, messages=data.messages)
    first, last = stored[0][0].seq, stored[-1][0].seq
    return json_response(
        {
            "seqs": [first, last],
            "conversation_id": str(found.id),
            "url": _url(request, found, f"#m-{first}"),
        },
        201,
    )


@api("POST")
def blocks(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    found = _conversation(conversation_id)
    message = selectors.message_get(found, seq)
    if message is None:
        raise ApiError(404, f"Message {seq} was not found in conversation {conversation_id}.")
    data = parse_json(request)
    try:
        block_in = BLOCK_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise schema_error(exc) from None
    block = block_append(message=message, block=block_in)
    return json_response(
        {
            "seq": block.seq,
            "conversation_id": str(found.id),
            "message_seq": message.seq,
            "type": block.type,
            "url": _url(request, found, f"#m-{message.seq}"),
        },
        201,
    )


@api("GET")
def replay_payload(request: HttpRequest, conversation_id: str) -> HttpResponseBase:
    found = _conversation(conversation_id)
    options = replay_options(request)
    policy = payload_policy(request, found)
    # A policy's decisions are made over the whole record first (from the blocks it looks
    # at), then the compacted messages stream like the rest (docs/contract.md §7).
    result = preview_counts.payload_result(found, options, policy)
    pieces = streams.replay_pieces(
        found,
        vision=options.vision,
        shape=options.shape,
        stop=found.message_count,
        result=result,
    )
    return streams.StreamedResponse(pieces, content_type="application/json")


@api("GET")
def markdown_export(request: HttpRequest, conversation_id: str) -> HttpResponseBase:
    """The conversation as Markdown (record, then projection) for `?vision=&shape=`."""
    found = _conversation(conversation_id)
    options = replay_options(request)
    policy = payload_policy(request, found)
    result = preview_counts.payload_result(found, options, policy)
    pieces = streams.markdown_pieces(
        found,
        vision=options.vision,
        shape=options.shape,
        stop=found.message_count,
        result=result,
    )
    return streams.StreamedResponse(pieces, content_type="text/markdown; charset=utf-8")


@api("POST")
def imports(request: HttpRequest) -> HttpResponse:
    """A transcript file as the body, or as a multipart form's `file` (docs/contract.md §6):
    201 with the new conversation, or 200 with the one these same bytes made before; a
    malformed file is a 400 naming line or path."""
    try:
        upload = uploads.transcript_upload(request)
    except RequestDataTooBig:
        raise too_big() from None
    except uploads.UploadError as exc:
        raise ApiError(400, str(exc), field=exc.field) from None
    outcome = import_bytes(
        upload.raw,
        request.GET.get("format") or None,
        request.GET.get("title"),
        request.GET.get("name") or upload.file_name,
    )
    return json_response(import_answer(request, outcome), status=201 if outcome.created else 200)


def import_bytes(
    raw: bytes, format: str | None, title: str | None, file_name: str | None
) -> ImportOutcome:
    """Read and store one transcript; ApiError (400) names what is wrong with it."""
    if not raw.strip():
        raise ApiError(400, importers.EMPTY_FILE)
    try:
        return transcript_import(raw=raw, format=format, title=title, file_name=file_name)
    except importers.ImportFormatError as exc:
        named = {"format": exc.format} if exc.format else {}
        raise ApiError(400, exc.sentence(), where=exc.where, **named) from None


def import_answer(request: HttpRequest, outcome: ImportOutcome) -> dict[str, Any]:
    conversation = outcome.conversation
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "url": _url(request, conversation),
        "messages": outcome.messages,
        "blocks": outcome.blocks,
        "gaps": outcome.gaps,
        "stats": (conversation.metadata.get("import") or {}).get("stats", {}),
        "linked": [
            {"id": str(c.id), "title": c.title, "url": _url(request, c)} for c in outcome.linked
        ],
    }


@api("GET")
def context(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """Token counts of the replay (docs/contract.md §7), after `?compact=` when given."""
    found = _conversation(conversation_id)
    try:
        options, shape_source = ReplayOptions.for_counts(request.GET, metadata=found.metadata)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    policy = compact_policy(request)
    query = {k: request.GET[k] for k in token_counts.VIEW_KEYS if k in request.GET}
    try:
        if policy is None:
            pressure = token_counts.pressure(found, options, query=query)
            return json_response(
                preview_counts.context_data(found, pressure, shape_source=shape_source)
            )
        preview = preview_counts.preview(found, options, policy, query=query)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    return json_response(
        preview_counts.context_data(found, preview.after, preview, shape_source=shape_source)
    )


def _sharing() -> None:
    if not settings.REPLAY_SHARING:
        raise ApiError(404, "Sharing is turned off on this server (REPLAY_SHARING=0).")


@api("GET", "POST", idempotent=False)
def shares(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """POST: a new share link (its clear token only in `url`, this once); GET: the links."""
    _sharing()
    found = _conversation(conversation_id)
    if request.method == "POST":
        data = validate(ShareIn, parse_json(request))
        link, clear = share_create(
            conversation=found,
            up_to_seq=data.up_to_seq,
            expires_in=timedelta(seconds=data.expires_in) if data.expires_in else None,
            vision=data.vision,
            shape=data.shape,
            images=data.images,
            notes=data.notes,
        )
        url = request.build_absolute_uri(reverse("share", kwargs={"token": clear}))
        return json_response(sharing_shapes.share_data(link) | {"url": url}, 201)
    return json_response(
        {"results": [sharing_shapes.share_data(s) for s in sharing_reads.share_list(found)]}
    )


@api("DELETE")
def share(request: HttpRequest, share_id: int) -> HttpResponse:
    """Revoke a link: its pages answer 410 from the next request, its sockets close."""
    _sharing()
    link = sharing_reads.share_by_id(share_id)
    if link is None:
        raise ApiError(404, f"Share link {share_id} was not found.")
    share_revoke(link=link)
    return HttpResponse(status=204)


# -- notes (docs/contract.md §10) ---------------------------------------------------------------


def _token_label(request: HttpRequest) -> str:
    return str(request.META[TOKEN_LABEL])


def _note_body(schema: type[NoteIn] | type[NotePatch], data: Any) -> Any:
    """A note body validated, a 400 naming the field (`text` is a field here, not the
    block type the shared error sentences take it for)."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = "".join(
            f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part))
            for i, part in enumerate(error["loc"])
        )
        message = {
            "missing": "is required",
            "extra_forbidden": "is not a field of a note",
        }.get(error["type"], error["msg"].lower())
        raise ApiError(400, f"{field}: {message}.", field=field) from None


@api("POST")
def message_notes(request: HttpRequest, conversation_id: str, seq: int) -> HttpResponse:
    """A note on message SEQ (or its `block`), written by this token (its label)."""
    found = _conversation(conversation_id)
    if selectors.message_get(found, seq) is None:
        raise ApiError(404, f"Message {seq} was not found in conversation {conversation_id}.")
    data = _note_body(NoteIn, parse_json(request))
    note = note_add(
        conversation=found,
        message_seq=seq,
        block_seq=data.block,
        text=data.text,
        labels=data.labels,
        token_label=_token_label(request),
    )
    return json_response(shapes.note_data(note_reads.value(note)), 201)


@api("GET")
def conversation_notes(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The conversation's notes by id, a page at a time (`?after=ID`; `next` when more)."""
    found = _conversation(conversation_id)
    after = request.GET.get("after", "0")
    if not re.fullmatch(r"[0-9]{1,18}", after):
        raise ApiError(400, f"after must be a note id, not {after[:40]!r}.", field="after")
    notes, more = note_reads.note_page(found.id, after=int(after))
    following = None
    if more:
        following = request.build_absolute_uri(
            f"{request.path}?{urlencode({'after': notes[-1].id})}"
        )
    return json_response({"notes": [shapes.note_data(n) for n in notes], "next": following})


@api("PATCH", "DELETE")
def note(request: HttpRequest, note_id: str) -> HttpResponse:
    """Edit (text and/or labels) or delete a note; only the token that wrote it may."""
    found = note_reads.note_get(note_id)
    if found is None:
        raise ApiError(404, f"Note {note_id[:40]} was not found.")
    if not note_reads.token_may_edit(found, _token_label(request)):
        raise ApiError(403, "Only the token that wrote this note (by its label) may change it.")
    if request.method == "DELETE":
        note_delete(note=found)
        return HttpResponse(status=204)
    data = _note_body(NotePatch, parse_json(request))
    if data.text is None and data.labels is None:
        raise ApiError(400, "Send text and/or labels to change.", field="body")
    edited = note_edit(note=found, text=data.text, labels=data.labels)
    return json_response(shapes.note_data(note_reads.value(edited)))


def _compared_conversation(request: HttpRequest, field: str) -> Conversation:
    """`?a=` or `?b=`: a stored conversation's id (400 when missing or malformed, 404 when
    unknown; both name the field)."""
    value = request.GET.get(field, "").strip()
    if not value:
        raise ApiError(400, f"{field} is required: the id of a conversation.", field=field)
    try:
        uuid.UUID(value)
    except ValueError:
        raise ApiError(400, f"{field} must be a conversation id (a UUID).", field=field) from None
    found = selectors.conversation_get(value)
    if found is None:
        raise ApiError(404, f"Conversation {field} ({value}) was not found.", field=field)
    return found


@api("GET")
def compare(request: HttpRequest) -> HttpResponse:
    """Two runs aligned message by message (docs/contract.md §9): summaries, the first
    divergence and one page of rows (at most 500)."""
    a = _compared_conversation(request, "a")
    b = _compared_conversation(request, "b")
    options = replay_options(request)
    number = _page_number(request, "page", 1, None)
    try:
        found = comparing.compared(a, b, options, page=number)
    except comparing.PageError as exc:
        raise ApiError(404, str(exc), field="page") from None

    def link(n: int) -> str:
        query = request.GET.copy()
        query["page"] = str(n)
        return request.build_absolute_uri(f"{request.path}?{query.urlencode()}")

    first = found.first_divergence
    return json_response(
        {
            "a": comparing.run_data(found.a, url=_url(request, a)),
            "b": comparing.run_data(found.b, url=_url(request, b)),
            "first_divergence": None if first is None else {"a_seq": first[0], "b_seq": first[1]},
            "changed": found.changed,
            "minimal": found.alignment.minimal,
            "total_rows": found.alignment.total_rows,
            "rows": found.row_data(),
            "page": found.page,
            "pages": found.alignment.pages,
            "next": link(found.page + 1) if found.page < found.alignment.pages else None,
        }
    )
