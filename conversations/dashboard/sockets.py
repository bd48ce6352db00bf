"""The live sockets' paths: a leaf that the pages link to and the ASGI routing serves."""

from urllib.parse import urlencode

LIST_PATH = "ws/conversations/"
CONVERSATION_PATH = "ws/conversations/<uuid:conversation_id>/"


def list_socket_url() -> str:
    return "/" + LIST_PATH


def conversation_socket_url(
    conversation_id: object, *, vision: bool, shape: str, view: dict[str, str] | None = None
) -> str:
    """`view` carries the pressure view's `model` and `window` overrides, if any."""
    return f"/ws/conversations/{conversation_id}/?" + urlencode(
        {"vision": int(vision), "shape": shape, **(view or {})}
    )
