"""The client through a real outage: the server's PostgreSQL database is closed to connections
(its sessions ended), so the server answers 503 ``store_unavailable`` with ``Retry-After``; a
call made then is tried again after the pause the server asks for, and goes through once the
database is back, a submission making exactly one job; when the outage outlasts the client's
retry budget, the call raises the 503's problem. PostgreSQL in both runs of the suite: with the
in-process queues on the embedded run, with RabbitMQ on the other."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import BACKEND, Server, database_of, postgres_env, psql, until
from yardmaster import Client, Problem


class Outage:
    """Closes a server's database to new connections and ends its sessions, then opens it again."""

    def __init__(self, server: Server, database: str) -> None:
        self.server, self.database = server, database

    def begin(self) -> None:
        psql(f"ALTER DATABASE {self.database} WITH ALLOW_CONNECTIONS false")
        psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{self.database}'")
        with self.server.http() as http:

            def refused() -> bool:
                return http.get("/jobs").status_code == 503

            until("the server answers 503", 60, refused)

    def end(self) -> None:
        psql(f"ALTER DATABASE {self.database} WITH ALLOW_CONNECTIONS true")


@pytest.fixture
def outage(tmp_path: Path) -> Iterator[Outage]:
    env, drop = postgres_env("outage", amqp=BACKEND != "sqlite")
    server = Server(tmp_path, env)
    cut = Outage(server, database_of(env))
    try:
        yield cut
    finally:
        cut.end()
        server.stop()
        drop()


class Seen(httpx.HTTPTransport):
    """A transport that remembers the status of every answer."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


def test_a_call_in_an_outage_goes_through_once_the_store_is_back(outage: Outage) -> None:
    server = outage.server
    seen = Seen()
    client = Client(server.base, server.admin, retry_budget=120, transport=seen)
    room = f"r{uuid.uuid4().hex[:10]}"
    outage.begin()
    answers: dict[str, Any] = {}

    def submit() -> None:
        answers["job"] = client.submit("ping", room=room)

    submitting = threading.Thread(target=submit)
    submitting.start()
    until("the client is answered 503", 60, lambda: 503 in seen.statuses)
    outage.end()
    submitting.join(timeout=120)
    assert "job" in answers, f"the submission did not go through: {seen.statuses}"
    assert seen.statuses[-1] == 201 and seen.statuses.count(503) >= 1, seen.statuses
    done = client.wait(answers["job"]["id"], timeout=60)
    assert done["status"] == "succeeded", done
    made = [job["id"] for job in client.list(room=room)]
    assert made == [done["id"]], f"the retried submission made {len(made)} jobs"


def test_an_outage_longer_than_the_budget_raises_its_problem(outage: Outage) -> None:
    server = outage.server
    seen = Seen()
    client = Client(server.base, server.admin, retry_budget=3, transport=seen)
    outage.begin()
    with pytest.raises(Problem) as refused:
        next(iter(client.list()))
    problem = refused.value
    assert (problem.status, problem.code) == (503, "store_unavailable"), problem
    assert problem.retry_after is not None and problem.retry_after > 0, problem
    assert seen.statuses.count(503) >= 2, f"not tried again within the budget: {seen.statuses}"
