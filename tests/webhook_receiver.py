"""A real HTTP receiver for webhook tests: a thread on 127.0.0.1 that records every POST
(path, headers, body, when) and answers as its `answer` function says, with the body its
`body` function streams (none by default; `sent` counts the bytes it managed to write)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


# (the request, how many requests with its delivery id came before) → (status, headers)
Answer = Callable[[Received, int], tuple[int, dict[str, str]]]


def ok(request: Received, seen: int) -> tuple[int, dict[str, str]]:
    return 200, {}


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # both test servers' senders connect at once


@dataclass
class Receiver:
    answer: Answer = ok
    port: int = 0
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)  # ends any hang
    body: Callable[[], Iterable[bytes]] | None = None  # streamed, then the connection closes
    sent: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the http.server name)
                length = int(self.headers.get("Content-Length", "0"))
                got = Received(
                    self.path, {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length), time.monotonic(),
                )  # fmt: skip
                with receiver.lock:
                    seen = sum(
                        1
                        for r in receiver.received
                        if r.headers.get("x-replay-delivery")
                        == got.headers.get("x-replay-delivery")
                    )
                    receiver.received.append(got)
                status, headers = receiver.answer(got, seen)
                if status == 0:  # hang: no answer until released
                    receiver.release.wait(30)
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if receiver.body is None:
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.end_headers()  # HTTP/1.0 without a length: the body ends with the connection
                try:
                    for chunk in receiver.body():
                        self.wfile.write(chunk)
                        receiver.sent += len(chunk)
                except OSError:
                    pass  # the client closed the connection

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.lock = threading.Lock()
        self.server = Server(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def wait_for(self, count: int, seconds: float = 20) -> list[Received]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{len(self.received)} requests received, not {count}")

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
