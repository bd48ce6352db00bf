"""The deployment docs/deploying.md describes, run for real (docs/contract.md
§5): Debian's nginx from deploy/nginx.conf with a self-signed certificate, in front of two
daphne processes started by deploy/replay@.service's command line with deploy/replay.env's
environment (and nothing else), on PostgreSQL and Redis; deploy/replay.cron's lines run as
cron runs them.

The deploy files are changed only where a test must: ports, the certificate and log paths,
and the folders of the checkout. nginx runs as this test's user, its pid, logs and
temporary files in the test's folder. The site is served on ports other than 443 and 80,
which is what `proxy_set_header Host $host` used to break.
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import httpx2 as httpx
import psycopg
import pytest
from django.conf import settings
from websockets.sync.client import connect

from tests import services as found
from tests.conftest import ROOT, free_port
from tests.redis_server import RedisServer, available

pytestmark = [pytest.mark.live, pytest.mark.services]

DEPLOY = ROOT / "deploy"
HOST = "localhost"
OPERATOR = {"username": "operator", "password": "a long nginx deploy passphrase 9"}
# docs/deploying.md's steps, run with the environment file and nothing else
# (test_the_deploying_guide_runs_these_steps checks that it says exactly these).
STEPS = [
    ".venv/bin/python manage.py migrate --noinput",
    ".venv/bin/python manage.py collectstatic --noinput",
    ".venv/bin/python manage.py check --deploy --fail-level WARNING",
    ".venv/bin/python manage.py createsuperuser --noinput",
]
TOKEN_STEP = '.venv/bin/python manage.py create_api_token "agents"'
BACKUP = 'pg_dump --format=custom --file=replay-$(date +%F).dump "$DATABASE_URL"'
RESTORE = (
    'pg_restore --clean --if-exists --no-owner --dbname="$DATABASE_URL" replay-2026-12-01.dump'
)
MIGRATE = STEPS[0]
MB = 1024 * 1024


def unavailable(reason: str) -> None:
    if found.required():
        pytest.fail(f"REPLAY_REQUIRE_SERVICES=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def nginx_binary() -> str | None:
    """Debian installs it in /usr/sbin, which a user's PATH may leave out."""
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def templated(text: str, changes: dict[str, str]) -> str:
    """`text` with each key replaced; every key must be there (a deploy file that changed
    shape fails here rather than running something else)."""
    for old, new in changes.items():
        assert old in text, f"{old!r} is no longer in the deploy file"
        text = text.replace(old, new)
    return text


def env_file(text: str, values: dict[str, str]) -> str:
    """deploy/replay.env with `values` put in place of the template's."""
    for key, value in values.items():
        line = re.compile(rf"^{key}=.*$", re.MULTILINE)
        assert line.search(text), f"{key} is not in deploy/replay.env"
        text = line.sub(f"{key}={value}".replace("\\", "\\\\"), text)
    return text


def read_env_file(text: str) -> dict[str, str]:
    """What systemd's EnvironmentFile= (and `set -a; . file`) make of the file."""
    env = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value.strip("'\"")
    return env


def exec_start(port: int) -> list[str]:
    """deploy/replay@.service's ExecStart for instance `port`, in this checkout."""
    unit = (DEPLOY / "replay@.service").read_text()
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    bindir = str(Path(sys.executable).parent)
    command = templated(line.removeprefix("ExecStart="), {"/srv/replay/.venv/bin": bindir})
    return [part.replace("%i", str(port)) for part in shlex.split(command)]


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}: {log.read_text()}")


def certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={HOST}", "-addext", f"subjectAltName=DNS:{HOST}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert, key


