"""Block dicts and users for tests: what an agent posts, and who watches."""

from __future__ import annotations

import base64
import io
from typing import Any

from django.contrib.auth.models import Permission, User
from PIL import Image


def image_b64(fmt: str = "PNG", colour: tuple[int, int, int] = (200, 30, 30)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (3, 2), colour).save(buffer, format=fmt)
    return base64.b64encode(buffer.getvalue()).decode()


def png(colour: tuple[int, int, int] = (200, 30, 30)) -> dict[str, Any]:
    return {"type": "image", "media_type": "image/png", "data": image_b64("PNG", colour)}


def jpeg() -> dict[str, Any]:
    return {"type": "image", "media_type": "image/jpeg", "data": image_b64("JPEG")}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str = "lookup", **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def tool_result(call_id: str, content: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def make_user(username: str, *, operator: bool = True, password: str | None = None) -> User:
    """A user, with conversations.view_conversation when `operator`."""
    user = User.objects.create_user(username, password=password)
    if operator:
        user.user_permissions.add(
            Permission.objects.get(
                codename="view_conversation", content_type__app_label="conversations"
            )
        )
    return user


def stored(title: str, *messages: tuple[str, list[dict[str, Any]], dict[str, Any]]) -> Any:
    """A conversation stored through the services: (role, blocks, metadata) per message."""
    from conversations.record.schemas import BLOCK_ADAPTER
    from conversations.record.services.appending import message_append
    from conversations.record.services.conversations import conversation_create

    conversation = conversation_create(title=title)
    for role, blocks, metadata in messages:
        message_append(
            conversation=conversation,
            role=role,
            blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
            metadata=metadata,
        )
    conversation.refresh_from_db()
    return conversation
