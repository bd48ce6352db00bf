"""The deployment of docs/contract.md §5, for real: migrate, collectstatic, then daphne with
DJANGO_DEBUG=0 serving HTTP, WebSocket and static files from its own data folder."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest
import websockets.sync.client

from tests.conftest import ROOT, Server, start_daphne

pytestmark = pytest.mark.live

SECRET = "deploy-" + secrets.token_urlsafe(48)
OPERATOR = {"username": "deployer", "password": "a long deploy passphrase 7", "email": "d@x.test"}


@dataclass
class Deployment:
    root: Path
    env: dict[str, str]
    server: Server
    steps: dict[str, subprocess.CompletedProcess[str]]

    @property
    def static_root(self) -> Path:
        return self.root / "static"

    def manage(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=os.environ | self.env | env,
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("deployment")
    env = {
        "REPLAY_DATA_DIR": str(root / "data"),
        "REPLAY_STATIC_ROOT": str(root / "static"),
        "DATABASE_URL": f"sqlite:///{root / 'data' / 'replay.sqlite3'}",
        "REDIS_URL": "",
        "DJANGO_DEBUG": "0",
        "DJANGO_HTTPS": "",
        "DJANGO_ALLOWED_HOSTS": "",
        "DJANGO_SECRET_KEY": SECRET,
    }
    (root / "data").mkdir()
    deployment = Deployment(root, env, None, {})  # type: ignore[arg-type]
    for step in (("migrate", "--noinput"), ("collectstatic", "--noinput")):
        done = deployment.manage(*step)
        assert done.returncode == 0, done.stdout + done.stderr
        deployment.steps[step[0]] = done
    deployment.server = start_daphne(root, env)
    yield deployment
    deployment.server.process.terminate()
    deployment.server.process.wait(10)


@pytest.fixture(scope="module")
def client(deployment: Deployment) -> Iterator[httpx.Client]:
    with deployment.server.client() as client:
        yield client


def stylesheets(html: str) -> list[str]:
    return re.findall(r'<link rel="stylesheet" href="([^"]+)"', html)


def test_migrate_creates_the_database_in_the_data_folder(deployment: Deployment) -> None:
    assert (deployment.root / "data" / "replay.sqlite3").stat().st_size > 0


def test_collectstatic_writes_into_replay_static_root(deployment: Deployment) -> None:
    # Each deployment (and each test run) needs its own STATIC_ROOT: collectstatic into the
    # repository's staticfiles/ races with any other run rewriting the same files.
    assert (deployment.static_root / "staticfiles.json").exists()
    assert (deployment.static_root / "admin" / "css" / "base.css").exists()


def test_admin_login_page_renders(client: httpx.Client) -> None:
    response = client.get("/admin/login/")

    assert response.status_code == 200
    assert 'name="username"' in response.text
    assert 'name="password"' in response.text
    assert "csrfmiddlewaretoken" in response.text


def test_admin_stylesheet_is_served(client: httpx.Client) -> None:
    links = stylesheets(client.get("/admin/login/").text)
    base = [link for link in links if re.fullmatch(r"/static/admin/css/base(\.\w+)?\.css", link)]
    assert base, links

    response = client.get(base[0])

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/css")
    assert "body" in response.text
    assert response.headers["x-content-type-options"] == "nosniff"


def test_hashed_static_files_are_cached_forever(client: httpx.Client) -> None:
    # With DJANGO_DEBUG=0 the manifest storage names files by content hash.
    links = stylesheets(client.get("/admin/login/").text)
    hashed = [link for link in links if re.search(r"\.[0-9a-f]{12}\.css$", link)]
    assert hashed, links

    response = client.get(hashed[0])

    assert response.status_code == 200
    assert "immutable" in response.headers["cache-control"]


def test_unknown_static_file_is_not_found(client: httpx.Client) -> None:
    assert client.get("/static/admin/css/nope.css").status_code == 404


def test_api_refuses_a_request_without_a_token_in_json(client: httpx.Client) -> None:
    response = client.get("/api/conversations")

    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert "Authorization" in response.json()["error"]


@pytest.mark.parametrize("path", ["/admin/login/", "/api/conversations"])
def test_responses_carry_the_security_headers(client: httpx.Client, path: str) -> None:
    headers = client.get(path).headers

    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    directives = {
        part.split()[0]: part.split()[1:]
        for part in headers["content-security-policy"].split(";")
        if part.strip()
    }
    assert directives["script-src"] == ["'self'"]
    assert "'unsafe-inline'" not in headers["content-security-policy"]


def test_debug_is_off_so_errors_show_no_traceback(client: httpx.Client) -> None:
    response = client.get("/no/such/page/")

    assert response.status_code == 404
    assert "Traceback" not in response.text
    assert "URLconf" not in response.text


def sign_in(client: httpx.Client, username: str, password: str) -> httpx.Response:
    page = client.get("/admin/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf is not None
    return client.post(
        "/admin/login/?next=/admin/",
        data={
            "csrfmiddlewaretoken": csrf.group(1),
            "username": username,
            "password": password,
            "next": "/admin/",
        },
    )


@pytest.fixture(scope="module")
def operator(deployment: Deployment) -> dict[str, str]:
    done = deployment.manage(
        "createsuperuser",
        "--noinput",
        DJANGO_SUPERUSER_USERNAME=OPERATOR["username"],
        DJANGO_SUPERUSER_PASSWORD=OPERATOR["password"],
        DJANGO_SUPERUSER_EMAIL=OPERATOR["email"],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return OPERATOR


def test_createsuperuser_noinput_makes_an_operator_who_can_sign_in(
    deployment: Deployment, operator: dict[str, str]
) -> None:
    with deployment.server.client() as client:
        response = sign_in(client, operator["username"], operator["password"])

        assert response.status_code == 302
        assert response.headers["location"] == "/admin/"
        page = client.get("/admin/conversations/conversation/")
        assert page.status_code == 200
        assert operator["username"] in page.text


def test_wrong_password_does_not_sign_in(deployment: Deployment, operator: dict[str, str]) -> None:
    with deployment.server.client() as client:
        response = sign_in(client, operator["username"], "not the password")

        assert response.status_code == 200
        assert client.get("/admin/conversations/conversation/").status_code == 302


def test_live_page_socket_is_served_with_debug_off(
    deployment: Deployment, operator: dict[str, str]
) -> None:
    made = deployment.manage("create_api_token", "deploy test")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    url = deployment.server.url
    with deployment.server.client(token) as api:
        conversation = api.post("/api/conversations", json={"title": "Deployed"}).json()
    with deployment.server.client() as browser:
        assert sign_in(browser, operator["username"], operator["password"]).status_code == 302
        session = browser.cookies["sessionid"]

    with websockets.sync.client.connect(
        f"ws://{url.removeprefix('http://')}/ws/conversations/{conversation['id']}/",
        origin=url,  # type: ignore[arg-type]
        additional_headers={"Cookie": f"sessionid={session}"},
        open_timeout=10,
    ) as socket:
        with deployment.server.client(token) as api:
            added = api.post(
                f"/api/conversations/{conversation['id']}/messages",
                json={"role": "user", "blocks": [{"type": "text", "text": "hello-from-deploy"}]},
            )
            assert added.status_code == 201
        # The fragment for the new message arrives, perhaps after other frames.
        received = ""
        deadline = time.monotonic() + 10
        while "hello-from-deploy" not in received and time.monotonic() < deadline:
            received += str(socket.recv(timeout=max(deadline - time.monotonic(), 0.1)))

    assert "hello-from-deploy" in received
