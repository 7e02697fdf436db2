"""The client against a live server: every call and its problems, long-polls, cursor pages,
event streams resumed across a server restart, uploads and their ZIPs, tokens, the async client,
and where the server and token come from."""

from __future__ import annotations

import asyncio
import io
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest

from conftest import Server
from yardmaster import AsyncClient, Client, ConfigError, Problem, WaitTimeout, resolve


def member(server: Server) -> tuple[Client, str]:
    """A client with a member token of a room of its own."""
    room = f"r{uuid.uuid4().hex[:10]}"
    with Client(server.base, server.admin) as admin:
        token = admin.create_token(f"u-{room}", rooms=[room])["token"]
    return Client(server.base, token), room


def test_submit_get_and_wait(shared: Server) -> None:
    client, room = member(shared)
    job = client.submit("ping", room=room, priority=3)
    assert (job["operation"], job["room"], job["priority"]) == ("ping", room, 3)
    assert client.get(job["id"])["id"] == job["id"]
    done = client.wait(job["id"], timeout=30)
    assert done["status"] == "succeeded"
    # The same submission twice with one key is one job.
    first = client.submit("ping", idempotency_key="same", room=room)
    again = client.submit("ping", idempotency_key="same", room=room)
    assert first["id"] == again["id"]


def test_wait_times_out_with_the_job_as_it_is(shared: Server) -> None:
    client, room = member(shared)
    job = client.submit("sleep", {"seconds": 600}, room=room)
    with pytest.raises(WaitTimeout) as timed_out:
        client.wait(job["id"], timeout=1)
    assert timed_out.value.job["status"] in {"queued", "running"}
    cancelled = client.cancel(job["id"])
    assert cancelled["status"] == "cancelled"
    retried = client.retry(job["id"])
    assert retried["status"] == "queued"
    client.cancel(job["id"])


def test_submit_many_writes_a_graph_in_one_request(shared: Server) -> None:
    client, room = member(shared)
    jobs = client.submit_many(
        [
            {"operation": "ping", "room": room},
            {"operation": "ping", "room": room, "depends_on": ["#0"]},
            {"operation": "@internal:builtin:ping", "room": room, "depends_on": ["#0", "#1"]},
        ]
    )
    assert [job["operation"] for job in jobs] == ["ping", "ping", "ping"]
    ended = [client.wait(job["id"], timeout=60) for job in jobs]
    started = [job["started_at"] for job in ended]
    assert all(job["status"] == "succeeded" for job in ended)
    assert started == sorted(started), "a dependent started before what it waits for"


def test_problems_are_exceptions_with_their_code(shared: Server) -> None:
    client, room = member(shared)
    cases: list[tuple[Any, int, str, str | None]] = [
        (lambda: client.submit("no_such_operation", room=room), 422, "unknown_operation", "/operation"),
        (lambda: client.submit("ping\0", room=room), 422, "nul_character", "/operation"),
        (lambda: client.submit("ping", room=room, priority=12), 422, "invalid_priority", "/priority"),
        (lambda: client.submit("sleep", {"seconds": "soon"}, room=room), 422, "invalid_payload", None),
        (lambda: client.get(str(uuid.uuid4())), 404, "job_not_found", None),
        (lambda: client.get("not-a-uuid"), 400, "invalid_job_id", None),
        (lambda: client.submit("ping", room="someone-elses"), 403, "room_forbidden", "/room"),
        (lambda: client.submit_many([]), 422, "invalid_request", None),
    ]
    for call, status, code, pointer in cases:
        with pytest.raises(Problem) as refused:
            call()
        problem = refused.value
        assert (problem.status, problem.code) == (status, code), problem
        if pointer is not None:
            assert problem.pointer == pointer, problem
        assert problem.detail
    with Client(shared.base, "ym_not_a_real_token") as stranger, pytest.raises(Problem) as refused:
        stranger.get(str(uuid.uuid4()))
    assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    # Another room's job does not exist for this member.
    other, other_room = member(shared)
    theirs = other.submit("ping", room=other_room)
    with pytest.raises(Problem) as refused:
        client.get(theirs["id"])
    assert refused.value.code == "job_not_found"


def test_list_walks_every_page(shared: Server) -> None:
    client, room = member(shared)
    made = {client.submit("ping", room=room)["id"] for _ in range(7)}
    listed = [job["id"] for job in client.list(room=room, limit=2)]
    assert len(listed) == 7 and set(listed) == made, listed
    assert listed == sorted(listed, reverse=True), "not newest first"


def test_events_are_read_and_followed_to_the_end(shared: Server) -> None:
    client, room = member(shared)
    job = client.submit("sleep", {"seconds": 0.5, "steps": 5}, room=room)
    followed = list(client.events(job["id"], follow=True))
    names = [event["event"] for event in followed]
    assert names[0] == "job.queued" and names[-1] == "job.succeeded", names
    assert names.count("job.progress") == 5, names
    logged = list(client.events(job["id"]))
    assert [event["id"] for event in logged] == [event["id"] for event in followed]
    later = list(client.events(job["id"], after=logged[2]["id"]))
    assert [event["id"] for event in later] == [event["id"] for event in logged[3:]]


