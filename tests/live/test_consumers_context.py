"""The pressure view over the socket (docs/contract.md §7): every frame carries the same `pressure`
partial a fresh page load renders, with the page's own window override; a bad override
is refused like a bad toggle."""

from __future__ import annotations

import re
from typing import Any

from asgiref.sync import sync_to_async
from django.test import Client

from tests.live import test_consumers as live
from tests.live.test_consumers import (
    add_block,
    append,
    create,
    frame,
    in_loop,
    page,
    refused,
    socket,
    text,
    tool_result,
    tool_use,
)

# The live tests' fixtures: a fresh in-memory layer, plain static files, an operator.
fresh_channel_layer = live.fresh_channel_layer
plain_static_storage = live.plain_static_storage
operator = live.operator

PRESSURE = re.compile(r'<section id="pressure".*?</section>', re.S)


def pressure(html: str) -> str:
    found = PRESSURE.search(html)
    assert found is not None, html[:300]
    return found.group(0)


@in_loop
async def test_each_frame_carries_the_pressure_a_fresh_page_renders(operator: Client) -> None:
    conversation = await sync_to_async(create)("Pressure")
    cid = conversation.id
    await sync_to_async(append)(cid, "user", [text("read the file")])
    steps: list[Any] = [
        lambda: append(cid, "assistant", [tool_use("c1", "read", path="/etc/hosts")]),
        lambda: append(cid, "user", [tool_result("c1", "127.0.0.1 localhost\n" * 50)]),
        lambda: add_block(cid, 2, text("and that was all")),
    ]
    for view in ("", "window=1000&model=gpt-4o"):
        base = f"/ws/conversations/{cid}/?vision=1&shape=openai"
        async with socket(f"{base}&{view}" if view else base, operator) as ws:
            for step in steps if not view else steps[:1]:
                await sync_to_async(step)()
                pushed = await frame(ws)
                url = f"/c/{cid}/?vision=1&shape=openai" + (f"&{view}" if view else "")
                fresh = await sync_to_async(page)(operator, url)
                assert pressure(pushed) == pressure(fresh)
        if view:
            assert 'data-window="1000"' in pressure(pushed)


@in_loop
async def test_a_bad_window_override_is_refused(operator: Client) -> None:
    conversation = await sync_to_async(create)()
    base = f"/ws/conversations/{conversation.id}/?vision=1&shape=openai"
    for query in ("window=0", "window=lots", "model=" + "x" * 201):
        assert await refused(f"{base}&{query}", operator) == 4400, query