@dataclass
class Site:
    root: Path
    url: str  # https://localhost:PORT
    http_url: str  # http://localhost:PORT, nginx's redirect
    tls: ssl.SSLContext
    env_path: Path
    env: dict[str, str]  # the environment file's, and a PATH: all the processes get
    database_url: str
    token: str
    daphne_ports: list[int]
    access_log: Path
    steps: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    daphnes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def daphne_logs(self) -> list[Path]:
        return [self.root / f"daphne-{port}.log" for port in self.daphne_ports]

    def start_daphne(self, port: int) -> subprocess.Popen[bytes]:
        """What `systemctl start replay@PORT` runs (without waiting for it to listen)."""
        log = self.root / f"daphne-{port}.log"
        process = subprocess.Popen(
            exec_start(port), cwd=ROOT, env=self.env, stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.daphnes[port] = process
        return process

    def wait_for_daphne(self, port: int) -> None:
        wait_for_port(port, self.daphnes[port], self.root / f"daphne-{port}.log")

    def stop_daphne(self, port: int) -> int:
        """What `systemctl stop replay@PORT` does: SIGTERM, and 60 s to exit."""
        process = self.daphnes.pop(port)
        process.send_signal(signal.SIGTERM)
        return process.wait(60)

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.tls, timeout=60, **kwargs)  # type: ignore[arg-type]

    def api(self) -> httpx.Client:
        return self.client(headers={"Authorization": f"Bearer {self.token}"})

    def manage(self, command: str, **extra: str) -> subprocess.CompletedProcess[str]:
        args = shlex.split(command)
        assert args[:2] == [".venv/bin/python", "manage.py"]
        return subprocess.run(
            [sys.executable, *args[1:]], cwd=ROOT, env=self.env | extra,
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip


def create_database(base_url: str, name: str) -> str:
    parsed = urlparse(base_url)
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        db.execute(f'CREATE DATABASE "{name}"')
    return parsed._replace(path=f"/{name}").geturl()


def drop_database(url: str) -> None:
    parsed = urlparse(url)
    admin = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(f'DROP DATABASE IF EXISTS "{parsed.path.lstrip("/")}" WITH (FORCE)')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    postgres = found.postgres_url()
    if postgres is None:
        unavailable("PostgreSQL is not reachable")
    if not available():
        unavailable("redis-server is not installed")
    nginx = nginx_binary()
    if nginx is None:
        unavailable("nginx is not installed (apt-get install nginx)")
    assert postgres is not None and nginx is not None
    root = tmp_path_factory.mktemp("nginx-deploy")
    started: list[subprocess.Popen[bytes]] = []
    redis = RedisServer(root)
    site: Site | None = None
    database_url = create_database(postgres, urlparse(postgres).path.lstrip("/") + "_nginx")
    try:
        redis.start()
        https_port, http_port, ports = free_port(), free_port(), [free_port(), free_port()]
        values = {
            "DJANGO_ALLOWED_HOSTS": HOST,
            "DJANGO_SECRET_KEY": "nginx-" + secrets.token_urlsafe(48),
            "DATABASE_URL": database_url,
            "REDIS_URL": redis.url,
            "REPLAY_DATA_DIR": str(root / "data"),
            "REPLAY_STATIC_ROOT": str(root / "staticfiles"),
        }
        env_text = env_file((DEPLOY / "replay.env").read_text(), values)
        env_path = root / "replay.env"
        env_path.write_text(env_text)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"} | read_env_file(env_text)
        cert, key = certificate(root)
        tls = ssl.create_default_context(cafile=str(cert))
        site = Site(
            root=root,
            url=f"https://{HOST}:{https_port}",
            http_url=f"http://{HOST}:{http_port}",
            tls=tls,
            env_path=env_path,
            env=env,
            database_url=database_url,
            token="",
            daphne_ports=ports,
            access_log=root / "nginx" / "replay.access.log",
        )
        superuser = {
            "DJANGO_SUPERUSER_USERNAME": OPERATOR["username"],
            "DJANGO_SUPERUSER_PASSWORD": OPERATOR["password"],
            "DJANGO_SUPERUSER_EMAIL": "operator@example.com",
        }
        for step in STEPS:
            done = site.manage(step, **superuser)
            assert done.returncode == 0, f"{step}: {done.stdout}{done.stderr}"
            site.steps[step] = done
        made = site.manage(TOKEN_STEP)
        assert made.returncode == 0, made.stderr
        site.token = made.stdout.split()[-1]

        for port in ports:
            site.start_daphne(port)
        for port in ports:
            site.wait_for_daphne(port)

        prefix = root / "nginx"
        prefix.mkdir()
        site_conf = templated(
            (DEPLOY / "nginx.conf").read_text(),
            {
                "listen 443 ssl;": f"listen 127.0.0.1:{https_port} ssl;",
                "listen 80;": f"listen 127.0.0.1:{http_port};",
                "server 127.0.0.1:8001 ": f"server 127.0.0.1:{ports[0]} ",
                "server 127.0.0.1:8002 ": f"server 127.0.0.1:{ports[1]} ",
                "/etc/letsencrypt/live/replay.example.com/fullchain.pem": str(cert),
                "/etc/letsencrypt/live/replay.example.com/privkey.pem": str(key),
                "/var/log/nginx/replay.access.log": str(site.access_log),
            },
        )
        (prefix / "replay.conf").write_text(site_conf)
        # What Debian's /etc/nginx/nginx.conf is to the site file, with the temporary
        # folders (compiled in under /var/lib/nginx) in the test's prefix.
        (prefix / "nginx.conf").write_text(
            "worker_processes 1;\n"
            "events { worker_connections 512; }\n"
            "http {\n"
            + "".join(f"    {kind}_temp_path {kind}_temp;\n"
                      for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
            + "    include replay.conf;\n"
            "}\n"
        )  # fmt: skip
        main = f"daemon off; pid {prefix / 'nginx.pid'}; error_log {prefix / 'error.log'} info;"
        if os.geteuid() == 0:  # as root nginx would hand its workers to `nobody`
            main += f" user {getpass.getuser()} {grp.getgrgid(os.getegid()).gr_name};"
        command = [nginx, "-p", f"{prefix}/", "-c", "nginx.conf", "-e", "error.log", "-g", main]
        checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        assert checked.returncode == 0, checked.stderr
        nginx_log = prefix / "stderr.log"
        process = subprocess.Popen(command, stdout=nginx_log.open("wb"), stderr=subprocess.STDOUT)
        started.append(process)
        wait_for_port(https_port, process, prefix / "error.log")
        yield site
    finally:
        for process in [*reversed(started), *(site.daphnes.values() if site else [])]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)
        redis.stop()
        drop_database(database_url)


# --- helpers -------------------------------------------------------------------------------


def sign_in(site: Site, client: httpx.Client) -> httpx.Response:
    """The sign-in form, as a browser fills it (Origin and Referer of the https page)."""
    page = client.get("/accounts/login/")
    assert page.status_code == 200, page.text[:300]
    return client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": client.cookies["csrftoken"]} | OPERATOR,
        headers={"Origin": site.url, "Referer": f"{site.url}/accounts/login/"},
    )


