"""The worked examples of ``docs/migrating/`` run as written against a live server: each page's
``python`` blocks are executed as modules (not as ``__main__``), with ``YARDMASTER_URL`` and
``YARDMASTER_TOKEN`` set the way the page says, their workers served on threads, and their
clients called; a page whose example no longer works fails here."""

from __future__ import annotations

import asyncio
import re
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, Server, until
from yardmaster import Client
from yardmaster.worker import Worker

PAGES = ROOT / "docs" / "migrating"


def blocks(page: str) -> list[str]:
    """The page's fenced ``python`` blocks, in order."""
    text = (PAGES / f"{page}.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def load(code: str, monkeypatch: pytest.MonkeyPatch, server: Server, token: str) -> dict[str, Any]:
    """Runs a block as a module would run, with the environment a user of the page sets."""
    monkeypatch.setenv("YARDMASTER_URL", server.base)
    monkeypatch.setenv("YARDMASTER_TOKEN", token)
    namespace: dict[str, Any] = {"__name__": "example"}
    exec(compile(code, "example", "exec"), namespace)
    return namespace


def token(server: Server, room: str, role: str = "member") -> str:
    with Client(server.base, server.admin) as admin:
        made = admin.create_token(f"{role}-{room}", role=role, rooms=[room])
    return str(made["token"])


Served = list[tuple[Worker, threading.Thread]]


@pytest.fixture
def served() -> Iterator[Served]:
    """Workers started by a test, stopped after it."""
    running: Served = []
    yield running
    for worker, _ in running:
        worker.stop()
    for _, thread in running:
        thread.join(timeout=30)


def serve(running: Served, worker: Worker) -> None:
    thread = threading.Thread(
        target=worker.run, args=(8,), kwargs={"grace": 5.0, "handle_signals": False}, daemon=True
    )
    thread.start()
    running.append((worker, thread))
    until("the example's worker registers", 30, lambda: worker.id is not None)


def test_protea_coordinator_fans_out_and_folds(
    shared: Server, monkeypatch: pytest.MonkeyPatch, served: Served
) -> None:
    (code,) = blocks("protea")
    monkeypatch.setenv("YM_MEMBER_TOKEN", token(shared, "lab"))
    example = load(code, monkeypatch, shared, token(shared, "lab", "worker"))
    serve(served, example["worker"])
    member: Client = example["member"]
    sequences = [f"M{'A' * n}" for n in range(250)]
    job = member.submit("analysis:PredictGoTerms", {"sequences": sequences, "batch_size": 100}, room="lab")
    done = member.wait(job["id"], timeout=120)
    assert (done["status"], done["result"]) == ("succeeded", {"batches": 3, "predictions": 250}), done
    assert len(list(member.children(job["id"]))) == 3


def test_cbintel_client_and_worker(
    shared: Server, monkeypatch: pytest.MonkeyPatch, served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    client_code, async_code, worker_code = blocks("cbintel")
    worker = load(worker_code, monkeypatch, shared, token(shared, "intel", "worker"))
    serve(served, worker["worker"])
    member = token(shared, "intel")
    client = load(client_code, monkeypatch, shared, member)
    result = client["crawl"]("proteins")
    assert (result["status"], result["result"]) == ("succeeded", {"pages": 1}), result
    client["report"](result)
    assert "Success: {'pages': 1}" in capsys.readouterr().out
    later = asyncio.run(load(async_code, monkeypatch, shared, member)["crawl_async"]("more"))
    assert later["status"] == "succeeded", later


def test_zndraw_worker_and_client(
    shared: Server, monkeypatch: pytest.MonkeyPatch, served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    worker_code, client_code = blocks("zndraw-joblib")
    worker = load(worker_code, monkeypatch, shared, token(shared, "room_42", "worker"))
    serve(served, worker["worker"])
    load(client_code, monkeypatch, shared, token(shared, "room_42"))
    position, status = capsys.readouterr().out.split()[-2:]
    assert status == "succeeded", (position, status)
    assert position in ("1", "None"), position  # queued first, or already claimed


def test_job_orchestrator_upload_and_download(
    shared: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (code,) = blocks("job-orchestrator")
    room = "jobs"
    example = load(code, monkeypatch, shared, token(shared, room))
    job_dir = tmp_path / "my-job"
    job_dir.mkdir()
    (job_dir / "run.sh").write_text("echo done > out.txt\n")
    zip_path = example["run_remote"](job_dir, "default", tmp_path / "results.zip")
    assert zip_path is not None
    with zipfile.ZipFile(zip_path) as archive:
        assert "out.txt" in archive.namelist(), archive.namelist()
