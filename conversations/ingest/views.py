"""The list page's file drop (docs/contract.md §6): a transcript imported as a conversation."""

from __future__ import annotations

from urllib.parse import unquote

from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_POST

from conversations.core import importers
from conversations.ingest import uploads
from conversations.ingest.imports import transcript_import
from conversations.record.errors import IngestError
from conversations.web.pages import ADD_PERMISSION


@require_POST
@login_required
@permission_required(ADD_PERMISSION, raise_exception=True)
def import_file(request: HttpRequest) -> HttpResponse:
    """The list page's file drop: the file is the body, or a multipart form's `file`
    (CSRF-protected, session signed in, add_conversation); answers JSON like POST
    /api/imports (no markup, nothing echoed)."""
    try:
        upload = uploads.transcript_upload(request)
    except RequestDataTooBig:
        limit = f"The file is over the upload limit of {settings.REPLAY_MAX_BODY_MB} MB."
        return JsonResponse({"error": limit}, status=413)
    except uploads.UploadError as exc:
        return JsonResponse({"error": str(exc), "field": exc.field}, status=400)
    raw = upload.raw
    name = unquote(request.headers.get("X-File-Name", ""))[:255] or upload.file_name
    if not raw.strip():
        return JsonResponse({"error": importers.EMPTY_FILE}, status=400)
    try:
        outcome = transcript_import(
            raw=raw, format=request.GET.get("format") or None, title=None, file_name=name
        )
    except importers.ImportFormatError as exc:
        return JsonResponse({"error": exc.sentence()}, status=400)
    except IngestError as exc:
        return JsonResponse({"error": f"The file is not readable: {exc}."}, status=400)
    conversation = outcome.conversation
    return JsonResponse(
        {
            "id": str(conversation.id),
            "url": conversation.get_absolute_url(),
            "messages": outcome.messages,
            "blocks": outcome.blocks,
            "gaps": len(outcome.gaps),
            "created": outcome.created,
        },
        status=201 if outcome.created else 200,
    )