def test_a_followed_stream_resumes_across_a_server_restart(server: Server) -> None:
    client = Client(server.base, server.admin, retry_budget=60)
    # Long enough to outlast the server's 2 s grace even if the restart comes seconds late.
    job = client.submit("sleep", {"seconds": 6, "steps": 12})
    followed: list[dict[str, Any]] = []
    restarted = False
    for event in client.events(job["id"], follow=True):
        followed.append(event)
        assert len(followed) < 100, "the stream repeats itself"
        if event["event"] == "job.progress" and not restarted:
            restarted = True
            server.restart()
    assert restarted
    ids = [event["id"] for event in followed]
    logged = [event["id"] for event in client.events(job["id"])]
    assert ids == logged, "the stream lost or repeated events across the restart"
    assert followed[-1]["event"] == "job.succeeded"
    assert "job.requeued_on_shutdown" in [event["event"] for event in followed]


def test_a_task_is_read_and_held_until_it_ends(shared: Server) -> None:
    client, room = member(shared)
    with pytest.raises(Problem) as refused:
        client.task(client.submit("ping", room=room)["id"])
    assert refused.value.code == "task_not_found"


def test_an_upload_runs_and_its_zip_comes_back(shared: Server, tmp_path: Path) -> None:
    client, room = member(shared)
    work = tmp_path / "job"
    (work / "data").mkdir(parents=True)
    (work / "data" / "in.txt").write_text("three little words\n")
    (work / "run.sh").write_text("#!/bin/sh\nwc -w < data/in.txt > count.txt\necho counted\n")
    job = client.upload(work, "default", room=room)
    assert job["operation"] == "run_script"
    path = client.download_result(job["id"], tmp_path / "result.zip", timeout=120)
    assert client.get(job["id"])["status"] == "succeeded"
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
        names = archive.namelist()
        counted = [name for name in names if name.endswith("count.txt")]
        assert counted, names
        assert archive.read(counted[0]).decode().strip() == "3"
    with pytest.raises(FileNotFoundError):
        client.upload(tmp_path / "result.zip", "default", room=room)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        client.upload(tmp_path / "empty", "default")
    with pytest.raises(Problem) as refused:
        client.upload(work, "no_such_service", room=room)
    assert refused.value.code == "unknown_service"


def test_tokens_are_made_listed_and_revoked(shared: Server) -> None:
    with Client(shared.base, shared.admin) as admin:
        made = admin.create_token("reader", rooms=["lab"], read_only=True)
        assert made["token"].startswith("ym_")
        assert made["id"] in [token["id"] for token in admin.tokens()]
        reader = Client(shared.base, made["token"])
        with pytest.raises(Problem) as refused:
            reader.submit("ping", room="lab")
        assert refused.value.code == "read_only_token"
        admin.revoke_token(made["id"])
        with pytest.raises(Problem) as refused:
            reader.get(str(uuid.uuid4()))
        assert refused.value.status == 401
        with Client(shared.base, made["token"]) as member_client, pytest.raises(Problem) as refused:
            member_client.create_token("x")
        assert refused.value.status == 401


def test_the_async_client_does_the_same(shared: Server) -> None:
    _, room = member(shared)
    with Client(shared.base, shared.admin) as admin:
        token = admin.create_token(f"async-{room}", rooms=[room])["token"]

    async def run() -> None:
        async with AsyncClient(shared.base, token) as client:
            jobs = await asyncio.gather(*(client.submit("ping", room=room) for _ in range(5)))
            done = await asyncio.gather(*(client.wait(job["id"], timeout=30) for job in jobs))
            assert {job["status"] for job in done} == {"succeeded"}
            listed = [job["id"] async for job in client.list(room=room, limit=2)]
            assert sorted(listed) == sorted(job["id"] for job in jobs)
            names = [event["event"] async for event in client.events(jobs[0]["id"], follow=True)]
            assert names[0] == "job.queued" and names[-1] == "job.succeeded", names
            with pytest.raises(Problem) as refused:
                await client.submit("nope", room=room)
            assert refused.value.code == "unknown_operation"

    asyncio.run(run())


def test_the_target_comes_from_arguments_then_environment_then_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = tmp_path / "client.toml"
    settings.write_text('url = "http://file:1"\ntoken = "ym_file"\n')
    monkeypatch.setenv("YARDMASTER_CLIENT_CONFIG", str(settings))
    monkeypatch.delenv("YARDMASTER_URL", raising=False)
    monkeypatch.delenv("YARDMASTER_TOKEN", raising=False)
    assert resolve() == resolve("http://file:1", "ym_file")
    monkeypatch.setenv("YARDMASTER_URL", "http://env:2/")
    monkeypatch.setenv("YARDMASTER_TOKEN", "ym_env")
    assert (resolve().url, resolve().token) == ("http://env:2", "ym_env")
    assert (resolve("https://arg:3", "ym_arg").url, resolve("https://arg:3", "ym_arg").token) == (
        "https://arg:3",
        "ym_arg",
    )
    with pytest.raises(ConfigError):
        resolve("ftp://nope")
    settings.write_text('url = "http://file:1"\npassword = "x"\n')
    monkeypatch.delenv("YARDMASTER_URL")
    with pytest.raises(ConfigError):
        resolve(token="ym_arg")
    settings.write_text("url = [broken")
    with pytest.raises(ConfigError):
        resolve(token="ym_arg")
