from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from conversations.record.models.tokens import ApiToken
from conversations.record.services.api_tokens import api_token_revoke

# Rotation (docs/deploying.md): create the new token, give it to the agents, watch the old
# one's "last used" stop moving in `--list`, then revoke it by id or by its printed prefix.


class Command(BaseCommand):
    help = (
        "Revoke an API token by its id or its prefix (rpl_XXXX, as the admin and --list show "
        "it); requests with it are refused from then on. --list shows every token."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("token", nargs="?", help="The token's id, or its 8-character prefix.")
        parser.add_argument(
            "--list", action="store_true", help="List the tokens (id, prefix, label, last use)."
        )

    def handle(self, *args: Any, token: str | None, **options: Any) -> None:
        if options["list"]:
            self.list_tokens()
            return
        if not token:
            raise CommandError("Name the token to revoke (its id or prefix), or use --list.")
        found = self.find(token.strip())
        if found.revoked_at is not None:
            self.stdout.write(f"API token {found.pk} ({found}) was already revoked.")
            return
        api_token_revoke(token=found)
        self.stdout.write(f"Revoked API token {found.pk} ({found}).")

    def find(self, given: str) -> ApiToken:
        if given.isdigit():
            matches = ApiToken.objects.filter(pk=int(given))
        elif given.startswith("rpl_") and len(given) == 8:
            matches = ApiToken.objects.filter(prefix=given)
        else:
            # Never echo the argument: it may be a whole token pasted by mistake.
            raise CommandError("TOKEN must be a token's id or its 8-character prefix (rpl_…).")
        found = matches[:2]
        if not found:
            raise CommandError("No API token has that id or prefix (see --list).")
        if len(found) > 1:
            ids = ", ".join(
                str(pk) for pk in matches.order_by("pk").values_list("pk", flat=True)[:20]
            )
            raise CommandError(f"Several API tokens share that prefix (ids {ids}): give the id.")
        return found[0]

    def list_tokens(self) -> None:
        now = timezone.now()
        for token in ApiToken.objects.order_by("pk")[:1000]:
            used = token.last_used_at.isoformat(timespec="seconds") if token.last_used_at else "-"
            if token.revoked_at:
                state = f"revoked {token.revoked_at.isoformat(timespec='seconds')}"
            elif token.expires_at:
                verb = "expired" if token.expires_at <= now else "expires"
                state = f"{verb} {token.expires_at.isoformat(timespec='seconds')}"
            else:
                state = "active"
            created = token.created_at.isoformat(timespec="seconds")
            self.stdout.write(
                f"{token.pk}\t{token.prefix}\t{token.label}\tcreated {created}\t"
                f"last used {used}\t{state}"
            )
