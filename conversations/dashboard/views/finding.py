"""The finder (docs/guide/dashboard.md): what the conversation page looks for across the whole
conversation, answered as JSON."""

from __future__ import annotations

from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from conversations.core.finder import Cursor, FindError, parse_cursor, parse_kind
from conversations.core.search import QueryError
from conversations.record.models.conversation import Conversation
from conversations.record.search import finder as finder_reads
from conversations.web.pages import conversation_or_404, json_response, operator_required

# A JSON answer is never markup, whatever it quotes; escaped anyway, as json_script does,
# so that no sniffing reader ever meets a tag in it.
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def _found(body: dict[str, Any], status: int = 200) -> HttpResponse:
    return json_response(orjson.dumps(body).decode().translate(_JSON_ESCAPES).encode(), status)


@require_GET
@operator_required
def conversation_find(request: HttpRequest, conversation_id: str) -> HttpResponse:
    return find_response(request, conversation_or_404(conversation_id))


def _cursor(request: HttpRequest, name: str) -> Cursor | None:
    value = request.GET.get(name)
    return None if value is None else parse_cursor(name, value)


def find_response(
    request: HttpRequest, conversation: Conversation, *, notes: bool = True
) -> HttpResponse:
    """`?kind=text&q=WORDS` a page of search hits (seq, block, snippet; "k of N" from
    `offset` and `total`); `?kind=problem|error|tool|reasoning|image` the next block of
    that kind (a problem: a tool error or a tool call with no result), one bounded step
    at a time (`resume` says where to go on from). `after=` or `before=` a place (`412`
    or `412.3`); neither: from the start. Bad parameters: a JSON 400 naming them. `notes`:
    whether the notes are searched too (a share link's only when it shows them)."""
    try:
        after, before = _cursor(request, "after"), _cursor(request, "before")
        if after is not None and before is not None:
            raise FindError("after", "Give after or before, not both.")
        kind = request.GET.get("kind", "")
        if kind == "text":
            q = request.GET.get("q", "").replace("\x00", "").strip()
            if not q:
                raise FindError("q", "q is required with kind=text: the words to find.")
            page = finder_reads.search_page(
                conversation, q, after=after, before=before, notes=notes
            )
            return _found(
                {
                    "hits": [hit._asdict() for hit in page.hits],
                    "offset": page.offset,
                    "total": page.total,
                    "capped": page.capped,
                    "more": page.more,
                }
            )
        step = finder_reads.find_step(conversation, parse_kind(kind), after=after, before=before)
    except (FindError, QueryError) as exc:
        return _found({"error": exc.message, "field": exc.field}, status=400)
    return _found(
        {
            "found": step.found._asdict() if step.found is not None else None,
            "resume": str(step.resume) if step.resume is not None else None,
        }
    )
