from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.record.services.conversations import conversations_prune


class Command(BaseCommand):
    help = (
        "Retention: delete the conversations (with their messages and blocks) that have "
        "had no activity for DAYS days. --dry-run lists them and deletes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            dest="days",
            type=int,
            required=True,
            metavar="DAYS",
            help="Days since a conversation's last activity (at least 1).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="List what would be deleted; delete nothing."
        )

    def handle(self, *args: Any, days: int, dry_run: bool, **options: Any) -> None:
        if days < 1:
            raise CommandError(f"--older-than must be at least 1 day, not {days}.")
        stale = conversations_prune(older_than=timedelta(days=days), dry_run=dry_run)
        for pk, title in stale:
            self.stdout.write(f"{pk} {title}")
        verb = "Would delete" if dry_run else "Deleted"
        self.stdout.write(
            f"{verb} {len(stale)} conversation(s) without activity for {days} day(s)."
        )
