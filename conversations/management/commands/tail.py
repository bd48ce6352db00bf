import logging
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.ingest.file_follower import Tail
from conversations.ingest.tail_remote import ServerApi, ServerUnreachable
from conversations.record.services.api_tokens import api_token_create, api_token_delete

DISCOVER_EVERY = 2.0  # seconds between looks for new session files in a directory


class Command(BaseCommand):
    help = (
        "Follow a Claude Code session file, or every session file under a directory "
        "(~/.claude/projects/), storing each complete new line as it is written."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="A session file (.jsonl) or a directory of them.")
        parser.add_argument(
            "--interval", type=float, default=0.25, help="Seconds between polls (default 0.25)."
        )
        parser.add_argument(
            "--once", action="store_true", help="Store what is there now, then stop."
        )
        parser.add_argument(
            "--url",
            help="Send each new line through this running server's API (it must share this "
            "database), so its open pages grow live without a shared REDIS_URL.",
        )
        parser.add_argument(
            "--token",
            help="API token for --url (default: a temporary one, deleted when this stops).",
        )

    def handle(
        self,
        *args: Any,
        path: str,
        interval: float,
        once: bool,
        url: str | None,
        token: str | None,
        **o: Any,
    ) -> None:
        if interval <= 0:
            raise CommandError("--interval must be greater than 0.")
        root = Path(path).expanduser()
        if not root.exists():
            raise CommandError(f"{root} does not exist.")
        if not root.is_dir() and not root.is_file():
            raise CommandError(f"{root} is neither a directory nor a regular file.")
        logging.basicConfig(level=logging.INFO, format="tail: %(message)s")
        if token is not None and url is None:
            raise CommandError("--token goes with --url.")
        layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
        if not once and url is None and "InMemory" in layer:
            # One line: pages opened from the server would otherwise see nothing until reload.
            self.stderr.write(
                "Not live: without REDIS_URL what is stored here reaches the server's open "
                "pages only when they reload; set the same REDIS_URL for both, or pass "
                "--url http://127.0.0.1:8000 to send through the running server."
            )
        temporary = None
        if url is not None and token is None:
            # As simulate_agent does: a credential for this run only, deleted when it stops.
            temporary, token = api_token_create(label="tail --url (temporary)")
        server = ServerApi(base=url, token=token) if url is not None and token else None
        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        tail = Tail(root, server)
        unreachable = False
        try:
            discovered_at = 0.0
            while True:
                now = time.monotonic()
                if now - discovered_at >= DISCOVER_EVERY:
                    for new in tail.discover():
                        self.stdout.write(f"following {new}")
                    discovered_at = now
                try:
                    stored = tail.poll()
                    unreachable = False
                except ServerUnreachable as exc:
                    if not unreachable:  # once per outage, not once per tick
                        self.stderr.write(f"{exc}; sending again when it answers")
                    unreachable, stored = True, 0
                if stored:
                    self.stdout.write(f"stored {stored} change(s)")
                if once or stopping:
                    break
                time.sleep(interval)
        finally:
            tail.close()
            if temporary is not None:
                api_token_delete(token=temporary)
