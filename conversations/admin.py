"""Django's admin autodiscovery imports this; each part of the house registers its own
models' admin: the record's in `conversations.record.admin`, the slices' in theirs."""

from conversations.alerts import admin as alerts_admin  # noqa: F401
from conversations.ingest import admin as ingest_admin  # noqa: F401
from conversations.record import admin as record_admin  # noqa: F401
from conversations.sharing import admin as sharing_admin  # noqa: F401
