"""Settings from the environment (docs/contract.md §5): a malformed value stops start-up naming the
variable; valid values select the database, the channel layer and the deployment options.

Settings are read once, at import: a case runs the settings module again in this process
with its own environment (`read_settings`), and starts a fresh Python process only where
the behaviour is a process's (manage.py's exit, a real database file, two processes).
"""

from __future__ import annotations

import json
import os
import runpy
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from tests import services

ROOT = Path(__file__).resolve().parents[2]
LEAKY = ("DATABASE_URL", "REDIS_URL")
GOOD_SECRET = "k" * 20 + secrets.token_urlsafe(40)


def environment(data_dir: Path, **changes: str) -> dict[str, str]:
    """The test process's environment without any setting of Replay's, plus `changes`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in LEAKY and not key.startswith(("DJANGO_", "REPLAY_"))
    }
    env["DJANGO_SETTINGS_MODULE"] = "replaysite.settings"
    env["REPLAY_DATA_DIR"] = str(data_dir)
    return env | changes


def manage(data_dir: Path, *args: str, **changes: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment(data_dir, **changes),
        capture_output=True,
        text=True,
        timeout=60,
    )


# The settings that docs/contract.md §5 is about.
SHOWN = (
    "DATABASES",
    "CHANNEL_LAYERS",
    "DATA_UPLOAD_MAX_MEMORY_SIZE",
    "DEBUG",
    "ALLOWED_HOSTS",
    "SECRET_KEY",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_PRELOAD",
)


def read_settings(data_dir: Path, **changes: str) -> dict[str, Any]:
    """The settings module run afresh, in this process, in `environment(data_dir, **changes)`:
    its names as a configured Django would hold them (the test process's own are untouched)."""
    with mock.patch.dict(os.environ, environment(data_dir, **changes), clear=True):
        return runpy.run_path(str(ROOT / "replaysite" / "settings.py"))


def show(data_dir: Path, **changes: str) -> dict[str, Any]:
    found = read_settings(data_dir, **changes)
    shown = {n: found[n] if n in found else getattr(global_settings, n) for n in SHOWN}
    return json.loads(json.dumps(shown, default=str))  # type: ignore[no-any-return]


def run_python(data_dir: Path, code: str, **changes: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=environment(data_dir, **changes),
        capture_output=True,
        text=True,
        timeout=60,
    )


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DJANGO_DEBUG", "maybe"),
        ("DJANGO_HTTPS", "2"),
        ("DJANGO_ALLOWED_HOSTS", "*"),
        ("DJANGO_ALLOWED_HOSTS", "replay.example.com,*"),
        ("DJANGO_ALLOWED_HOSTS", "a,,b"),
        ("REPLAY_MAX_BODY_MB", "abc"),
        ("REPLAY_MAX_BODY_MB", "0"),
        ("REPLAY_MAX_BODY_MB", "-5"),
        ("REPLAY_MAX_IMAGE_MB", "1.5"),
        ("REPLAY_MAX_IMAGE_PIXELS", "lots"),
        ("REPLAY_BROADCAST_TIMEOUT_MS", "fast"),
        ("REPLAY_GROUP_REFRESH_SECONDS", "0"),
        ("REPLAY_SHARING", "maybe"),
        ("REPLAY_HSTS_PRELOAD", "sure"),
        ("REPLAY_SHARE_RECHECK_SECONDS", "11"),
        ("REPLAY_MAX_SOCKETS_PER_SHARE", "0"),
        ("DATABASE_URL", "mysql://x"),
        ("DATABASE_URL", "sqlite:///relative.sqlite3"),
        ("DATABASE_URL", "not a url"),
        ("REDIS_URL", "http://x"),
        ("DJANGO_SECRET_KEY", "short"),
    ],
)
def test_malformed_variable_stops_start_up_naming_it(tmp_path: Path, name: str, value: str) -> None:
    # That manage.py then exits with this message as its last line: the two tests below.
    with pytest.raises(ImproperlyConfigured) as stopped:
        read_settings(tmp_path, **{name: value})

    assert name in str(stopped.value)


def test_postgres_url_without_a_database_name_stops_start_up(tmp_path: Path) -> None:
    done = manage(tmp_path, "check", DATABASE_URL="postgres://")

    assert done.returncode != 0
    # The traceback quotes settings.py's source, which names every variable; the message
    # itself, the last line, must name this one.
    message = last_line(done.stderr)
    assert message.startswith("django.core.exceptions.ImproperlyConfigured:"), done.stderr
    assert "DATABASE_URL" in message


