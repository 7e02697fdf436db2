"""A live yardmaster for the SDK's tests: the debug binary serving a fresh store, on the
embedded default (SQLite, in-process queues) or, with ``YM_PY_BACKEND=postgres``, on a fresh
PostgreSQL database and RabbitMQ virtual host of the machine's servers. It can be restarted
(SIGTERM, then started again on the same port and store) and killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/yardmaster/target"))
BINARY = TARGET / "debug" / "yardmaster"
BACKEND = os.environ.get("YM_PY_BACKEND", "sqlite")
POSTGRES = os.environ.get("YARDMASTER_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
AMQP = os.environ.get("YARDMASTER_TEST_AMQP_URL", "amqp://127.0.0.1:5672/yardmaster_test")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def until(what: str, within: float, probe: Any) -> Any:
    """Polls ``probe`` every 50 ms until it answers something truthy; fails after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        found = probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {within} s"
        time.sleep(0.05)


class Server:
    """One yardmaster process and its store; ``base`` and ``admin`` (a token) to reach it."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        self.work, self.port = work, free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.admin = subprocess.run(
            [BINARY, "token", "new"], check=True, capture_output=True, text=True
        ).stdout.strip()
        self.env = {
            **os.environ,
            "YARDMASTER__AUTH__BOOTSTRAP_TOKEN": self.admin,
            "YARDMASTER__UPLOADS__DIR": str(work / "uploads"),
            "YARDMASTER__WORKER__GRACE_SECONDS": "2",
            "RUST_LOG": os.environ.get("RUST_LOG", "warn"),
            **env,
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = (self.work / "server.log").open("ab")
        command = [str(BINARY), "serve", "--bind", f"127.0.0.1:{self.port}"]
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=log)

        def ready() -> bool:
            assert self.process is not None and self.process.poll() is None, self.log()
            try:
                return httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        until("the server is ready", 60, ready)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=60)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.work / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def http(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {token or self.admin}"}, timeout=30
        )


def backend_env(name: str) -> tuple[dict[str, str], Any]:
    """The environment of a server on a fresh store of the backend under test, and how to drop it."""
    if BACKEND == "sqlite":
        return {}, lambda: None
    return postgres_env(name, amqp=True)


def postgres_env(name: str, amqp: bool) -> tuple[dict[str, str], Any]:
    """A server on a fresh PostgreSQL database (``database_of`` its environment names it), with
    a fresh RabbitMQ virtual host or the in-process queues, and how to drop them."""
    database = f"ym_py_{name}_{uuid.uuid4().hex[:12]}"
    psql(f"CREATE DATABASE {database}")
    env = {"YARDMASTER__STORE__URL": POSTGRES.rsplit("/", 1)[0] + f"/{database}"}
    vhost = f"ym_py_{uuid.uuid4().hex[:12]}"
    if amqp:
        subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, capture_output=True)
        subprocess.run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"], check=True
        )
        env["YARDMASTER__TRANSPORT__KIND"] = "amqp"
        env["YARDMASTER__TRANSPORT__AMQP__URL"] = AMQP.rsplit("/", 1)[0] + f"/{vhost}"

    def drop() -> None:
        psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)", check=False)
        if amqp:
            subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True)

    return env, drop


def database_of(env: dict[str, str]) -> str:
    return env["YARDMASTER__STORE__URL"].rsplit("/", 1)[1]


def psql(sql: str, check: bool = True) -> None:
    """Runs ``sql`` on the machine's PostgreSQL, connected to its ``postgres`` database."""
    admin = POSTGRES.rsplit("/", 1)[0] + "/postgres"
    subprocess.run(["psql", admin, "-qc", sql], check=check, capture_output=True)


def spawn(tmp_path: Path, name: str, extra: dict[str, str] | None = None) -> Iterator[Server]:
    env, drop = backend_env(name)
    if BACKEND == "sqlite":
        env["YARDMASTER__STORE__URL"] = f"sqlite://{tmp_path}/{name}.db?mode=rwc"
    server = Server(tmp_path, {**env, **(extra or {})})
    try:
        yield server
    finally:
        server.stop()
        drop()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A fresh server for one test (its store is its own)."""
    yield from spawn(tmp_path, "test")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the tests of a module that neither restart it nor count its jobs."""
    yield from spawn(tmp_path_factory.mktemp("shared"), "shared")
