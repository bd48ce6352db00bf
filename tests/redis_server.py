"""A private, throwaway redis-server for fault tests: its own free port and directory,
no persistence, stopped and restarted on the same port. The machine's Redis is never
touched."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.conftest import free_port

REDIS_SERVER = shutil.which("redis-server")


def available() -> bool:
    return REDIS_SERVER is not None


class RedisServer:
    """`start()` / `stop()` / `restart()` one redis-server; `url` stays the same throughout.
    With `unix_socket`, it listens on `directory`/redis.sock only (no TCP port): keep
    `directory` short, a socket's path holds at most 107 bytes."""

    def __init__(
        self, directory: Path, port: int | None = None, *, unix_socket: bool = False
    ) -> None:
        if REDIS_SERVER is None:
            raise RuntimeError("redis-server is not installed")
        self.directory = directory
        self.port = port or free_port()
        self.socket = directory / "redis.sock" if unix_socket else None
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / f"redis-{self.port}.log"

    @property
    def url(self) -> str:
        if self.socket is not None:
            return f"unix://{self.socket}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10) -> None:
        assert self.process is None, "already running"
        listen = ["--port", str(self.port)]
        if self.socket is not None:
            listen = ["--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        self.process = subprocess.Popen(
            [str(REDIS_SERVER), *listen, "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--save", "", "--appendonly", "no",
             "--protected-mode", "yes", "--daemonize", "no", "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = self.log.read_text() if self.log.exists() else ""
                self.process = None
                raise RuntimeError(f"redis-server exited: {log}")
            if self.ping():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def ping(self) -> bool:
        try:
            if self.socket is not None:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(0.2)
                    s.connect(str(self.socket))
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self, timeout: float = 10) -> None:
        """Stops the server at once (SIGKILL: clients see their connections drop)."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a paused server must not outlive the test
        self.process.kill()
        self.process.wait(timeout)
        self.process = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open and every command hangs."""
        assert self.process is not None, "not running"
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None, "not running"
        self.process.send_signal(signal.SIGCONT)

    def restart(self, down_for: float = 0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
