"""Django's admin autodiscovery imports this; the admin lives in `conversations.record.admin`
(alerts: `conversations.record.alert_admin`)."""

from conversations.record import admin, alert_admin  # noqa: F401