def claude_code_file(size: int) -> bytes:
    """A Claude Code session file of about `size` bytes: a few hundred long messages."""
    lines, total, i = [], 0, 0
    while total < size:
        role = "user" if i % 2 == 0 else "assistant"
        text = f"message {i} " + "lorem ipsum dolor sit amet " * 900
        line = json.dumps({
            "type": role, "uuid": f"u{i}", "parentUuid": f"u{i - 1}" if i else None,
            "sessionId": "nginx", "timestamp": "2026-01-01T00:00:00Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}]},
        })  # fmt: skip
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines).encode()


def log_lines(path: Path, needle: str) -> int:
    return sum(needle in line for line in path.read_text().splitlines())


def raw_https(site: Site, request: bytes) -> bytes:
    """One request written by hand over TLS; the whole answer (nginx closes after it)."""
    port = urlparse(site.url).port
    with (
        socket.create_connection(("127.0.0.1", port), 10) as sock,
        site.tls.wrap_socket(sock, server_hostname=HOST) as tls,
    ):
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    return answer


# --- the deployment ------------------------------------------------------------------------


def test_the_setup_steps_pass_and_check_deploy_is_clean(site: Site) -> None:
    checked = site.steps[".venv/bin/python manage.py check --deploy --fail-level WARNING"]
    assert "System check identified no issues" in checked.stdout
    assert (site.root / "staticfiles" / "staticfiles.json").exists()


