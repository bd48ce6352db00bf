"""Django admin for share links (docs/contract.md §8): listed, revoked, never edited."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from conversations.record.admin import ReplayAdmin
from conversations.sharing.models import ShareLink
from conversations.sharing.services import share_revoke


@admin.register(ShareLink)
class ShareLinkAdmin(ReplayAdmin[ShareLink]):
    """Share links (docs/contract.md §8): listed with scope, expiry and views; revoked, never
    edited.

    They are made on the conversation page or through the API (the token is shown once
    there); the admin keeps only digests, so it cannot show a link's URL.
    """

    list_display = [
        "id",
        "conversation",
        "scope",
        "toggles",
        "created_by",
        "created_at",
        "expires_at",
        "view_count",
        "last_viewed_at",
        "state",
    ]
    list_filter = ["revoked_at", "expires_at", "images"]
    list_select_related = ["conversation", "created_by"]
    search_fields = ["conversation__title", "=conversation__id"]
    fields = readonly_fields = (
        "conversation",
        "scope",
        "toggles",
        "created_by",
        "created_at",
        "expires_at",
        "revoked_at",
        "view_count",
        "last_viewed_at",
        "state",
    )
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoked through the service, which closes the link's sockets

    @admin.display(description="Scope")
    def scope(self, obj: ShareLink) -> str:
        return "whole, live" if obj.up_to_seq is None else f"frozen, #0 to #{obj.up_to_seq}"

    @admin.display(description="Toggles")
    def toggles(self, obj: ShareLink) -> str:
        return obj.toggles_label

    @admin.display(description="State")
    def state(self, obj: ShareLink) -> str:
        return obj.state(timezone.now())

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        """Revoking is the one change a share link takes: conversations.change_sharelink."""
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    @admin.action(description="Revoke selected share links", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ShareLink]) -> None:
        links = list(queryset)
        for link in links:
            share_revoke(link=link)
        self.message_user(request, f"Revoked {len(links)} share link(s).")
