from typing import Any

from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from conversations.alerts import loop  # noqa: F401  (alerts follow the record's appends)
        from conversations.record import (
            access_events,
            checks,  # noqa: F401  (registers the system checks)
        )

        user_logged_out.connect(close_sockets_on_logout, dispatch_uid="replay-close-sockets")
        access_events.connect()


def close_sockets_on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """A user who signs out stops watching: their live sockets are closed."""
    from conversations.record import events

    if user is not None:
        events.close_user_sockets(user.pk)
