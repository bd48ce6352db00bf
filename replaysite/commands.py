"""What `manage.py` checks before a command runs (docs/contract.md §5).

cron runs a command without the deployment's environment (`env -i PATH=…`): no
`DATABASE_URL`, so the settings fall back to the embedded default, a new, empty SQLite
file, and the command fails later on a missing table, or worse, succeeds on nothing. With
`DJANGO_DEBUG=0` (a deployment) a command that works on stored data refuses to start
when it would open a database that does not exist yet, and names the variable.
"""

from __future__ import annotations

import os
from pathlib import Path

# Commands that create the database, or never open it.
WITHOUT_DATA = frozenset(
    {
        "migrate",
        "check",
        "collectstatic",
        "makemigrations",
        "help",
        "version",
        "showmigrations",
        "sqlmigrate",
        "diffsettings",
        "test",
        "shell",
    }
)


def refusal(argv: list[str]) -> str | None:
    """Why this command must not run here, or None."""
    command = argv[1] if len(argv) > 1 else "help"
    if command.startswith("-") or command in WITHOUT_DATA:
        return None
    from django.conf import settings

    database = settings.DATABASES["default"]
    if settings.DEBUG or os.environ.get("DATABASE_URL", "").strip():
        return None
    if not database["ENGINE"].endswith("sqlite3") or Path(database["NAME"]).exists():
        return None
    return (
        f"manage.py {command}: DATABASE_URL is not set and the default database "
        f"({database['NAME']}) does not exist. With DJANGO_DEBUG=0 this is a deployment: give "
        "the command the deployment's environment (DATABASE_URL and the rest; cron starts "
        "commands without it), or run `manage.py migrate` first to start a new SQLite one."
    )
