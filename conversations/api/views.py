"""The JSON API (docs/contract.md §3): bearer tokens only, strict schemas, one service per write."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeAlias

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from conversations.core import importers, strictjson
from conversations.core.compact import Policy
from conversations.core.list_status import ListFilters
from conversations.core.options import OptionError, ReplayOptions
from conversations.core.search import QueryError
from conversations.record import selectors, services, token_counts
from conversations.record.models import ApiToken, Conversation, IdempotentResponse
from conversations.record.schemas import (
    BLOCK_ADAPTER,
    ConversationIn,
    MessageBatchIn,
    MessageIn,
    ShareIn,
    error_list,
    error_sentence,
)

View: TypeAlias = Callable[..., HttpResponse]
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
TOKEN_TOUCH_INTERVAL = timedelta(minutes=5)


class ApiError(Exception):
    def __init__(self, status: int, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.extra = extra


def json_response(data: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(data), status=status, content_type="application/json")


def error_response(status: int, error: str, **extra: Any) -> HttpResponse:
    response = json_response({"error": error, **extra}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="replay"'
    return response


def authenticate(request: HttpRequest) -> ApiToken:
    header = request.headers.get("Authorization", "")
    scheme, _, clear = header.partition(" ")
    if not header:
        raise ApiError(401, "Authorization header is missing: send 'Authorization: Bearer TOKEN'.")
    if scheme.lower() != "bearer" or not clear.strip():
        raise ApiError(401, "Authorization header must be 'Bearer TOKEN'.")
    digest = services.token_digest(clear.strip())
    token = ApiToken.objects.filter(digest=digest, revoked_at__isnull=True).first()
    if token is None:
        raise ApiError(401, "API token is unknown or revoked.")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > TOKEN_TOUCH_INTERVAL:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def parse_json(request: HttpRequest) -> dict[str, Any]:
    """The body as a JSON object under docs/contract.md §3's limits (depth, duplicate keys, exact numbers)."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_big() from None
    if not raw.strip():
        raise ApiError(400, "Request body is empty: send a JSON object.")
    try:
        data = strictjson.loads(raw)
    except strictjson.StrictJSONError as exc:
        raise ApiError(400, _json_sentence(exc), field=exc.field) from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object.")
    return data


def _json_sentence(exc: strictjson.StrictJSONError) -> str:
    if exc.path:
        return f"{exc.path}: {exc.reason}."
    return f"Request body {exc.reason}."


def validate(schema: type[BaseModel], data: Any) -> Any:
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ApiError(400, error_sentence(exc), errors=error_list(exc)) from None


ErrorRenderer: TypeAlias = Callable[[HttpRequest, int, str, dict[str, Any]], HttpResponse]


def _json_error(
    request: HttpRequest, status: int, error: str, extra: dict[str, Any]
) -> HttpResponse:
    return error_response(status, error, **extra)


def api(
    *methods: str, errors: ErrorRenderer = _json_error, idempotent: bool = True
) -> Callable[[View], View]:
    """Authenticate the bearer token, check the method, and turn failures into JSON errors
    (or into what `errors` renders, for protocols with error bodies of their own).

    A POST with an Idempotency-Key runs in one transaction with the saved answer, so a
    repeat returns the first answer and stores nothing again. `idempotent=False`: the
    answer holds a secret that must not be stored (a share link's token), so the header
    is refused.
    """

    def decorator(view: View) -> View:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                if request.method not in methods:
                    response = errors(
                        request,
                        405,
                        f"Method {request.method} is not allowed here; use {', '.join(methods)}.",
                        {},
                    )
                    response["Allow"] = ", ".join(methods)
                    return response
                token = authenticate(request)
                key = request.headers.get("Idempotency-Key")
                if request.method == "POST" and key is not None:
                    if not idempotent:
                        raise ApiError(
                            400,
                            "Idempotency-Key is not accepted here: the answer holds a token "
                            "that is shown once and never stored.",
                            field="Idempotency-Key",
                        )
                    return _idempotent(view, request, token, key, args, kwargs)
                return view(request, *args, **kwargs)
            except ApiError as exc:
                response = errors(request, exc.status, exc.error, exc.extra)
                if exc.status == 401:
                    response["WWW-Authenticate"] = 'Bearer realm="replay"'
                return response
            except services.IngestError as exc:
                return errors(request, 400, str(exc), {"field": exc.field})
            except RequestDataTooBig:
                over = too_big()
                return errors(request, over.status, over.error, {})

        return wrapper

    return decorator


