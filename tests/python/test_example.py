"""The example worker (examples/remote_worker.py, on the SDK) against a live server: it registers
its type and itself, claims, reports progress and results; a cancel stops a running task; SIGTERM
makes it leave, handing back the task it held."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from test_worker import tokens

from conftest import ROOT, Server, until
from yardmaster import Client


def test_the_example_worker_runs_tasks_and_stops_on_cancel(shared: Server) -> None:
    room, worker_token, member_token = tokens(shared)
    script = Path(ROOT) / "examples" / "remote_worker.py"
    env = {**os.environ, "YARDMASTER_TOKEN": worker_token}
    command = [sys.executable, str(script), "--url", shared.base, "--room", room, "--concurrency", "1"]
    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    client = Client(shared.base, member_token)
    try:
        with Client(shared.base, shared.admin) as admin:
            wanted = f"{room}:analysis:WordCount"
            until(
                "the example registers its type",
                60,
                lambda: any(t["id"] == wanted for t in admin.types(room)),
            )
        job = client.submit(
            "analysis:WordCount", {"text": "to be or not to be"}, room=room, wait_for_worker=True
        )
        done = client.wait(job["id"], timeout=60)
        assert done["result"] == {"words": 6, "counts": {"to": 2, "be": 2, "or": 1, "not": 1}}, done
        assert (done["progress_current"], done["progress_total"]) == (6, 6)
        names = [event["event"] for event in client.events(job["id"])]
        assert names.count("job.progress") == 6, names
        # A long task, cancelled while it runs, stops; the worker is free for the next.
        text = " ".join(["word"] * 40)
        long = client.submit("analysis:WordCount", {"text": text, "pause": 40}, room=room)
        until("the long task runs", 60, lambda: client.get(long["id"])["status"] == "running")
        assert client.cancel(long["id"])["status"] == "cancelled"
        again = client.wait(
            client.submit("analysis:WordCount", {"text": "again"}, room=room)["id"], timeout=60
        )
        assert again["status"] == "succeeded", again
        assert client.get(long["id"])["progress_current"] < 40, "the cancelled task ran to its end"
        # A task it holds when told to stop goes back to the queue.
        held = client.submit("analysis:WordCount", {"text": text, "pause": 40}, room=room)
        until("the held task runs", 60, lambda: client.get(held["id"])["status"] == "running")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.stderr.read() if worker.stderr else ""
        back = client.get(held["id"])
        assert back["status"] == "queued", back
        client.cancel(held["id"])
    finally:
        worker.kill()
