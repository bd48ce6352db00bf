"""`manage.py tail --url`: the running server's API as `following.TailServer`, for a
`tail` whose channel layer is its own (no `REDIS_URL`): the server stores each message
and block itself, so its open pages see them arrive (docs/contract.md §6)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import orjson

from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation

TIMEOUT = 30.0  # seconds for one request


class ServerUnreachable(Exception):
    """The server did not answer: nothing is lost, the lines are sent again once it does."""


class ServerApi:
    """POSTs to `base` (http://host:port) with a bearer `token`."""

    def __init__(self, *, base: str, token: str, timeout: float = TIMEOUT) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.timeout = timeout

    def messages(self, *, conversation_id: str, messages: list[dict[str, Any]]) -> None:
        # One batch: stored whole or not at all, announced by one live event.
        self._post(f"/api/conversations/{conversation_id}/messages/batch", {"messages": messages})

    def block(self, *, conversation_id: str, seq: int, block: dict[str, Any]) -> None:
        self._post(f"/api/conversations/{conversation_id}/messages/{seq}/blocks", block)

    def _post(self, path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            self.base + path,
            data=orjson.dumps(body),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            answer = exc.read().decode(errors="replace")[:500]
            if exc.code == 404:  # deleted on the server: no longer followed
                raise Conversation.DoesNotExist(answer) from None
            if exc.code in (400, 413, 422):
                raise IngestError("line", f"refused by the server: {answer}") from None
            raise ServerUnreachable(f"{self.base}: {exc.code} {answer}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise ServerUnreachable(f"Is Replay running at {self.base}? {exc}") from None
