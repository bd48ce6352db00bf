"""Replay's one settings module.

Everything that differs between machines comes from the environment, read by the
small helpers below; a malformed value stops start-up with ImproperlyConfigured
naming the variable.
"""

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from conversations.core import alerts as alerts_core
from replaysite import logs

django_stubs_ext.monkeypatch()  # lets ModelAdmin[Model] and friends run

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be 0 or 1, not {value!r}.")


def env_int(name: str, default: int, *, minimum: int = 1) -> int:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}.") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}.")
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "").strip() or default
    found = {choice.lower(): choice for choice in choices}.get(value.lower())
    if found is None:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return found


def env_networks(name: str) -> list[Any]:
    """Comma-separated networks (`10.0.0.0/8`, `127.0.0.1`)."""
    networks = []
    for item in os.environ.get(name, "").split(","):
        if item.strip():
            try:
                networks.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    f"{name} must list networks such as 10.0.0.0/8 or 127.0.0.1, not {item!r}."
                ) from None
    return networks


def env_hosts(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name, "").strip()
    if value == "":
        return default
    hosts = [host.strip() for host in value.split(",")]
    if any(host == "" for host in hosts):
        raise ImproperlyConfigured(f"{name} has an empty entry: {value!r}.")
    if "*" in hosts:
        raise ImproperlyConfigured(f"{name} may not contain '*': name the hosts Replay serves.")
    return hosts


def env_origins(name: str) -> list[str]:
    value = os.environ.get(name, "").strip()
    if value == "":
        return []
    origins = [origin.strip() for origin in value.split(",")]
    for origin in origins:
        scheme, _, rest = origin.partition("://")
        if scheme not in {"http", "https"} or not rest or "/" in rest:
            raise ImproperlyConfigured(
                f"{name} entries must be origins like https://replay.example, not {origin!r}."
            )
    return origins