def test_signing_in_over_https_on_a_port_other_than_443(site: Site) -> None:
    with site.client() as client:
        signed_in = sign_in(site, client)

        # Host $http_host: Django sees localhost:PORT, which the browser's Origin names.
        assert signed_in.status_code == 302, signed_in.text[:500]
        assert signed_in.headers["location"] == "/"
        cookies = signed_in.headers.get_list("set-cookie")
        assert any(c.startswith("sessionid=") and "Secure" in c for c in cookies), cookies
        home = client.get("/")
        assert home.status_code == 200
        assert OPERATOR["username"] in home.text
        hsts = home.headers["strict-transport-security"]
        assert "max-age=31536000" in hsts
        assert "preload" not in hsts  # opt-in: REPLAY_HSTS_PRELOAD


def test_plain_http_is_sent_to_https(site: Site) -> None:
    with httpx.Client(base_url=site.http_url, timeout=10) as client:
        answer = client.post("/api/conversations?x=1", json={"title": "clear"})

    assert answer.status_code == 301
    # In production the https server is on 443, so the redirect names no port.
    assert answer.headers["location"] == f"https://{HOST}/api/conversations?x=1"
    # An agent given a daphne port gets the same answer (docs/deploying.md: agents use nginx's
    # https); the probes there are answered before the redirect.
    port = site.daphne_ports[0]
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as direct:
        redirected = direct.post(
            "/api/conversations",
            json={"title": "clear"},
            headers={"Host": HOST, "Authorization": f"Bearer {site.token}"},
        )
        ready = direct.get("/readyz")
    assert redirected.status_code == 301
    assert redirected.headers["location"] == f"https://{HOST}/api/conversations"
    assert ready.status_code == 200


def test_a_5_mb_import_goes_through_nginx_and_its_urls_keep_the_port(site: Site) -> None:
    body = claude_code_file(5 * MB)
    assert len(body) >= 5 * MB

    with site.api() as api:
        answer = api.post("/api/imports?format=claude-code&title=Five%20MB", content=body)

        assert answer.status_code == 201, answer.text[:500]
        imported = answer.json()
        assert imported["url"].startswith(f"{site.url}/")
        record = api.get(f"/api/conversations/{imported['id']}")
    assert record.status_code == 200
    assert len(record.json()["messages"]) == imported["messages"] > 100


def test_a_body_over_the_limit_gets_the_apis_json_error(site: Site) -> None:
    # nginx answers from the headers alone; no need to send the 20 MB.
    answer = raw_https(
        site,
        f"POST /api/imports HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {site.token}\r\n"
        f"Content-Length: {20 * MB + 1}\r\nConnection: close\r\n\r\n".encode(),
    )

    head, _, body = answer.partition(b"\r\n\r\n")
    # nginx's limit is the app's own, so nothing the app would take is refused before it.
    assert (
        f"client_max_body_size {settings.REPLAY_MAX_BODY_MB}m;"
        in (DEPLOY / "nginx.conf").read_text()
    )
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"application/json" in head
    assert "REPLAY_MAX_BODY_MB" in json.loads(body)["error"]