def too_big() -> ApiError:
    return ApiError(
        413,
        f"Request body is over the {settings.REPLAY_MAX_BODY_MB} MB limit (REPLAY_MAX_BODY_MB).",
    )


def _idempotent(
    view: View,
    request: HttpRequest,
    token: ApiToken,
    key: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> HttpResponse:
    if not key or len(key) > 255:
        raise ApiError(400, "Idempotency-Key header must be 1 to 255 characters.")
    try:
        body = request.body
    except RequestDataTooBig:
        raise too_big() from None
    fingerprint = hashlib.sha256(
        b"%s %s\n%s" % (str(request.method).encode(), request.path.encode(), body)
    ).hexdigest()
    for _attempt in range(2):
        earlier = IdempotentResponse.objects.filter(token=token, key=key).first()
        if earlier is not None:
            if earlier.fingerprint != fingerprint:
                raise ApiError(
                    422,
                    "Idempotency-Key was already used for a different request; use a new key.",
                )
            response = HttpResponse(
                bytes(earlier.body), status=earlier.status, content_type="application/json"
            )
            response["Idempotent-Replayed"] = "true"
            return response
        try:
            with transaction.atomic():
                response = view(request, *args, **kwargs)
                if 200 <= response.status_code < 300:
                    services.idempotent_response_save(
                        token=token,
                        key=key,
                        fingerprint=fingerprint,
                        status=response.status_code,
                        body=response.content,
                    )
                return response
        except IntegrityError:
            # Another request with this key committed first: answer as it did.
            continue
    raise ApiError(409, "Idempotency-Key is in use by a concurrent request; retry.")


def _conversation(conversation_id: str) -> Conversation:
    conversation = selectors.conversation_get(conversation_id)
    if conversation is None:
        raise ApiError(404, f"Conversation {conversation_id} was not found.")
    return conversation


def _url(request: HttpRequest, conversation: Conversation, fragment: str = "") -> str:
    return request.build_absolute_uri(conversation.get_absolute_url()) + fragment


def replay_options(request: HttpRequest) -> ReplayOptions:
    """`?vision=` and `?shape=` as docs/contract.md §3 defines them (defaults: vision on, openai)."""
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


def _page_number(request: HttpRequest, name: str, default: int, maximum: int | None) -> int:
    value = request.GET.get(name, "")
    if value == "":
        return default
    if not re.fullmatch(r"[1-9][0-9]{0,8}", value):
        raise ApiError(400, f"{name} must be a whole number from 1, not {value[:40]!r}.")
    return min(int(value), maximum) if maximum else int(value)


@api("GET", "POST")
def conversations(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        data = validate(ConversationIn, parse_json(request))
        conversation = services.conversation_create(title=data.title, metadata=data.metadata)
        return json_response(
            selectors.conversation_data(conversation, url=_url(request, conversation)), 201
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
        found = selectors.conversation_list(
            q=q, has_errors=filters.has_errors, unanswered=filters.unanswered
        )
    except QueryError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    paginator = Paginator(found, page_size)
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

    results = [selectors.conversation_data(c, url=_url(request, c)) for c in page.object_list]
    if q.strip():
        # Where each conversation matched: its first matching block (None: the title only).
        hits = selectors.search_hits(page.object_list, q)
        for conversation, result in zip(page.object_list, results, strict=True):
            hit = hits.get(conversation.pk)
            result["match"] = hit and {
                "message_seq": hit.message_seq,
                "block_seq": hit.block_seq,
                "snippet": hit.snippet,
                "url": _url(request, conversation, f"#m-{hit.message_seq}"),
            }
    return json_response(
        {
            "count": paginator.count,
            "page": page.number,
            "pages": paginator.num_pages,
            "next": link(page.next_page_number()) if page.has_next() else None,
            "previous": link(page.previous_page_number()) if page.has_previous() else None,
            "results": results,
        }
    )


@api("GET", "DELETE")
def conversation(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _conversation(conversation_id)
    if request.method == "DELETE":
        services.conversation_delete(conversation=found)
        return HttpResponse(status=204)
    return json_response(selectors.record_data(found, url=_url(request, found)))


@api("POST")
def messages(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _conversation(conversation_id)
    data = validate(MessageIn, parse_json(request))
    message, blocks = services.message_append(
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
    found = _conversation(conversation_id)
    data = validate(MessageBatchIn, parse_json(request))
    stored = services.messages_append(conversation=found, messages=data.messages)
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
        raise ApiError(400, error_sentence(exc), errors=error_list(exc)) from None
    block = services.block_append(message=message, block=block_in)
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
def replay_payload(request: HttpRequest, conversation_id: str) -> HttpResponse:
    found = _conversation(conversation_id)
    options = replay_options(request)
    policy = compact_policy(request)
    if policy is None:
        body = selectors.replay_json(found, vision=options.vision, shape=options.shape)
    else:
        body = orjson.dumps(token_counts.compacted_payload(found, options, policy))
    return HttpResponse(body, content_type="application/json")


@api("GET")
def markdown_export(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """The conversation as Markdown (record, then projection) for `?vision=&shape=`."""
    found = _conversation(conversation_id)
    options = replay_options(request)
    body = selectors.markdown_export(found, vision=options.vision, shape=options.shape)
    return HttpResponse(body, content_type="text/markdown; charset=utf-8")


@api("POST")
def imports(request: HttpRequest) -> HttpResponse:
    """A transcript file as the body (docs/contract.md §6): 201 with the new conversation, or 200 with
    the one these same bytes made before; a malformed file is a 400 naming line or path."""
    try:
        raw = request.body
    except RequestDataTooBig:
        raise too_big() from None
    outcome = import_bytes(
        raw, request.GET.get("format") or None, request.GET.get("title"), request.GET.get("name")
    )
    return json_response(import_answer(request, outcome), status=201 if outcome.created else 200)


def import_bytes(
    raw: bytes, format: str | None, title: str | None, file_name: str | None
) -> services.ImportOutcome:
    """Read and store one transcript; ApiError (400) names what is wrong with it."""
    if not raw.strip():
        raise ApiError(400, "Request body is empty: send a transcript file.")
    try:
        return services.transcript_import(raw=raw, format=format, title=title, file_name=file_name)
    except importers.ImportFormatError as exc:
        raise ApiError(400, f"The file is not readable: {exc}.", where=exc.where) from None


def import_answer(request: HttpRequest, outcome: services.ImportOutcome) -> dict[str, Any]:
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
    options = replay_options(request)
    policy = compact_policy(request)
    query = {k: request.GET[k] for k in ("model", "window") if k in request.GET}
    try:
        if policy is None:
            return json_response(
                token_counts.context_data(token_counts.pressure(found, options, query=query))
            )
        preview = token_counts.preview(found, options, policy, query=query)
    except OptionError as exc:
        raise ApiError(400, exc.message, field=exc.field) from None
    return json_response(token_counts.context_data(preview.after, preview))


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
        link, clear = services.share_create(
            conversation=found,
            up_to_seq=data.up_to_seq,
            expires_in=timedelta(seconds=data.expires_in) if data.expires_in else None,
            vision=data.vision,
            shape=data.shape,
            images=data.images,
        )
        url = request.build_absolute_uri(reverse("share", kwargs={"token": clear}))
        return json_response(selectors.share_data(link) | {"url": url}, 201)
    return json_response(
        {"results": [selectors.share_data(s) for s in selectors.share_list(found)]}
    )


@api("DELETE")
def share(request: HttpRequest, share_id: int) -> HttpResponse:
    """Revoke a link: its pages answer 410 from the next request, its sockets close."""
    _sharing()
    link = selectors.share_by_id(share_id)
    if link is None:
        raise ApiError(404, f"Share link {share_id} was not found.")
    services.share_revoke(link=link)
    return HttpResponse(status=204)