def env_database(name: str, default: str) -> dict[str, Any]:
    url = os.environ.get(name, "").strip() or default
    try:
        # Connections are kept (and checked before reuse): opening one per socket
        # handshake is what made a mass reconnect pass daphne's handshake timeout.
        config: dict[str, Any] = dict(
            dj_database_url.parse(url, conn_max_age=600, conn_health_checks=True)
        )
    except Exception as exc:  # dj-database-url raises several types for a bad URL
        raise ImproperlyConfigured(f"{name} is not a valid database URL: {exc}") from None
    engine = config.get("ENGINE", "")
    if engine == "django.db.backends.sqlite3":
        if not config.get("NAME") or not Path(config["NAME"]).is_absolute():
            raise ImproperlyConfigured(
                f"{name} must name an absolute SQLite path (sqlite:////absolute/path.sqlite3)."
            )
        # Several writers at once: WAL lets readers go on, IMMEDIATE takes the write
        # lock at BEGIN so appends queue on the busy timeout instead of failing.
        config["OPTIONS"] = {
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    elif engine == "django.db.backends.postgresql":
        if not config.get("NAME"):
            raise ImproperlyConfigured(
                f"{name} must name a database (postgres://user@host:5432/NAME)."
            )
        # Under ASGI each request's sync code runs in a thread of its own, and Django's
        # persistent connections are per thread: they pile up on the server (measured:
        # 73 idle after 1,000 requests) — Django's docs say to use the driver's pool
        # instead. psycopg's pool keeps them; with CONN_HEALTH_CHECKS Django has the pool
        # check each one before reuse.
        config["CONN_MAX_AGE"] = 0
        config["OPTIONS"] = config.get("OPTIONS", {}) | {
            "pool": {"min_size": 2, "max_size": env_int("REPLAY_DB_POOL_SIZE", 10), "timeout": 10}
        }
    else:
        raise ImproperlyConfigured(f"{name} must be a sqlite:// or postgres:// URL, not {url!r}.")
    return config


def env_dir(name: str, default: Path) -> Path:
    """A folder Replay may write to, created if missing."""
    path = Path(os.environ.get(name, "").strip() or default)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImproperlyConfigured(f"{name} ({path}) is not a usable folder: {exc}") from None
    return path


def secret_key(data_dir: Path) -> str:
    """DJANGO_SECRET_KEY, else a random key kept beside the data so sessions survive restarts."""
    value = os.environ.get("DJANGO_SECRET_KEY", "").strip()
    if value:
        if len(value) < 50:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 50 characters long.")
        return value
    path = data_dir / "secret_key"
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(secrets.token_urlsafe(64))
    except FileExistsError:
        pass
    return path.read_text().strip()


DEBUG = env_bool("DJANGO_DEBUG", False)
HTTPS = env_bool("DJANGO_HTTPS", False)
# HSTS `preload` (with DJANGO_HTTPS=1) puts the domain in browsers' built-in HTTPS-only
# lists, which takes months to undo: only on request, once every subdomain serves HTTPS.
REPLAY_HSTS_PRELOAD = env_bool("REPLAY_HSTS_PRELOAD", False)
DATA_DIR = env_dir("REPLAY_DATA_DIR", BASE_DIR / "data")
SECRET_KEY = secret_key(DATA_DIR)
ALLOWED_HOSTS = env_hosts("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
# Origins a proxy's public address may send (scheme://host[:port]); pages and live
# sockets from them are accepted as same-origin.
CSRF_TRUSTED_ORIGINS = env_origins("DJANGO_CSRF_TRUSTED_ORIGINS")

REPLAY_MAX_BODY_MB = env_int("REPLAY_MAX_BODY_MB", 20)
REPLAY_MAX_IMAGE_MB = env_int("REPLAY_MAX_IMAGE_MB", 5)
REPLAY_MAX_IMAGE_PIXELS = env_int("REPLAY_MAX_IMAGE_PIXELS", 40_000_000)
# Live updates: how long ingest waits for the channel layer before logging and going on,
# and how often a socket renews its group membership (layers expire members).
REPLAY_BROADCAST_TIMEOUT = env_int("REPLAY_BROADCAST_TIMEOUT_MS", 500) / 1000
REPLAY_GROUP_REFRESH_SECONDS = env_int("REPLAY_GROUP_REFRESH_SECONDS", 60)
# How often an open socket's access is checked again, per session (docs/contract.md §4: a
# user deactivated elsewhere loses open sockets within 10 s, signals or not).
REPLAY_ACCESS_RECHECK_SECONDS = env_int("REPLAY_ACCESS_RECHECK_SECONDS", 5)
# Live sockets one user may hold on one server process; the next is closed with 4429.
REPLAY_MAX_SOCKETS_PER_USER = env_int("REPLAY_MAX_SOCKETS_PER_USER", 50)
# Share links (docs/contract.md §8): off with REPLAY_SHARING=0; open share sockets check their link
# this often (revocation also closes them at once, through the channel layer).
REPLAY_SHARING = env_bool("REPLAY_SHARING", True)
# A socket opened with `report=1` waits this long for its resume report, then closes with
# 1011 and the page reconnects (docs/contract.md §4, Live delivery).
REPLAY_REPORT_WAIT_SECONDS = env_int("REPLAY_REPORT_WAIT_SECONDS", 10)
REPLAY_SHARE_RECHECK_SECONDS = env_int("REPLAY_SHARE_RECHECK_SECONDS", 5)
if REPLAY_SHARE_RECHECK_SECONDS > 10:
    raise ImproperlyConfigured(
        "REPLAY_SHARE_RECHECK_SECONDS must be at most 10: a revoked link's sockets close "
        f"within 10 s (docs/contract.md §8), not {REPLAY_SHARE_RECHECK_SECONDS}."
    )
# Alerts (docs/contract.md §11): a failed webhook is retried first after this many seconds,
# then after twice as long each time, for 24 hours; each server process's alert loop looks
# for due `unanswered` clocks and deliveries this often. REPLAY_BASE_URL (scheme://host,
# optional) makes the webhook's `url` absolute.
REPLAY_WEBHOOK_RETRY_SECONDS = env_int("REPLAY_WEBHOOK_RETRY_SECONDS", 30)
REPLAY_ALERT_TICK_SECONDS = env_int("REPLAY_ALERT_TICK_SECONDS", 2)
# 0: this process never sends webhook deliveries (others do); its alerts still fire.
REPLAY_WEBHOOK_SENDER = env_bool("REPLAY_WEBHOOK_SENDER", True)
# Webhooks are refused on loopback, private, link-local and unspecified addresses (checked
# at send time, every address the name resolves to), but for the names, addresses and
# networks listed here: receivers inside the network.
try:
    REPLAY_WEBHOOK_ALLOW_HOSTS = alerts_core.allow_hosts(
        os.environ.get("REPLAY_WEBHOOK_ALLOW_HOSTS", "")
    )
except ValueError as exc:
    raise ImproperlyConfigured(
        f"REPLAY_WEBHOOK_ALLOW_HOSTS must list host names, addresses or networks: {exc}."
    ) from None
REPLAY_BASE_URL = os.environ.get("REPLAY_BASE_URL", "").strip().rstrip("/")
if REPLAY_BASE_URL and not REPLAY_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(
        f"REPLAY_BASE_URL must start with http:// or https://, not {REPLAY_BASE_URL[:40]!r}."
    )
# Open sockets per share link, per server process: a link holder cannot open without end.
REPLAY_MAX_SOCKETS_PER_SHARE = env_int("REPLAY_MAX_SOCKETS_PER_SHARE", 20)
# `/metrics` (replaysite/metrics.py): for a bearer token, or for clients in these networks.
REPLAY_METRICS_TOKEN = os.environ.get("REPLAY_METRICS_TOKEN", "").strip()
if REPLAY_METRICS_TOKEN and len(REPLAY_METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("REPLAY_METRICS_TOKEN must be at least 16 characters long.")
REPLAY_METRICS_ALLOW = env_networks("REPLAY_METRICS_ALLOW")
# Django refuses bodies over 2.5 MB by default; the API's own limit is the one that counts.
DATA_UPLOAD_MAX_MEMORY_SIZE = REPLAY_MAX_BODY_MB * 1024 * 1024

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "template_partials",
    "csp",
    "conversations",
]

MIDDLEWARE = [
    "replaysite.metrics.RouteTimer",  # times everything below it, by route
    "replaysite.middleware.share_headers",  # outermost but the timer: every share response
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "replaysite.middleware.admin_refuses_htmx",
]

ROOT_URLCONF = "replaysite.urls"
ASGI_APPLICATION = "replaysite.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{DATA_DIR / 'replay.sqlite3'}")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if REDIS_URL:
    if not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
        raise ImproperlyConfigured(f"REDIS_URL must be a redis:// URL, not {REDIS_URL!r}.")
    CHANNEL_LAYERS = {
        "default": {
            # channels-redis's, outlasting an outage (conversations/live/layers.py).
            "BACKEND": "conversations.live.layers.OutlastingRedisChannelLayer",
            # redis-py's 5 s default read timeout would cut channels-redis's 5 s blocking
            # receive on an idle socket; give the read some room.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 10}]},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "conversations.live.layers.ThrottledInMemoryChannelLayer"}
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Absolute: a relative STATIC_URL takes the script prefix, which share pages set to
# their link (so that every URL they build stays inside it).
STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("REPLAY_STATIC_ROOT", "").strip() or BASE_DIR / "staticfiles")
STATICFILES_DIRS = [BASE_DIR / "static"]
# In production static files are named by content hash; the page scripts are ES modules
# that import each other, so their imports are rewritten to the hashed names too.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "replaysite.static_storage.ModuleManifestStaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = DEBUG

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31_536_000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = REPLAY_HSTS_PRELOAD
    if not REPLAY_HSTS_PRELOAD:
        # check --deploy's "cannot be submitted to the preload list": left off on purpose.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]

CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

# Share tokens never reach a log line (replaysite/logs.py), whoever writes it.
logs.install()
REPLAY_LOG_LEVEL = env_choice("REPLAY_LOG_LEVEL", "INFO", logs.LEVELS)
REPLAY_LOG_FORMAT = env_choice("REPLAY_LOG_FORMAT", "text", logs.FORMATS)
LOGGING = logs.config(REPLAY_LOG_LEVEL, REPLAY_LOG_FORMAT)
