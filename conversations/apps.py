from typing import Any

from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    name = "conversations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out
        from django.db.backends.signals import connection_created

        from conversations.alerts import loop  # noqa: F401  (alerts follow the record's appends)
        from conversations.record import (
            access_events,
            checks,  # noqa: F401  (registers the system checks)
        )

        user_logged_out.connect(close_sockets_on_logout, dispatch_uid="replay-close-sockets")
        connection_created.connect(use_sqlite_variable_limit, dispatch_uid="replay-sqlite-limit")
        access_events.connect()


def close_sockets_on_logout(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    """A user who signs out stops watching: their live sockets are closed."""
    from conversations.record import events

    if user is not None:
        events.close_user_sockets(user.pk)


def use_sqlite_variable_limit(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Django 5.2 assumes SQLite's old limit of 999 parameters a query; ask the library
    for its real one, so a bulk insert of a long message is one statement, not many."""
    if connection.vendor == "sqlite":
        import sqlite3

        limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        connection.features.max_query_params = limit
