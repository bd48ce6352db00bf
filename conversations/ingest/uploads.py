"""The transcript a POST carries (docs/contract.md §6): the whole body, or the `file` field
of a multipart form, as `curl -F file=@session.jsonl` sends it."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

FIELD = "file"


@dataclass(frozen=True, slots=True)
class Upload:
    raw: bytes
    file_name: str | None  # a multipart file's own name; None for a bare body


class UploadError(ValueError):
    """A multipart form without a `file` field holding one file; names the field."""

    field = FIELD


def transcript_upload(request: HttpRequest) -> Upload:
    """The request's transcript. Raises RequestDataTooBig over the body limit (a multipart
    form counts whole: its files would pass Django's own limit) and UploadError."""
    if request.content_type != "multipart/form-data":
        return Upload(request.body, None)
    # The form may have been read already (the CSRF middleware reads a dashboard POST's),
    # after which the body is gone: the file is taken from the parsed form.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is not None and int(request.META.get("CONTENT_LENGTH") or 0) > limit:
        raise RequestDataTooBig("The form is over the upload limit.")
    files = request.FILES.getlist(FIELD)
    if len(files) != 1:
        raise UploadError(
            f"A multipart form carries the transcript as one file in its `{FIELD}` field "
            f"(curl -F {FIELD}=@session.jsonl), or send the file itself as the body."
        )
    upload = files[0]
    if upload.size is not None and limit is not None and upload.size > limit:
        raise RequestDataTooBig("The file is over the upload limit.")
    return Upload(upload.read(), upload.name or None)
