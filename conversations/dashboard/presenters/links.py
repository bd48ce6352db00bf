"""The URLs pages link to: the dashboard's endpoints by `reverse`, with their query strings,
and the page's toggles between projections."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from conversations.core import replay


def query(**params: Any) -> str:
    return "?" + urlencode(params)


def toggle(label: str, path: str, options: dict[str, object], active: bool) -> dict[str, object]:
    return {"label": label, "url": path + query(**options), "active": active}


def image_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return reverse("block-image", args=[str(conversation_id), message_seq, block_seq])


def block_text_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return reverse("block-text", args=[str(conversation_id), message_seq, block_seq])


def wire_text_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str, part: int | None
) -> str:
    params: dict[str, object] = {"vision": int(vision), "shape": shape}
    if part is not None:
        params["part"] = part
    return reverse("wire-text", args=[str(conversation_id), message_seq]) + query(**params)


def message_blocks_url(conversation_id: object, message_seq: int, start: int) -> str:
    return reverse("message-blocks", args=[str(conversation_id), message_seq]) + query(
        **{"from": start}
    )


def message_record_url(conversation_id: object, message_seq: int) -> str:
    return reverse("message-record", args=[str(conversation_id), message_seq])


def message_projection_url(
    conversation_id: object, message_seq: int, *, vision: bool, shape: str
) -> str:
    return reverse("message-projection", args=[str(conversation_id), message_seq]) + query(
        vision=int(vision), shape=shape
    )


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
