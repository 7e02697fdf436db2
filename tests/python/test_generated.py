"""A client generated from the live ``/openapi.json`` by openapi-python-client works: the
generator drops no operation and no response, and the generated code submits, reads, lists,
answers problems as typed objects, and downloads a ZIP result as a file."""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

from conftest import Server
from yardmaster import Client


def generate(server: Server, into: Path) -> Any:
    """Generates the package ``ym_api`` into ``into`` and imports it."""
    tools = Path(sys.executable).parent
    command = [
        str(tools / "openapi-python-client"),
        "generate",
        "--url",
        f"{server.base}/openapi.json",
        "--meta",
        "none",
        "--output-path",
        str(into / "ym_api"),
    ]
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    made = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    said = made.stdout + made.stderr
    assert made.returncode == 0, said
    assert "WARNING" not in said and "Unable" not in said, f"the generator left something out:\n{said}"
    sys.path.insert(0, str(into))
    try:
        return importlib.import_module("ym_api")
    finally:
        sys.path.remove(str(into))


def test_a_generated_client_submits_reads_lists_and_downloads(shared: Server, tmp_path: Path) -> None:
    api = generate(shared, tmp_path)
    jobs = importlib.import_module("ym_api.api.jobs")
    models = importlib.import_module("ym_api.models")
    submit_job = importlib.import_module("ym_api.api.jobs.submit_job")
    get_job = importlib.import_module("ym_api.api.jobs.get_job")
    list_jobs = importlib.import_module("ym_api.api.jobs.list_jobs")
    get_result = importlib.import_module("ym_api.api.uploads.get_result")
    assert jobs is not None
    room = f"g{uuid.uuid4().hex[:10]}"
    with api.AuthenticatedClient(base_url=shared.base, token=shared.admin) as client:
        made = submit_job.sync(client=client, body=models.SubmitRequest(operation="ping", room=room))
        assert isinstance(made, models.Job), made
        read = get_job.sync(client=client, id=made.id)
        assert isinstance(read, models.JobView) and read.id == made.id, read
        page = list_jobs.sync(client=client, room=room, limit=5)
        assert isinstance(page, models.JobPage) and [job.id for job in page.jobs] == [made.id], page
        refused = submit_job.sync(client=client, body=models.SubmitRequest(operation="no_such", room=room))
        assert isinstance(refused, models.Problem), refused
        assert (refused.code.value, refused.status, refused.pointer) == (
            "unknown_operation",
            422,
            "/operation",
        )
        missing = get_job.sync(client=client, id=uuid.uuid4())
        assert isinstance(missing, models.Problem) and missing.code.value == "job_not_found", missing
        # An upload's ZIP comes back as a file.
        work = tmp_path / "upload"
        work.mkdir()
        (work / "run.sh").write_text("#!/bin/sh\necho hello > out.txt\n")
        with Client(shared.base, shared.admin) as sdk:
            job = sdk.upload(work, "default", room=room)
            sdk.wait(job["id"], timeout=120)
        archive = get_result.sync(client=client, id=uuid.UUID(job["id"]))
        assert isinstance(archive, api.types.File), archive
        with zipfile.ZipFile(io.BytesIO(archive.payload.read())) as opened:
            assert any(name.endswith("out.txt") for name in opened.namelist()), opened.namelist()
