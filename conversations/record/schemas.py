"""The strict shapes of what may be stored: every writer validates through these.

`ImageIn` checks that the bytes really are an image of the named type, within the
size and pixel limits, before anything is stored.
"""

from __future__ import annotations

import base64
import binascii
import io
import itertools
from typing import Annotated, Any, Literal, TypeAlias

from django.conf import settings
from PIL import Image, UnidentifiedImageError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from conversations.core import replay, strictjson
from conversations.core.counting.context_windows import MAX_WINDOW

PILLOW_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/gif": "GIF",
    "image/webp": "WEBP",
}

Name = Annotated[str, Field(min_length=1, max_length=255)]
MAX_ERRORS = 5  # the errors a refused body reports (docs/contract.md §3 Limits)
MAX_KEYS = 32  # more than any schema's fields: an object with more holds unknown keys


def no_nul(value: Any, field: str = "value") -> Any:
    """PostgreSQL text and jsonb cannot hold U+0000; refuse it everywhere alike."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{field} contains a NUL character (U+0000), which cannot be stored")
    elif isinstance(value, dict):
        for key, item in value.items():
            no_nul(key, field)
            no_nul(item, field)
    elif isinstance(value, list):
        for item in value:
            no_nul(item, field)
    return value


def storable(value: Any) -> Any:
    """The limits of docs/contract.md §3 on a JSON value from any writer: depth, exact numbers,
    valid text.

    The API's parser already enforces them on the body; admin forms and importers hand
    Python values straight to the schemas, so the schemas check again.
    """
    try:
        strictjson.check(value)
    except strictjson.StrictJSONError as exc:
        # `_describe` joins a message that starts with a sub-path onto the field's own path.
        where = exc.path if exc.path.startswith("[") or not exc.path else f".{exc.path}"
        raise ValueError(f"{where}: {exc.reason}" if where else exc.reason) from None
    return value


class Strict(BaseModel):
    """Unknown keys refused; a list stops at its first bad item (`Field(fail_fast=True)`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _few_unknown_keys(cls, data: Any) -> Any:
        """An object of more than MAX_KEYS keys is validated on its known keys and its first
        MAX_ERRORS unknown ones: each unknown key is an error, and a million of them took
        seconds and megabytes to report."""
        if not isinstance(data, dict) or len(data) <= MAX_KEYS:
            return data  # every valid body: one length test per object
        fields = cls.model_fields
        unknown = itertools.islice((key for key in data if key not in fields), MAX_ERRORS)
        known = {key: data[key] for key in fields if key in data}
        return known | {key: data[key] for key in unknown}


class BlockBase(Strict):
    """What every block may carry besides its kind's fields."""

    # The source element an imported block came from (docs/contract.md §1); stored, never replayed.
    origin: dict[str, Any] | None = None

    _origin = field_validator("origin")(storable)
    _origin_text = field_validator("origin")(no_nul)  # jsonb cannot hold U+0000


class TextIn(BlockBase):
    type: Literal["text"]
    text: str

    _text = field_validator("text")(no_nul)


class ToolUseIn(BlockBase):
    type: Literal["tool_use"]
    id: Name
    name: Name
    input: dict[str, Any]

    _names = field_validator("id", "name")(no_nul)
    _input = field_validator("input")(storable)


class ToolResultIn(BlockBase):
    type: Literal["tool_result"]
    tool_use_id: Name
    name: Name | None = None
    content: str
    is_error: bool = False

    _strings = field_validator("tool_use_id", "name", "content")(no_nul)


class ReasoningIn(BlockBase):
    type: Literal["reasoning"]
    text: str

    _text = field_validator("text")(no_nul)


class ImageIn(BlockBase):
    type: Literal["image"]
    media_type: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
    data: str

    @field_validator("data")
    @classmethod
    def _really_an_image(cls, data: str, info: Any) -> str:
        media_type = info.data.get("media_type")
        if media_type is None:  # media_type itself failed; that error names it
            return data
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("is not valid base64") from None
        limit = settings.REPLAY_MAX_IMAGE_MB * 1024 * 1024
        if len(raw) > limit:
            raise ValueError(
                f"decodes to {len(raw)} bytes, over the {settings.REPLAY_MAX_IMAGE_MB} MB "
                "image limit (REPLAY_MAX_IMAGE_MB)"
            )
        check_image(raw, media_type)
        return data


def check_image(raw: bytes, media_type: str) -> None:
    """Raise ValueError unless `raw` decodes as `media_type` within the pixel limit."""
    fmt = PILLOW_FORMATS[media_type]
    try:
        with Image.open(io.BytesIO(raw), formats=[fmt]) as image:
            width, height = image.size
            if width * height > settings.REPLAY_MAX_IMAGE_PIXELS:
                raise ValueError(
                    f"is {width}×{height} pixels, over the limit of "
                    f"{settings.REPLAY_MAX_IMAGE_PIXELS} (REPLAY_MAX_IMAGE_PIXELS)"
                )
            image.load()
    except Image.DecompressionBombError:
        raise ValueError("is too many pixels to decode safely (decompression bomb)") from None
    except (UnidentifiedImageError, OSError, SyntaxError, EOFError):
        raise ValueError(f"is not a valid {media_type} image") from None


def image_size(data: str, media_type: str) -> tuple[int | None, int | None]:
    """Width and height of an image block's picture (its header only); None, None when it
    cannot be read, which validation has already refused for every stored block."""
    fmt = PILLOW_FORMATS.get(media_type)
    if fmt is None:
        return None, None
    try:
        with Image.open(io.BytesIO(base64.b64decode(data)), formats=[fmt]) as image:
            width, height = image.size
    except (UnidentifiedImageError, OSError, ValueError, binascii.Error):
        return None, None
    return width, height


BlockIn: TypeAlias = Annotated[
    TextIn | ToolUseIn | ToolResultIn | ReasoningIn | ImageIn, Field(discriminator="type")
]
BLOCK_ADAPTER: TypeAdapter[BlockIn] = TypeAdapter(BlockIn)


class MessageIn(Strict):
    role: Literal["system", "user", "assistant"]
    blocks: list[BlockIn] = Field(default_factory=list, fail_fast=True)
    metadata: dict[str, Any] = Field(default_factory=dict)

    _metadata = field_validator("metadata")(storable)
    _metadata_text = field_validator("metadata")(no_nul)  # jsonb cannot hold U+0000


MAX_BATCH_MESSAGES = 10_000


class MessageBatchIn(Strict):
    messages: Annotated[
        list[MessageIn], Field(min_length=1, max_length=MAX_BATCH_MESSAGES, fail_fast=True)
    ]


class ConversationIn(Strict):
    title: Annotated[str, Field(max_length=500)]
    metadata: dict[str, Any] = Field(default_factory=dict)

    _title = field_validator("title")(no_nul)
    _metadata = field_validator("metadata")(storable)
    _metadata_text = field_validator("metadata")(no_nul)  # jsonb cannot hold U+0000


class ConversationPatch(Strict):
    """`PATCH /api/conversations/ID`: the context window a conversation counts against
    (docs/contract.md §7), or null to go back to its model's."""

    context_window: Annotated[int, Field(ge=1, le=MAX_WINDOW)] | None


SHARE_MAX_SECONDS = 30 * 24 * 3600
SHARE_DEFAULT_SECONDS = 7 * 24 * 3600


class ShareIn(Strict):
    """A share link's scope (docs/contract.md §8): omitted toggles are free, `expires_in` null is
    never."""

    up_to_seq: Annotated[int, Field(ge=0)] | None = None
    expires_in: Annotated[int, Field(ge=1, le=SHARE_MAX_SECONDS)] | None = SHARE_DEFAULT_SECONDS
    vision: bool | None = None
    shape: Literal["openai", "anthropic"] | None = None
    images: bool = True
    notes: bool = False


class NoteIn(Strict):
    """A new note (docs/contract.md §10); what the text and labels may hold is checked by
    `core.notes` in the service, which names the field."""

    text: str
    labels: list[str] = Field(default=[], fail_fast=True)
    block: Annotated[int, Field(ge=0)] | None = None


class NotePatch(Strict):
    """A note's new text and/or labels."""

    text: str | None = None
    labels: Annotated[list[str], Field(fail_fast=True)] | None = None


def error_sentence(exc: ValidationError) -> str:
    """The first error as a sentence that names the field, e.g. `blocks[0].text: …`."""
    return _describe(exc.errors(include_url=False)[0])


def error_list(exc: ValidationError) -> list[dict[str, str]]:
    """The first MAX_ERRORS errors, each with its field: an answer of a few KB at most."""
    return [
        {"field": _path(error["loc"], error["type"]), "message": _describe(error)}
        for error in exc.errors(include_url=False)[:MAX_ERRORS]
    ]


def _path(loc: tuple[int | str, ...], kind: str) -> str:
    path = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif (previous is None or isinstance(previous, int)) and part in replay.BLOCK_TYPES:
            pass  # pydantic names the union member; the index already says which block
        else:
            path += f".{part}" if path else part
        previous = part
    if kind in {"union_tag_not_found", "union_tag_invalid"}:
        path += ".type" if path else "type"
    return path or "body"


def _describe(error: Any) -> str:
    path = _path(error["loc"], error["type"])
    kind = error["type"]
    types = ", ".join(replay.BLOCK_TYPES)
    if kind == "union_tag_not_found":
        return f"{path} is required: one of {types}"
    if kind == "union_tag_invalid":
        return f"{path} {error['ctx']['tag']!r} is not a block type: one of {types}"
    if kind == "missing":
        return f"{path} is required"
    if kind == "extra_forbidden":
        return f"{path} is not a known field"
    message = str(error["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        if message.startswith((".", "[")):  # a sub-path inside the field (`storable`)
            return f"{path}{message}"
    else:
        message = message[:1].lower() + message[1:]
    return f"{path}: {message}"
