"""Alerts' cost (docs/contract.md §11), measured from outside as ratios in one run.

Run with `make bench` (or `python -m bench.alerts [--json PATH]`). One daphne on the
embedded default (SQLite, in-memory layer, DJANGO_DEBUG=0); the states compared are
switched between rounds (outside the timing) and timed in interleaved rounds, so the
machine's load hits both alike:

1) a message POST while a rule of every kind is defined and none fires vs a POST with
   no rules defined: ≤ 1.05×;
2) with 1,000 webhook deliveries pending to a receiver that is down (refused, retried
   every second, so the server's sender is always busy) vs none pending: a message POST
   ≤ 1.2×, and the list page ≤ 1.2×.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import kit as benchkit
from bench.kit import Results, ms, paired_ratio

# Each state is timed over a few seconds a round: pressure rules are evaluated every 2 s
# per conversation, so a shorter window would time that evaluation or miss it by chance.
ROUNDS = 10
POSTS_PER_ROUND = 300
PAGES_PER_ROUND = 100
PENDING = 1_000

RULES_TARGET = 1.05
PENDING_TARGET = 1.2


def message(n: int) -> dict[str, Any]:
    return {
        "role": "user",
        "blocks": [{"type": "text", "text": f"Step {n}: the deployment finished without errors."}],
    }


def interleaved(
    states: dict[str, Callable[[], None]], work: Callable[[], None], per_round: int
) -> dict[str, list[float]]:
    """Seconds per call of `work` in each state: a state is set (untimed), then `work` runs
    `per_round` times; states alternate every round, their order too."""
    samples: dict[str, list[float]] = {name: [] for name in states}
    names = list(states)
    for index in range(ROUNDS):
        for name in names if index % 2 == 0 else list(reversed(names)):
            states[name]()
            time.sleep(0.2)  # what the state change set off in the server settles
            start = time.perf_counter()
            for _ in range(per_round):
                work()
            samples[name].append((time.perf_counter() - start) / per_round)
    return samples


def main(argv: list[str] | None = None) -> int:
    import httpx2 as httpx

    args = benchkit.arguments(__doc__).parse_args(argv)
    began = time.perf_counter()
    with benchkit.scratch("replay-bench-alerts-") as tmp:
        env = benchkit.base_env(tmp, f"sqlite:///{tmp / 'bench.sqlite3'}")
        env |= {
            "REPLAY_WEBHOOK_RETRY_SECONDS": "1",
            "REPLAY_ALERT_TICK_SECONDS": "1",
            "REPLAY_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",  # the receivers here are local
        }
        benchkit.manage(env, "migrate", "--noinput", "-v", "0")
        benchkit.setup_django(env)
        from django.db import close_old_connections
        from django.utils import timezone

        from conversations.alerts.models import Alert, AlertRule, Delivery
        from conversations.alerts.services import alert_rule_create
        from conversations.record.models.conversation import Conversation
        from conversations.record.services.api_tokens import api_token_create

        _, token = api_token_create(label="bench-alerts")
        results = Results()
        with benchkit.daphne(env, tmp / "daphne.log") as server:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
                response = client.post("/api/conversations", json={"title": "bench alerts"})
                response.raise_for_status()
                target = str(response.json()["id"])
                counter = iter(range(10**9))

                def post() -> None:
                    client.post(
                        f"/api/conversations/{target}/messages", json=message(next(counter))
                    ).raise_for_status()

                def no_rules() -> None:
                    AlertRule.objects.all().delete()
                    close_old_connections()

                def every_kind() -> None:
                    if not AlertRule.objects.exists():
                        alert_rule_create(kind="pressure", threshold_percent=80)
                        alert_rule_create(kind="tool_error")
                        alert_rule_create(kind="unanswered", after_seconds=60)
                        alert_rule_create(kind="compaction")
                    close_old_connections()

                for _ in range(20):  # warm up
                    post()
                print("1) a message POST with a rule of every kind (none firing) vs no rules")
                samples = interleaved(
                    {"none": no_rules, "rules": every_kind}, post, POSTS_PER_ROUND
                )
                fired = Alert.objects.count()
                results.figure("1: POST, no rules", ms(samples["none"]), "ms", "median")
                results.figure("1: POST, four rules", ms(samples["rules"]), "ms", "median")
                results.target(
                    "1: POST with rules / without",
                    paired_ratio(samples["rules"], samples["none"]),
                    RULES_TARGET,
                    "×",
                    f"({fired} alerts fired)",
                )

                print(f"2) {PENDING:,} deliveries pending to a receiver that is down vs none")
                down = benchkit.free_port()  # nothing listens there
                no_rules()
                rule = alert_rule_create(
                    kind="tool_error", webhook_url=f"http://127.0.0.1:{down}/hook"
                )
                others = [Conversation.objects.create(title=f"alerted {n}") for n in range(PENDING)]
                now = timezone.now()
                alerts = Alert.objects.bulk_create(
                    Alert(rule=rule, conversation=c, seq=0, detail="bench", fired_at=now)
                    for c in others
                )
                Delivery.objects.bulk_create(
                    Delivery(alert=a, url=rule.webhook_url, body=b"{}", created_at=now,
                             state="failed")
                    for a in alerts
                )  # fmt: skip
                close_old_connections()

                def none_pending() -> None:
                    Delivery.objects.update(state="failed", next_attempt_at=None)
                    close_old_connections()

                def all_pending() -> None:
                    Delivery.objects.update(state="pending", next_attempt_at=timezone.now())
                    close_old_connections()

                def list_page() -> None:
                    # The API's list: the page's query and its rows, no session needed.
                    client.get("/api/conversations").raise_for_status()

                states = {"none": none_pending, "pending": all_pending}
                posts = interleaved(states, post, POSTS_PER_ROUND)
                pages = interleaved(states, list_page, PAGES_PER_ROUND)
                attempts = sum(Delivery.objects.values_list("attempts", flat=True))
                results.figure("2: POST, none pending", ms(posts["none"]), "ms", "median")
                results.figure("2: POST, 1,000 pending", ms(posts["pending"]), "ms", "median")
                results.target(
                    "2: POST with 1,000 pending / none",
                    paired_ratio(posts["pending"], posts["none"]),
                    PENDING_TARGET,
                    "×",
                )
                results.figure("2: list, none pending", ms(pages["none"]), "ms", "median")
                results.figure("2: list, 1,000 pending", ms(pages["pending"]), "ms", "median")
                results.target(
                    "2: list with 1,000 pending / none",
                    paired_ratio(pages["pending"], pages["none"]),
                    PENDING_TARGET,
                    "×",
                )
                results.figure(
                    "2: delivery attempts made meanwhile", attempts, "attempts",
                    f"(median POST spread {statistics.pstdev(posts['pending']) * 1e3:.2f} ms)",
                )  # fmt: skip
        return results.finish(began, args.json)


if __name__ == "__main__":
    sys.exit(main())
