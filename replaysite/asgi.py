"""ASGI entry point: HTTP (with static files) and, for live pages, WebSockets."""

import asyncio
import os
import tempfile
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replaysite.settings")
django_asgi_app = get_asgi_application()  # sets Django up before anything imports models

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.sessions import SessionMiddlewareStack  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.exceptions import RequestAborted  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

from conversations.live.fanout import serving  # noqa: E402


class BoundedBodyASGIHandler(ASGIHandler):
    """Keeps at most DATA_UPLOAD_MAX_MEMORY_SIZE + 1 bytes of a request body.

    Django's own handler spools every chunk to disk before the view runs, so a body sent
    without Content-Length would be kept whole; this drains the rest unkept, which makes
    `request.body` raise RequestDataTooBig and the API answer 413.

    `read_body(receive)` is not a documented extension point of Django's handler (there is
    no public one for the body); tests/live/test_internals.py fails on an upgrade that changes
    its signature or stops `handle` from calling it.
    """

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # Counted for the live fan-out, which yields to requests (conversations/live/fanout.py).
        serving.started()
        try:
            await super().__call__(scope, receive, send)
        finally:
            serving.finished()

    async def read_body(self, receive: Any) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is None:
            return await super().read_body(receive)
        body_file = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (handed to the request)
            max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE, mode="w+b"
        )
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                body_file.close()
                raise RequestAborted()
            chunk = message.get("body", b"")
            if size <= limit:
                body_file.write(chunk[: limit + 1 - size])
            size += len(chunk)
            if not message.get("more_body", False):
                break
        body_file.seek(0)
        return body_file

    async def listen_for_disconnect(self, receive: Any) -> Any:
        """Django's, but its RequestAborted is always retrieved.

        When the server stops (SIGTERM), daphne cancels the request's coroutine while it
        waits on this task and the view's; the view finishes (an import is stored whole),
        then this task sees the disconnect and raises RequestAborted into a task nobody
        awaits any more, which asyncio reports as "Task exception was never retrieved"
        with a traceback. Retrieving it here ends the request cleanly.
        """
        task = asyncio.current_task()
        if task is not None:
            task.add_done_callback(_retrieve)
        return await super().listen_for_disconnect(receive)


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


from conversations.alerts import loop as alert_loop  # noqa: E402
from conversations.core.counting import tokens  # noqa: E402
from conversations.live.internals import Wire  # noqa: E402
from conversations.live.routing import websocket_urlpatterns  # noqa: E402
from replaysite.health import Probes  # noqa: E402
from replaysite.logs import RequestIds, route_access_log  # noqa: E402
from replaysite.metrics import Metrics  # noqa: E402
from replaysite.origin import SameOriginValidator  # noqa: E402

# Sessions only, not channels' AuthMiddlewareStack: the consumers check the session's
# user, permission and conversation in one query (conversations/live/access.py).
route_access_log()
alert_loop.start_with_server()  # docs/contract.md §11: alerts' clocks and webhooks
# The tokenizer (73 MB) is part of the server, loaded as it starts: every stored block is
# counted as it is written (docs/contract.md §7), so the first write (or page) neither
# waits for it nor makes the server's memory after start-up look smaller than it is.
tokens.encoding()
application = RequestIds(
    ProtocolTypeRouter(
        {
            "http": Metrics(Probes(BoundedBodyASGIHandler())),
            # Wire: daphne's protocol for the live fan-out (RequestIds passes a websocket's
            # send through unchanged, so daphne's own reaches it).
            "websocket": Wire(
                SameOriginValidator(SessionMiddlewareStack(URLRouter(websocket_urlpatterns)))
            ),
        }
    )
)
