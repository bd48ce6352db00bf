"""The URLs pages link to: the dashboard's endpoints by `reverse` (a message's and its blocks'
from their conversation's path, reversed once), with their query strings, and the page's
toggles between projections."""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

from django.urls import get_script_prefix, get_urlconf, reverse

from conversations.core import replay


def query(**params: Any) -> str:
    return "?" + urlencode(params)


def toggle(label: str, path: str, options: dict[str, object], active: bool) -> dict[str, object]:
    return {"label": label, "url": path + query(**options), "active": active}


# A frame or a page links every block and message it shows; these paths are built from the
# conversation's one reversed path (urls.py's shapes, checked against `reverse` by
# tests/dashboard/test_presenters.py), not with a `reverse` each.
MESSAGE_PATHS = {
    "block-text": "m/{seq}/b/{block}/text",
    "block-image": "m/{seq}/b/{block}/image",
    "wire-text": "m/{seq}/wire",
    "message-blocks": "m/{seq}/blocks",
    "message-record": "m/{seq}/record.json",
    "message-projection": "m/{seq}/projection.json",
    "note-add": "m/{seq}/notes",
}


@functools.lru_cache(maxsize=256)
def _conversation_path(prefix: str, urlconf: str | None, conversation_id: str) -> str:
    return reverse("conversation", args=[conversation_id], urlconf=urlconf)


def message_path(name: str, conversation_id: object, seq: int, block: int = 0) -> str:
    """The path `reverse(name, args=[conversation_id, seq(, block)])` gives, under the
    current script prefix (a share link's too): the conversation's path, reversed once."""
    base = _conversation_path(get_script_prefix(), get_urlconf(), str(conversation_id))
    return base + MESSAGE_PATHS[name].format(seq=int(seq), block=int(block))


@functools.lru_cache(maxsize=8)
def _toggles(vision: bool, shape: str) -> str:
    return query(vision=int(vision), shape=shape)


def image_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return message_path("block-image", conversation_id, message_seq, block_seq)


def block_text_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return message_path("block-text", conversation_id, message_seq, block_seq)


def wire_text_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str, part: int | None
) -> str:
    path = message_path("wire-text", conversation_id, message_seq)
    if part is None:
        return path + _toggles(vision, shape)
    return path + query(vision=int(vision), shape=shape, part=part)


def message_blocks_url(conversation_id: object, message_seq: int, start: int) -> str:
    return message_path("message-blocks", conversation_id, message_seq) + query(**{"from": start})


def message_record_url(conversation_id: object, message_seq: int) -> str:
    return message_path("message-record", conversation_id, message_seq)


def message_projection_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str
) -> str:
    return message_path("message-projection", conversation_id, message_seq) + _toggles(
        vision, shape
    )


def note_add_url(conversation_id: object, message_seq: int) -> str:
    return message_path("note-add", conversation_id, message_seq)


def projection_toggles(
    path: str, options: dict[str, object], *, vision: bool, shape: replay.Shape
) -> list[dict[str, object]]:
    """The page's two choices as two groups, each with exactly one option active. An
    option's `prefix` (the group's name, visually hidden) makes its accessible name whole:
    "Vision on", not "on"."""
    return [
        {
            "key": "vision",
            "label": "Vision",
            "options": [
                toggle("on", path, options | {"vision": 1}, vision) | {"prefix": "Vision "},
                toggle("off", path, options | {"vision": 0}, not vision) | {"prefix": "Vision "},
            ],
        },
        {
            "key": "shape",
            "label": "Shape",
            "options": [
                toggle("OpenAI", path, options | {"shape": "openai"}, shape == "openai"),
                toggle("Anthropic", path, options | {"shape": "anthropic"}, shape == "anthropic"),
            ],
        },
    ]
