import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = (
        "Create the operator account when no user exists (password kept in the data folder) "
        "and print how to sign in."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args: Any, url: str, **options: Any) -> None:
        User = get_user_model()
        saved = settings.DATA_DIR / "operator_password"
        if not User.objects.exists():
            password = secrets.token_urlsafe(12)
            User.objects.create_superuser("operator", "operator@localhost", password)
            settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
            saved.write_text(password)
            saved.chmod(0o600)
        if saved.exists() and User.objects.filter(username="operator").exists():
            password = saved.read_text().strip()
            self.stdout.write(
                f"Sign in at {url}accounts/login/ as 'operator' with password '{password}'."
            )
        else:
            self.stdout.write(
                f"Sign in at {url}accounts/login/ with an existing account "
                "(manage.py createsuperuser makes one)."
            )
