"""The server's event loop, seen from a sync view's thread: the one internal of asgiref
Replay leans on, kept here alone (guarded by tests/live/test_internals.py).

Why: a sync view runs in asgiref's SyncToAsync thread while its event loop serves every
socket. An event published from the view is handed to that loop's outbox
(conversations/record/events.py) and the request goes on at once; sending it from the
request's thread would make the request wait on the channel layer. asgiref has no public
way to name "the loop that called this thread": `SyncToAsync.threadlocal` is where its own
AsyncToSync looks for it, and a process forked from a server must not use its parent's.
"""

from __future__ import annotations

import asyncio
import os

from asgiref.sync import SyncToAsync


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The running event loop that called this sync thread, if any."""
    threadlocal = SyncToAsync.threadlocal
    if getattr(threadlocal, "main_event_loop_pid", None) != os.getpid():
        return None
    loop: asyncio.AbstractEventLoop | None = getattr(threadlocal, "main_event_loop", None)
    if loop is None or not loop.is_running() or loop.is_closed():
        return None
    return loop
