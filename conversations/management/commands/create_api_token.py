from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.record import services


class Command(BaseCommand):
    help = "Create an API token with a label; the bare token is the last line printed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("label", help="What the token is for, e.g. 'agent on build-7'.")

    def handle(self, *args: Any, label: str, **options: Any) -> None:
        label = label.strip()
        if not label or len(label) > 200:
            raise CommandError("LABEL must be 1 to 200 characters.")
        token, clear = services.api_token_create(label=label)
        self.stdout.write(f"Created API token {token.pk} for {label!r}. It is shown only once:")
        self.stdout.write(clear)
