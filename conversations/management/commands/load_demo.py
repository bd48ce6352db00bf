from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from conversations.record.demo import load_demo
from conversations.record.models.conversation import Conversation


class Command(BaseCommand):
    help = "Load the demo conversation when the database holds none (or always, with --force)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--force", action="store_true", help="Load it even if not empty.")

    def handle(self, *args: Any, force: bool, **options: Any) -> None:
        if Conversation.objects.exists() and not force:
            self.stdout.write("Conversations exist already; the demo was not loaded.")
            return
        conversation = load_demo()
        self.stdout.write(f"Loaded the demo conversation {conversation.id}.")