def test_data_dir_that_is_a_file_stops_start_up_naming_it(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")

    done = manage(not_a_dir, "check")

    assert done.returncode != 0
    assert "REPLAY_DATA_DIR" in last_line(done.stderr), done.stderr


@pytest.mark.sqlite
def test_migrate_creates_the_default_database_in_a_new_data_dir(tmp_path: Path) -> None:
    # DJANGO_SECRET_KEY given, so no key file is written: the folder must still be made.
    data_dir = tmp_path / "new"

    done = manage(data_dir, "migrate", "--noinput", DJANGO_SECRET_KEY=GOOD_SECRET)

    assert done.returncode == 0, done.stderr
    assert (data_dir / "replay.sqlite3").stat().st_size > 0


def test_defaults_pass_the_system_check(tmp_path: Path) -> None:
    done = manage(tmp_path, "check")

    assert done.returncode == 0, done.stderr
    assert "no issues" in done.stdout


@pytest.mark.sqlite
def test_default_database_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    db = show(tmp_path)["DATABASES"]["default"]

    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(tmp_path / "replay.sqlite3")


@pytest.mark.sqlite
def test_absolute_sqlite_url_keeps_wal_busy_timeout_and_immediate(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "x.sqlite3"
    path.parent.mkdir()

    db = show(tmp_path, DATABASE_URL=f"sqlite:///{path}")["DATABASES"]["default"]

    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"] == str(path)
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
    assert db["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert db["OPTIONS"]["timeout"] >= 5


@pytest.mark.sqlite
def test_absolute_sqlite_url_opens_a_wal_database_with_a_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite3"
    code = """
import django
django.setup()
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("PRAGMA journal_mode")
    print(cursor.fetchone()[0])
    cursor.execute("PRAGMA busy_timeout")
    print(cursor.fetchone()[0])
print(connection.transaction_mode)
"""
    done = run_python(tmp_path, code, DATABASE_URL=f"sqlite:///{path}")

    assert done.returncode == 0, done.stderr
    journal_mode, busy_timeout, transaction_mode = done.stdout.split()
    assert journal_mode == "wal"
    assert int(busy_timeout) >= 5000
    assert transaction_mode == "IMMEDIATE"
    assert path.exists()


@pytest.mark.parametrize("scheme", ["postgres", "postgresql"])
def test_postgres_url_selects_postgresql(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}://replay:pw@db.example.com:5433/replaydb"

    db = show(tmp_path, DATABASE_URL=url)["DATABASES"]["default"]

    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["NAME"], db["USER"], db["PASSWORD"]) == ("replaydb", "replay", "pw")
    assert (db["HOST"], int(db["PORT"])) == ("db.example.com", 5433)


def test_without_redis_url_the_channel_layer_is_in_memory(tmp_path: Path) -> None:
    layers = show(tmp_path)["CHANNEL_LAYERS"]

    assert layers["default"]["BACKEND"] == "conversations.live.layers.ThrottledInMemoryChannelLayer"


def test_redis_url_switches_to_the_redis_channel_layer(tmp_path: Path) -> None:
    layers = show(tmp_path, REDIS_URL="redis://127.0.0.1:6379/3")["CHANNEL_LAYERS"]

    assert layers["default"]["BACKEND"] == "conversations.live.layers.OutlastingRedisChannelLayer"
    assert layers["default"]["CONFIG"]["hosts"] == [
        {"address": "redis://127.0.0.1:6379/3", "socket_timeout": 10}
    ]


@pytest.mark.services
def test_redis_channel_layer_carries_messages_between_processes(tmp_path: Path) -> None:
    url = services.redis_url()
    if url is None:
        if services.required():
            pytest.fail("Redis is not reachable and REPLAY_REQUIRE_SERVICES=1")
        pytest.skip("Redis is not reachable")
    channel = f"replay-test-{secrets.token_hex(8)}"
    send = f"""
import django
django.setup()
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
async_to_sync(get_channel_layer().send)({channel!r}, {{"type": "test.hello", "n": 7}})
"""
    receive = f"""
import asyncio, django
django.setup()
from channels.layers import get_channel_layer
print(asyncio.run(asyncio.wait_for(get_channel_layer().receive({channel!r}), 10)))
"""
    sent = run_python(tmp_path, send, REDIS_URL=url)
    assert sent.returncode == 0, sent.stderr

    received = run_python(tmp_path, receive, REDIS_URL=url)

    assert received.returncode == 0, received.stderr
    assert received.stdout.strip() == "{'type': 'test.hello', 'n': 7}"


def test_body_limit_follows_replay_max_body_mb(tmp_path: Path) -> None:
    assert show(tmp_path)["DATA_UPLOAD_MAX_MEMORY_SIZE"] == 20 * 1024 * 1024
    assert show(tmp_path, REPLAY_MAX_BODY_MB="3")["DATA_UPLOAD_MAX_MEMORY_SIZE"] == 3 * 1024 * 1024


def test_allowed_hosts_are_split_on_commas(tmp_path: Path) -> None:
    hosts = show(tmp_path, DJANGO_ALLOWED_HOSTS=" replay.example.com , 10.0.0.7")["ALLOWED_HOSTS"]

    assert hosts == ["replay.example.com", "10.0.0.7"]


@pytest.mark.parametrize(("value", "debug"), [("0", False), ("1", True), ("", False)])
def test_django_debug_is_zero_or_one(tmp_path: Path, value: str, debug: bool) -> None:
    assert show(tmp_path, DJANGO_DEBUG=value)["DEBUG"] is debug


def test_https_deployment_passes_the_deploy_check(tmp_path: Path) -> None:
    env = {
        "DJANGO_HTTPS": "1",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": GOOD_SECRET,
        "DJANGO_ALLOWED_HOSTS": "replay.example.com",
    }

    done = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout
    shown = show(tmp_path, **env)
    assert shown["SECURE_SSL_REDIRECT"] is True
    assert shown["SESSION_COOKIE_SECURE"] is True
    assert shown["CSRF_COOKIE_SECURE"] is True
    assert shown["SECURE_HSTS_SECONDS"] > 0
    # Preload is hard to undo (browsers' built-in lists): never sent unless asked for.
    assert shown["SECURE_HSTS_PRELOAD"] is False


def test_hsts_preload_is_opt_in_and_then_passes_the_deploy_check(tmp_path: Path) -> None:
    env = {
        "DJANGO_HTTPS": "1",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": GOOD_SECRET,
        "DJANGO_ALLOWED_HOSTS": "replay.example.com",
        "REPLAY_HSTS_PRELOAD": "1",
    }

    done = manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", **env)

    assert done.returncode == 0, done.stdout + done.stderr
    assert show(tmp_path, **env)["SECURE_HSTS_PRELOAD"] is True
    # Without DJANGO_HTTPS there is no HSTS header to carry it.
    assert show(tmp_path, REPLAY_HSTS_PRELOAD="1")["SECURE_HSTS_PRELOAD"] is False


def test_without_https_the_deploy_check_warns_about_it(tmp_path: Path) -> None:
    done = manage(
        tmp_path,
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=GOOD_SECRET,
    )

    assert done.returncode != 0
    assert "SECURE_SSL_REDIRECT" in done.stderr


def test_secret_key_is_generated_in_the_data_dir_and_reused(tmp_path: Path) -> None:
    first = show(tmp_path)["SECRET_KEY"]

    key_file = tmp_path / "secret_key"
    assert key_file.read_text().strip() == first
    assert len(first) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert show(tmp_path)["SECRET_KEY"] == first


def test_secret_key_from_the_environment_writes_no_file(tmp_path: Path) -> None:
    assert show(tmp_path, DJANGO_SECRET_KEY=GOOD_SECRET)["SECRET_KEY"] == GOOD_SECRET
    assert not (tmp_path / "secret_key").exists()


def test_a_command_run_without_the_deployments_environment_refuses_to_start(
    tmp_path: Path,
) -> None:
    """cron's `env -i`: no DATABASE_URL, DJANGO_DEBUG unset (0). `prune` must not open a new,
    empty SQLite database in its place: it stops, naming the variable, and creates nothing."""
    done = manage(tmp_path, "prune", "--older-than", "30")
    assert done.returncode == 1
    assert "DATABASE_URL is not set" in done.stderr
    assert "cron" in done.stderr
    assert not (tmp_path / "replay.sqlite3").exists()
    # In development, or once the embedded default exists, the command runs.
    assert manage(tmp_path, "migrate", "--noinput").returncode == 0
    done = manage(tmp_path, "prune", "--older-than", "30")
    assert done.returncode == 0, done.stderr
    done = manage(tmp_path / "dev", "prune", "--older-than", "30", DJANGO_DEBUG="1")
    assert "DATABASE_URL is not set" not in done.stderr
