"""Changes to who may watch, told to the affected users' live sockets (docs/contract.md §4).

These are not domain events: users, groups and permissions are Django's own rows,
changed by the admin, `manage.py shell` or `changepassword`, never through our
services, so signals on them are the only hook (docs/architecture.md's rule against `post_save`
is about the record). Each change is published after commit, so a socket that checks
again sees the committed state; the sockets' periodic refresh is the fallback.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete

from conversations.record import events

CHANGES = {"post_add", "post_remove", "pre_clear"}


def user_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    """Deactivation, a new password, superuser status: any save but a login's."""
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    events.access_changed_on_commit([instance.pk])


def user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    events.access_changed_on_commit([instance.pk])


def user_relations_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    """user.user_permissions or user.groups changed, from either side."""
    if action not in CHANGES:
        return
    if not reverse:
        events.access_changed_on_commit([instance.pk])
    elif action == "pre_clear":  # permission.user_set.clear(), group.user_set.clear()
        events.access_changed_on_commit(instance.user_set.values_list("pk", flat=True))
    else:
        events.access_changed_on_commit(pk_set or ())


def group_permissions_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    """group.permissions (or permission.group_set) changed: every member is told."""
    if action not in CHANGES:
        return
    users = get_user_model().objects.all()
    if not reverse:
        members = users.filter(groups=instance)
    elif action == "pre_clear":
        members = users.filter(groups__permissions=instance)
    else:
        members = users.filter(groups__pk__in=pk_set or ())
    events.access_changed_on_commit(members.values_list("pk", flat=True).distinct())


def group_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    # pre_delete: the members are still there to be found.
    events.access_changed_on_commit(instance.user_set.values_list("pk", flat=True))


def connect() -> None:
    """Connect the handlers (from AppConfig.ready)."""
    user = get_user_model()
    post_save.connect(user_saved, sender=user, dispatch_uid="replay-access-user-saved")
    post_delete.connect(user_deleted, sender=user, dispatch_uid="replay-access-user-deleted")
    pre_delete.connect(group_deleted, sender=Group, dispatch_uid="replay-access-group-deleted")
    for through, uid in [
        (user.user_permissions.through, "replay-access-user-permissions"),
        (user.groups.through, "replay-access-user-groups"),
    ]:
        m2m_changed.connect(user_relations_changed, sender=through, dispatch_uid=uid)
    m2m_changed.connect(
        group_permissions_changed,
        sender=Group.permissions.through,
        dispatch_uid="replay-access-group-permissions",
    )
