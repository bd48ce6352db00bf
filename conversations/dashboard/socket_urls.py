"""The live sockets' paths: a leaf that the pages link to and the ASGI routing serves."""

from urllib.parse import urlencode

LIST_PATH = "ws/conversations/"
CONVERSATION_PATH = "ws/conversations/<uuid:conversation_id>/"


def list_socket_url(since: str | None = None) -> str:
    """The list's socket; `since` (an ISO time taken before the page's rows were read) is
    the page's position: rows that changed after it are sent when the socket opens."""
    return "/" + LIST_PATH + ("?" + urlencode({"since": since}) if since else "")


def conversation_socket_url(
    conversation_id: object,
    *,
    vision: bool,
    shape: str,
    view: dict[str, str] | None = None,
    report: bool = False,
) -> str:
    """`view` carries the pressure view's `model` and `window` overrides, if any; `report`:
    the client reports what it holds as soon as the socket opens (the pages do), and takes
    changes only after that (docs/contract.md §4)."""
    return f"/ws/conversations/{conversation_id}/?" + urlencode(
        {"vision": int(vision), "shape": shape, **(view or {})} | ({"report": 1} if report else {})
    )
