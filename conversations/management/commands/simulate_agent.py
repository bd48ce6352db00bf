import time
import urllib.error
import urllib.request
from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.record.demo import DEMO_PNG
from conversations.record.services.api_tokens import api_token_create, api_token_delete

STREAMED_ANSWER = [
    "The latency spike on api-7 lines up with the 14:02 deploy.",
    "The new build enables request tracing at 100% sampling, which pins the CPU.",
    "Rolling back to the previous build (or sampling at 5%) should bring p99 under 200 ms.",
]


class Command(BaseCommand):
    help = (
        "Play a realistic agent turn into a conversation (a new one if none is named) through "
        "the running server's API, slowly enough to watch it arrive live on the dashboard."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", nargs="?", help="Conversation id (default: a new one)")
        parser.add_argument(
            "--speed", type=float, default=1.0, help="Playback speed; 2 is twice as fast."
        )
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="The running server.")

    def handle(
        self, *args: Any, conversation: str | None, speed: float, url: str, **o: Any
    ) -> None:
        if speed <= 0:
            raise CommandError("--speed must be greater than 0.")
        # Through the server's own API (and so its services): with the embedded in-process
        # channel layer, only the server process can tell its watchers.
        token, clear = api_token_create(label="simulate_agent (temporary)")
        base = url.rstrip("/")

        def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
            request = urllib.request.Request(
                base + path,
                data=orjson.dumps(body),
                headers={"Authorization": f"Bearer {clear}", "Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    answer: dict[str, Any] = orjson.loads(response.read())
                    return answer
            except urllib.error.HTTPError as exc:
                raise CommandError(f"{path}: {exc.code} {exc.read().decode()}") from None
            except urllib.error.URLError as exc:
                raise CommandError(f"Is Replay running at {base}? {exc.reason}") from None

        try:
            if conversation is None:
                created = call("/api/conversations", {"title": "Simulated agent: api-7 latency"})
                conversation = str(created["id"])
            messages = f"/api/conversations/{conversation}/messages"
            self.stdout.write(f"Playing into {base}/c/{conversation}/")

            def pause(seconds: float) -> None:
                time.sleep(seconds / speed)

            def say(role: str, *blocks: dict[str, Any]) -> int:
                seq = int(call(messages, {"role": role, "blocks": list(blocks)})["seq"])
                self.stdout.write(f"  message {seq} ({role}, {len(blocks)} blocks)")
                return seq

            def add(seq: int, block: dict[str, Any]) -> None:
                call(f"{messages}/{seq}/blocks", block)
                self.stdout.write(f"    + {block['type']} in message {seq}")

            say(
                "user",
                {"type": "text", "text": "api-7 is slow again. Here is the panel: what changed?"},
                {"type": "image", "media_type": "image/png", "data": DEMO_PNG},
            )
            pause(1.5)
            turn = say("assistant", {"type": "reasoning", "text": "Check the deploy log first."})
            pause(1.0)
            add(
                turn,
                {
                    "type": "tool_use",
                    "id": "sim_1",
                    "name": "deploy_log",
                    "input": {"service": "api"},
                },
            )
            pause(0.8)
            add(
                turn,
                {
                    "type": "tool_use",
                    "id": "sim_2",
                    "name": "host_metrics",
                    "input": {"host": "api-7"},
                },
            )
            pause(1.5)
            say(
                "user",
                {
                    "type": "tool_result",
                    "tool_use_id": "sim_1",
                    "content": "14:02 deploy build 9f3c",
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "sim_2",
                    "content": "TimeoutError: metrics backend did not answer in 10s",
                    "is_error": True,
                },
            )
            pause(1.5)
            answer = say("assistant", {"type": "text", "text": STREAMED_ANSWER[0]})
            for text in STREAMED_ANSWER[1:]:
                pause(0.7)
                add(answer, {"type": "text", "text": text})
        finally:
            # A temporary credential: gone once the turn is played, not left behind revoked.
            api_token_delete(token=token)
        self.stdout.write(self.style.SUCCESS("Done."))