def test_a_live_update_crosses_processes_through_nginx(site: Site) -> None:
    with site.api() as api:
        made = api.post("/api/conversations", json={"title": "across"})
        assert made.status_code == 201, made.text
        cid = made.json()["id"]
        assert made.json()["url"].startswith(f"{site.url}/")
        path = f"/api/conversations/{cid}/messages"
        first = {"role": "user", "blocks": [{"type": "text", "text": "hello"}]}
        assert api.post(path, json=first).status_code == 201
        with site.client() as browser:
            assert sign_in(site, browser).status_code == 302
            session = browser.cookies["sessionid"]
        ws_path = f"/ws/conversations/{cid}/"
        socket_url = site.url.replace("https://", "wss://") + ws_path + "?vision=1&shape=openai"
        with connect(
            socket_url,
            ssl=site.tls,
            additional_headers={"Cookie": f"sessionid={session}", "Origin": site.url},
            open_timeout=10,
        ) as ws:
            ws.send(json.dumps({"type": "resume", "from": 0, "counts": [1]}))
            # Which process holds the socket: the one whose access log has its handshake.
            deadline = time.monotonic() + 10
            held = [0, 0]
            while sum(held) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
                held = [log_lines(p, f"WSCONNECT {ws_path}") for p in site.daphne_logs]
            assert sorted(held) == [0, 1], held
            other = site.daphne_logs[held.index(0)]

            # nginx spreads the appends over both processes: until one lands on the other.
            crossed = None
            for i in range(6):
                before = log_lines(other, f"POST {path}")
                text = f"crossing {i}"
                sent = api.post(path, json={"role": "assistant", "blocks": [
                    {"type": "text", "text": text}]})  # fmt: skip
                assert sent.status_code == 201, sent.text
                frames = ""
                deadline = time.monotonic() + 15
                while text not in frames and time.monotonic() < deadline:
                    try:
                        frames += str(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                    except TimeoutError:
                        break
                assert text in frames, f"the socket never got {text!r}"
                time.sleep(0.2)  # daphne's access line follows the response
                if log_lines(other, f"POST {path}") > before:
                    crossed = text
                    break
    assert crossed is not None, "no append reached the process without the socket"


def test_the_client_address_reaches_daphne_and_cannot_be_forged(site: Site) -> None:
    """nginx replaces X-Forwarded-For with the address it sees; daphne (--proxy-headers)
    uses it: REPLAY_METRICS_ALLOW=127.0.0.1 holds through the proxy."""
    elsewhere = httpx.HTTPTransport(verify=site.tls, local_address="127.0.0.2")
    with site.client(transport=elsewhere) as client:
        forged = client.get(
            "/metrics", headers={"X-Forwarded-For": "127.0.0.1", "X-Request-ID": "from-dot-2"}
        )
    with site.client() as client:
        local = client.get("/metrics")

    assert forged.status_code == 403
    assert local.status_code == 200
    assert "replay_http_request_duration_seconds" in local.text
    lines = [
        line
        for log in site.daphne_logs
        for line in log.read_text().splitlines()
        if "from-dot-2" in line and "GET /metrics" in line
    ]
    assert lines and all("127.0.0.2" in line for line in lines), lines


def test_share_tokens_never_reach_nginxs_access_log(site: Site) -> None:
    with site.api() as api:
        cid = api.post("/api/conversations", json={"title": "shared"}).json()["id"]
        made = api.post(f"/api/conversations/{cid}/shares", json={})
    assert made.status_code == 201, made.text
    share_url = made.json()["url"]
    token = share_url.rstrip("/").rsplit("/", 1)[1]
    assert share_url.startswith(f"{site.url}/s/")

    with site.client() as client:
        page = client.get(share_url, headers={"X-Request-ID": "share-look-1"})
        assert page.status_code == 200
        client.get(share_url + "nowhere/?q=1")
    socket_url = site.url.replace("https://", "wss://") + f"/ws/s/{token}/?vision=1&shape=openai"
    with connect(socket_url, ssl=site.tls, additional_headers={"Origin": site.url}):
        pass  # upgraded (101); closed at once

    time.sleep(0.5)  # nginx logs a socket when it closes
    logged = site.access_log.read_text()
    assert token not in logged
    assert '/s/[redacted]/ HTTP/1.1" 200' in logged
    assert "/s/[redacted]/nowhere/?q=1 " in logged
    assert '/ws/s/[redacted]/?vision=1&shape=openai HTTP/1.1" 101' in logged
    # The request id nginx logs is the one the app's lines carry.
    assert "id=share-look-1" in logged
    assert any("share-look-1" in log.read_text() for log in site.daphne_logs)


def test_the_cron_lines_run_with_the_units_environment(site: Site) -> None:
    with site.api() as api:
        stale = api.post("/api/conversations", json={"title": "stale"}).json()["id"]
        fresh = api.post("/api/conversations", json={"title": "fresh"}).json()["id"]
    with psycopg.connect(site.database_url, autocommit=True) as db:
        db.execute(
            "UPDATE conversations_conversation SET updated_at = now() - interval '100 days' "
            "WHERE id = %s",
            [stale],
        )
    cron = (DEPLOY / "replay.cron").read_text()
    jobs = [
        line.split(None, 6)[6]
        for line in cron.splitlines()
        if line.strip() and not line.startswith("#") and "=" not in line.split()[0]
    ]
    assert [job.rsplit("manage.py ", 1)[1].split()[0] for job in jobs] == [
        "prune",
        "clearsessions",
    ]

    for job in jobs:
        command = templated(
            job,
            {
                "cd /srv/replay": f"cd {shlex.quote(str(ROOT))}",
                "/etc/replay/replay.env": shlex.quote(str(site.env_path)),
                ".venv/bin/python": shlex.quote(sys.executable),
            },
        )
        # cron's environment: its PATH and SHELL, nothing else.
        done = subprocess.run(
            ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "/bin/sh", "-c", command],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    with site.api() as api:
        assert api.get(f"/api/conversations/{stale}").status_code == 404
        assert api.get(f"/api/conversations/{fresh}").status_code == 200


def test_a_rolling_restart_loses_no_request(site: Site) -> None:
    """docs/deploying.md's upgrade: one process at a time, the next once the first is ready
    (/readyz answers over plain HTTP on its own port); nginx sends every request to the
    process that is up."""
    answers: list[int | str] = []
    running = threading.Event()
    running.set()

    def read() -> None:
        with site.api() as api:
            while running.is_set():
                try:
                    answers.append(api.get("/api/conversations?page_size=1").status_code)
                except httpx.HTTPError as exc:
                    answers.append(type(exc).__name__)
                time.sleep(0.02)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for port in site.daphne_ports:
            assert site.stop_daphne(port) == 0
            site.start_daphne(port)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            else:
                raise AssertionError(f"daphne on {port} never became ready")
        time.sleep(0.5)
    finally:
        running.clear()
        reader.join(30)

    assert len(answers) > 20
    assert set(answers) == {200}, [a for a in answers if a != 200]


def test_a_backup_restored_brings_back_the_record_share_links_and_sessions(
    site: Site,
) -> None:
    """pg_dump, a deletion, then docs/deploying.md's restore: the units stopped, pg_restore,
    migrate, started again. Same secret key: the session signed in before still works."""
    with site.api() as api:
        cid = api.post("/api/conversations", json={"title": "kept by the dump"}).json()["id"]
        message = {"role": "user", "blocks": [{"type": "text", "text": "worth keeping"}]}
        assert api.post(f"/api/conversations/{cid}/messages", json=message).status_code == 201
        share_url = api.post(f"/api/conversations/{cid}/shares", json={}).json()["url"]
    browser = site.client()
    assert sign_in(site, browser).status_code == 302
    backups = site.root / "backups"
    backups.mkdir()

    def shell(line: str) -> None:
        done = subprocess.run(
            ["/bin/sh", "-c", f"set -a; . {shlex.quote(str(site.env_path))}; set +a; {line}"],
            cwd=backups, env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"

    shell(BACKUP)
    (dump,) = backups.glob("replay-*.dump")
    with site.api() as api:
        assert api.delete(f"/api/conversations/{cid}").status_code == 204
        assert api.get(f"/api/conversations/{cid}").status_code == 404

    for port in site.daphne_ports:
        assert site.stop_daphne(port) == 0
    shell(templated(RESTORE, {"replay-2026-12-01.dump": dump.name}))
    migrated = site.manage(MIGRATE)
    assert migrated.returncode == 0, migrated.stderr
    for port in site.daphne_ports:
        site.start_daphne(port)
    for port in site.daphne_ports:
        site.wait_for_daphne(port)

    with site.api() as api:
        record = api.get(f"/api/conversations/{cid}")
    assert record.status_code == 200
    assert record.json()["messages"][0]["blocks"][0]["text"] == "worth keeping"
    with site.client() as anyone:
        shared = anyone.get(share_url)
    assert shared.status_code == 200
    assert "worth keeping" in shared.text
    page = browser.get(f"/c/{cid}/")
    browser.close()
    assert page.status_code == 200
    assert "worth keeping" in page.text


def test_the_unit_restarts_daphne_and_gives_it_60_s_to_stop() -> None:
    unit = (DEPLOY / "replay@.service").read_text()

    assert "\nRestart=always\n" in unit
    assert "\nTimeoutStopSec=60\n" in unit
    assert "\nEnvironmentFile=/etc/replay/replay.env\n" in unit
    assert "--proxy-headers" in exec_start(8001)
    assert exec_start(8001)[-3:] == ["-p", "8001", "replaysite.asgi:application"]


def test_the_deploying_guide_runs_these_steps() -> None:
    section = (ROOT / "docs" / "deploying.md").read_text()

    for step in [*STEPS, TOKEN_STEP, BACKUP, RESTORE]:
        assert step in section, step
    for name in ("deploy/nginx.conf", "deploy/replay@.service", "deploy/replay.env",
                 "deploy/replay.cron"):  # fmt: skip
        assert name in section, name
    for page in (ROOT / "README.md", ROOT / "docs" / "deploying.md"):
        assert "proxy_set_header Host $host;" not in page.read_text(), page


def test_no_spelling_of_a_share_path_reaches_nginxs_access_log(site: Site) -> None:
    """nginx logs the path as sent and passes it on as sent, which daphne decodes: every
    spelling tests/site/test_logs.py sends to daphne, through nginx, is logged redacted."""
    from tests.site.test_logs import spellings

    with site.api() as api:
        cid = api.post("/api/conversations", json={"title": "shared"}).json()["id"]
        made = api.post(f"/api/conversations/{cid}/shares", json={})
    token = made.json()["url"].rstrip("/").rsplit("/", 1)[1]
    port = urlparse(site.url).port
    sent = {**spellings(token, cid), "the socket's": (f"/w%73/s/{token}/?vision=1", {404})}
    for name, (target, allowed) in sent.items():
        request = f"GET {target} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n\r\n"
        answer = raw_https(site, request.encode())
        status = int(answer.split(b" ", 2)[1])
        assert status in allowed, (name, target, answer[:200])
    marker = secrets.token_hex(8)
    last = f"GET /healthz?m={marker} HTTP/1.1\r\nHost: {HOST}:{port}\r\nConnection: close\r\n"
    raw_https(site, (last + "\r\n").encode())
    deadline = time.monotonic() + 10
    while marker not in site.access_log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    pieces = {token[i : i + 10] for i in range(len(token) - 9)}
    logs = [site.access_log, *site.daphne_logs]
    leaked = [
        line
        for log in logs
        for line in log.read_text().splitlines()
        if any(p in line for p in pieces)
    ]
    assert leaked == [], leaked
