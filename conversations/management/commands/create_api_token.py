from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.record.services.api_tokens import api_token_create


class Command(BaseCommand):
    help = "Create an API token with a label; the bare token is the last line printed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("label", help="What the token is for, e.g. 'agent on build-7'.")
        parser.add_argument(
            "--expires-in",
            type=int,
            metavar="DAYS",
            help="Refuse the token after this many days (1 to 3650); default: never.",
        )

    def handle(self, *args: Any, label: str, expires_in: int | None, **options: Any) -> None:
        label = label.strip()
        if not label or len(label) > 200:
            raise CommandError("LABEL must be 1 to 200 characters.")
        if expires_in is not None and not 1 <= expires_in <= 3650:
            raise CommandError(f"--expires-in must be 1 to 3650 days, not {expires_in}.")
        lifetime = timedelta(days=expires_in) if expires_in is not None else None
        token, clear = api_token_create(label=label, expires_in=lifetime)
        until = f", until {token.expires_at:%Y-%m-%d %H:%M} UTC" if token.expires_at else ""
        self.stdout.write(
            f"Created API token {token.pk} for {label!r}{until}. It is shown only once:"
        )
        self.stdout.write(clear)
