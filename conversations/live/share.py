"""`/ws/s/TOKEN/`: a share link's live updates (docs/contract.md §8), authorized by the
token alone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Hashable, Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from conversations.core.options import OptionError, ReplayOptions
from conversations.core.socket_window import Quota
from conversations.dashboard import share_pages
from conversations.live import fragments
from conversations.live.conversation import ConversationConsumer
from conversations.live.watcher import BAD_REQUEST, NOT_FOUND, RETRY, TOO_MANY
from conversations.record import events
from conversations.sharing.models import ShareLink

log = logging.getLogger(__name__)

# This process's open sockets, per share link: as the per-user cap, a link holder cannot
# open sockets without end.
share_sockets = Quota()


class ShareConsumer(ConversationConsumer):
    """A share link's socket: the conversation's updates as the share page renders them.

    No session, no user: the link decides. It is checked again every
    REPLAY_SHARE_RECHECK_SECONDS, at its expiry, on every group refresh, and at once on
    `share.revoked`; when it is gone the page is told so (the share notice partial) and the
    socket closes with 4410. A frozen link has no live updates; its socket is refused (so
    nothing past `up_to_seq` is ever sent). Frames carry the link's URLs and, for a link
    without images, no image URL.
    """

    metrics_kind = "share"

    token: str
    link: ShareLink

    async def connect(self) -> None:
        self.token = str(self.scope["url_route"]["kwargs"]["token"])
        try:
            query = ReplayOptions.from_query(
                {name: self.query(name, "") for name in ("vision", "shape") if self.query(name, "")}
            )
        except OptionError:
            await self.refuse(BAD_REQUEST)
            return
        link = await database_sync_to_async(fragments.share_link)(self.token)
        if link is None or not settings.REPLAY_SHARING:
            await self.refuse(NOT_FOUND)
            return
        if link.state(timezone.now()) != "active":
            await self.refuse(share_pages.SOCKET_GONE)
            return
        if link.frozen:
            await self.refuse(BAD_REQUEST)  # nothing past up_to_seq, and nothing live
            return
        if not share_sockets.take(link.pk, settings.REPLAY_MAX_SOCKETS_PER_SHARE):
            await self.refuse(TOO_MANY)
            return
        self.link = link
        options = share_pages.options(link, query)
        self.conversation_id = str(link.conversation_id)
        self.vision, self.shape = options.vision, options.shape
        self.groups_joined = [events.share_group(link.pk), *self.watched_groups()]
        await self.start((share_sockets, link.pk))

    def background(self) -> list[Coroutine[Any, Any, None]]:
        # The link, not a session, decides: its own watch replaces the session's ticks.
        return [self.refresh_groups(), self.watch()]

    async def watch(self) -> None:
        """Check the link every few seconds (and at its expiry): the fallback for a
        `share.revoked` event the layer lost, and how expiry is noticed."""
        while not self.closing:
            wait = float(settings.REPLAY_SHARE_RECHECK_SECONDS)
            if self.link.expires_at is not None:
                until = (self.link.expires_at - timezone.now()).total_seconds()
                wait = max(0.0, min(wait, until))
            await asyncio.sleep(wait)
            try:
                if not await self.recheck(("share",)):
                    return
            except Exception as exc:
                log.warning("closing a share socket whose check failed: %s", exc)
                await self.shut(RETRY)
                return

    async def recheck(self, reason: tuple[Any, ...]) -> bool:
        """The link, not a session: close (saying why) and answer False once it is gone."""
        state = await database_sync_to_async(fragments.share_state)(self.link.pk)
        if state == "active":
            return True
        await self.gone(state)
        return False

    async def gone(self, state: str) -> None:
        """Tell the page the link is gone (revoked, expired or deleted), then close."""
        if self.closing:
            return
        self.closing = True
        await self.send(text_data=await database_sync_to_async(fragments.share_notice)(state))
        await self.close(code=share_pages.SOCKET_GONE)

    async def share_revoked(self, event: events.ShareRevoked) -> None:
        await self.gone("revoked")

    async def conversation_deleted(self, event: events.ConversationDeleted) -> None:
        await self.gone("deleted")

    async def conversation_alerts_changed(self, event: events.AlertsChanged) -> None:
        pass  # alerts are the operators': a share page never shows them

    def view_key(self) -> Hashable:
        # The link's own: its frames hold its own URLs (and maybe no images).
        return ("share", self.link.pk, self.vision, self.shape)

    def build(self, seqs: Sequence[int]) -> fragments.Frame:
        with share_pages.scoped_urls(self.token):
            return fragments.messages_frame(
                self.conversation_id,
                seqs,
                self.vision,
                self.shape,
                images=self.link.images,
                share=True,
                notes=self.link.notes,
            )

    def notes_key(self, seq: int, change: str) -> tuple[object, ...]:
        return ("share-notes", self.link.pk, seq, change)

    def build_notes(self, seq: int) -> str:
        if not self.link.notes:
            return ""  # a link made without notes shows none (docs/contract.md §10)
        with share_pages.scoped_urls(self.token):
            return fragments.notes_frame(self.conversation_id, seq, share=True)

    def build_reload(self) -> fragments.Frame:
        with share_pages.scoped_urls(self.token):
            return fragments.reload_frame(self.conversation_id, self.vision, self.shape)
