import logging
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.record.file_follower import Tail

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

    def handle(self, *args: Any, path: str, interval: float, once: bool, **o: Any) -> None:
        if interval <= 0:
            raise CommandError("--interval must be greater than 0.")
        root = Path(path).expanduser()
        if not root.exists():
            raise CommandError(f"{root} does not exist.")
        if not root.is_dir() and not root.is_file():
            raise CommandError(f"{root} is neither a directory nor a regular file.")
        logging.basicConfig(level=logging.INFO, format="tail: %(message)s")
        layer = settings.CHANNEL_LAYERS["default"]["BACKEND"]
        if not once and "InMemory" in layer:
            self.stderr.write(
                "Without REDIS_URL the channel layer lives in this process only: what is "
                "stored here reaches pages opened from the server when they reload. Set the "
                "same REDIS_URL for the server and this command to watch it arrive live."
            )
        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        tail = Tail(root)
        try:
            discovered_at = 0.0
            while True:
                now = time.monotonic()
                if now - discovered_at >= DISCOVER_EVERY:
                    for new in tail.discover():
                        self.stdout.write(f"following {new}")
                    discovered_at = now
                stored = tail.poll()
                if stored:
                    self.stdout.write(f"stored {stored} change(s)")
                if once or stopping:
                    break
                time.sleep(interval)
        finally:
            tail.close()
