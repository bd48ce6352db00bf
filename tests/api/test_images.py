"""Image blocks through the API: only real images of the named type, within the size and
pixel limits, are stored; every refusal is a 400 naming the field and stores nothing."""

from __future__ import annotations

import base64
import functools
import io
import os
import struct
import zlib
from typing import Any

import pytest
from PIL import Image

from conversations.record.models.conversation import Block, Message
from tests.conftest import ApiClient

FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WEBP"}


def image_bytes(fmt: str, size: tuple[int, int] = (6, 4), mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, (10, 120, 240) if mode == "RGB" else 1).save(buffer, format=fmt)
    return buffer.getvalue()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


@functools.cache
def bomb_png() -> bytes:
    """A valid 1-bit PNG of 20000×20000 pixels that is under 50 kB on the wire."""
    width = height = 20_000
    rows = zlib.compress(bytes(height * (1 + width // 8)), 9)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
        + chunk(b"IDAT", rows)
        + chunk(b"IEND", b"")
    )


def state() -> tuple[Any, ...]:
    return (
        list(Message.objects.order_by("id").values_list("id", "block_count")),
        list(Block.objects.order_by("id").values_list()),
    )


@pytest.fixture
def conversation_id(api: ApiClient) -> str:
    response = api.post("/api/conversations", {"title": "Images"})
    cid = response.json()["id"]
    assert api.post(f"/api/conversations/{cid}/messages", {"role": "user"}).status_code == 201
    return cid


def send(api: ApiClient, cid: str, via: str, image: dict[str, Any]) -> Any:
    block = {"type": "image", **image}
    if via == "message":
        body = {"role": "user", "blocks": [{"type": "text", "text": "see"}, block]}
        return api.post(f"/api/conversations/{cid}/messages", body)
    return api.post(f"/api/conversations/{cid}/messages/0/blocks", block)


VIA = ["message", "block"]


def refused(response: Any, field: str, *mentions: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error, error
    for mention in mentions:
        assert mention in error, error


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("media_type", FORMATS)
def test_a_real_image_of_the_named_type_is_stored(api, conversation_id, via, media_type):
    data = b64(image_bytes(FORMATS[media_type]))
    response = send(api, conversation_id, via, {"media_type": media_type, "data": data})
    assert response.status_code == 201, response.content
    stored = Block.objects.get(type="image")
    assert (stored.media_type, stored.data) == (media_type, data)


@pytest.mark.parametrize(
    ("fmt", "mode"), [("PNG", "RGBA"), ("PNG", "P"), ("GIF", "P"), ("WEBP", "RGBA"), ("PNG", "1")]
)
def test_other_image_modes_are_stored(api, conversation_id, fmt, mode):
    media_type = next(m for m, f in FORMATS.items() if f == fmt)
    data = b64(image_bytes(fmt, mode=mode))
    response = send(api, conversation_id, "message", {"media_type": media_type, "data": data})
    assert response.status_code == 201, response.content


def test_an_animated_gif_is_stored(api, conversation_id):
    frames = [Image.new("P", (4, 4), colour) for colour in (1, 2, 3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    image = {"media_type": "image/gif", "data": b64(buffer.getvalue())}
    assert send(api, conversation_id, "message", image).status_code == 201


REFUSALS: dict[str, tuple[dict[str, Any], str, str]] = {
    "unlisted-media-type": (
        {"media_type": "image/bmp", "data": b64(image_bytes("BMP"))},
        "media_type",
        "",
    ),
    "svg-media-type": ({"media_type": "image/svg+xml", "data": b64(b"<svg/>")}, "media_type", ""),
    "bare-format-name": ({"media_type": "png", "data": b64(image_bytes("PNG"))}, "media_type", ""),
    "not-base64": ({"media_type": "image/png", "data": "this is not base64!"}, "data", "base64"),
    "urlsafe-base64": (
        {
            "media_type": "image/png",
            "data": b64(image_bytes("PNG")).replace("+", "-").replace("/", "_") + "-_",
        },
        "data",
        "base64",
    ),
    "empty-data": ({"media_type": "image/png", "data": ""}, "data", ""),
    "png-labelled-jpeg": (
        {"media_type": "image/jpeg", "data": b64(image_bytes("PNG"))},
        "data",
        "image/jpeg",
    ),
    "jpeg-labelled-png": (
        {"media_type": "image/png", "data": b64(image_bytes("JPEG"))},
        "data",
        "image/png",
    ),
    "gif-labelled-webp": (
        {"media_type": "image/webp", "data": b64(image_bytes("GIF", mode="P"))},
        "data",
        "image/webp",
    ),
    "svg-labelled-png": (
        {
            "media_type": "image/png",
            "data": b64(
                b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
                b'<rect width="10" height="10"/></svg>'
            ),
        },
        "data",
        "image/png",
    ),
    "text-labelled-png": (
        {"media_type": "image/png", "data": b64(b"just some text, not an image")},
        "data",
        "image/png",
    ),
    "truncated-png": (
        {"media_type": "image/png", "data": b64(image_bytes("PNG", (64, 64), "RGB")[:-40])},
        "data",
        "image/png",
    ),
    "png-cut-inside-pixels": (
        {"media_type": "image/png", "data": b64(bomb_png()[:2000])},
        "data",
        "",
    ),
    "truncated-jpeg": (
        {"media_type": "image/jpeg", "data": b64(image_bytes("JPEG", (64, 64))[:200])},
        "data",
        "image/jpeg",
    ),
    "png-signature-only": (
        {"media_type": "image/png", "data": b64(b"\x89PNG\r\n\x1a\n")},
        "data",
        "image/png",
    ),
    "decompression-bomb": (
        {"media_type": "image/png", "data": b64(bomb_png())},
        "data",
        "pixels",
    ),
    "data-not-a-string": ({"media_type": "image/png", "data": ["iVBO"]}, "data", ""),
    "missing-data": ({"media_type": "image/png"}, "data", "required"),
    "missing-media-type": ({"data": b64(image_bytes("PNG"))}, "media_type", "required"),
}


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("case", REFUSALS)
def test_a_bad_image_is_refused_naming_the_field(api, conversation_id, via, case):
    image, field, mention = REFUSALS[case]
    before = state()
    response = send(api, conversation_id, via, image)
    where = "blocks[1]." if via == "message" else ""
    refused(response, where + field, mention)
    assert state() == before


@pytest.mark.parametrize("via", VIA)
def test_an_image_over_the_pixel_limit_is_refused(api, conversation_id, settings, via):
    settings.REPLAY_MAX_IMAGE_PIXELS = 99
    data = b64(image_bytes("PNG", (10, 10)))
    before = state()
    response = send(api, conversation_id, via, {"media_type": "image/png", "data": data})
    refused(response, "data", "pixels", "REPLAY_MAX_IMAGE_PIXELS")
    assert state() == before


def test_an_image_at_the_pixel_limit_is_stored(api, conversation_id, settings):
    settings.REPLAY_MAX_IMAGE_PIXELS = 100
    data = b64(image_bytes("PNG", (10, 10)))
    response = send(api, conversation_id, "block", {"media_type": "image/png", "data": data})
    assert response.status_code == 201


@pytest.mark.parametrize("via", VIA)
def test_an_image_over_the_size_limit_is_refused(api, conversation_id, settings, via):
    settings.REPLAY_MAX_IMAGE_MB = 1
    noise = Image.frombytes("RGB", (620, 620), os.urandom(620 * 620 * 3))
    buffer = io.BytesIO()
    noise.save(buffer, format="PNG", compress_level=0)
    raw = buffer.getvalue()
    assert len(raw) > 1024 * 1024
    before = state()
    response = send(api, conversation_id, via, {"media_type": "image/png", "data": b64(raw)})
    refused(response, "data", "REPLAY_MAX_IMAGE_MB")
    assert state() == before
    settings.REPLAY_MAX_IMAGE_MB = 2
    response = send(api, conversation_id, via, {"media_type": "image/png", "data": b64(raw)})
    assert response.status_code == 201


def test_an_image_in_an_assistant_message_is_refused(api, conversation_id):
    image = {"type": "image", "media_type": "image/png", "data": b64(image_bytes("PNG"))}
    before = state()
    response = api.post(
        f"/api/conversations/{conversation_id}/messages", {"role": "assistant", "blocks": [image]}
    )
    refused(response, "blocks[0]", "user")
    assert state() == before
