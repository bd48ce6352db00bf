"""Django's admin autodiscovery imports this; the admin lives in `conversations.record.admin`."""

from conversations.record import admin  # noqa: F401
