"""Who may watch (docs/contract.md §4): a socket's session and user, checked in two queries.

channels' AuthMiddleware loads the session, then the user, and `has_perm` adds two
more queries (and a conversation check a fifth); on a mass reconnect those queries are
what passes daphne's handshake timeout. Here the session is one query and the user, its
permission and the conversation are one more. The rules are Django's own: the session
must name a configured backend and carry the user's current auth hash (a password change
signs it out), the user must be active, and the permission comes from the user, one of
their groups, or being a superuser (ModelBackend's rules; it is the configured backend).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Permission
from django.contrib.sessions.backends.base import SessionBase
from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef
from django.utils.crypto import constant_time_compare

from conversations.record.models.conversation import Conversation

APP_LABEL, CODENAME = "conversations", "view_conversation"
SIGNED_OUT = 4401
FORBIDDEN = 4403
NOT_FOUND = 4404


@dataclass(frozen=True)
class Access:
    """The verdict: `refusal` is the close code, or None when the user may watch."""

    refusal: int | None
    user_id: object = None


def check(session: SessionBase, conversation_id: uuid.UUID | None = None) -> Access:
    """Whether this session's user may watch (and `conversation_id` exists): 2 queries."""
    try:
        user_id = get_user_model()._meta.pk.to_python(session[SESSION_KEY])  # query 1
        backend = session[BACKEND_SESSION_KEY]
    except (KeyError, ValidationError):
        return Access(SIGNED_OUT)
    if backend not in settings.AUTHENTICATION_BACKENDS:
        return Access(SIGNED_OUT)
    granted = Permission.objects.filter(content_type__app_label=APP_LABEL, codename=CODENAME)
    users = get_user_model().objects.filter(pk=user_id, is_active=True)
    users = users.annotate(
        direct=Exists(granted.filter(user=OuterRef("pk"))),
        via_group=Exists(granted.filter(group__user=OuterRef("pk"))),
    )
    if conversation_id is not None:
        users = users.annotate(
            conversation=Exists(Conversation.objects.filter(pk=conversation_id)),
        )
    user = users.first()  # query 2
    if user is None or not _hash_verified(session, user):
        return Access(SIGNED_OUT)
    if not (getattr(user, "is_superuser", False) or user.direct or user.via_group):
        return Access(FORBIDDEN, user.pk)
    if conversation_id is not None and not getattr(user, "conversation", False):
        return Access(NOT_FOUND, user.pk)
    return Access(None, user.pk)


def has_permission(user_id: Any, permission: str) -> bool:
    """Whether this (active) user holds `permission` now, by Django's own `has_perm`: for
    what a socket offers beyond watching (acknowledging alerts), not on every connect."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and user.has_perm(permission)


def fresh(session: SessionBase) -> SessionBase:
    """The same session, read again from its store (it may have been flushed since)."""
    store: type[SessionBase] = import_module(settings.SESSION_ENGINE).SessionStore
    return store(session.session_key)


def _hash_verified(session: SessionBase, user: AbstractBaseUser) -> bool:
    # As django.contrib.auth.get_user: the current secret, then the fallback secrets.
    session_hash = session.get(HASH_SESSION_KEY)
    if not session_hash:
        return False
    if constant_time_compare(session_hash, user.get_session_auth_hash()):
        return True
    return any(
        constant_time_compare(session_hash, fallback)
        for fallback in user.get_session_auth_fallback_hash()
    )
