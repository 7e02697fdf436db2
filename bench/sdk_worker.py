"""A remote worker process for the benchmark's ``sdk`` cases: it serves the no-op type
``bench:analysis:Noop`` at concurrency 8, either on the Python SDK (``sdk``: ``Worker.run``,
claims of as many tasks as slots are free, outcomes of tasks that end together in one
``POST /tasks:report``) or as the loop the example worker was before the SDK (``loop``: one
task per claim and one ``PATCH /tasks/{id}`` per outcome, stdlib ``urllib``, here on 8 threads).

It prints ``ready`` once imported and set up, and starts only when a line arrives on stdin, so
the benchmark's window holds the work, not the interpreter's start; it runs until SIGTERM.

    python bench/sdk_worker.py sdk|loop URL TOKEN
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import urllib.request
from typing import Any

from yardmaster.worker import TaskContext, Worker

TYPE = "bench:analysis:Noop"
CONCURRENCY = 8


def sdk(url: str, token: str) -> None:
    worker = Worker(url, token, room="bench", name="bench-sdk")

    @worker.task(TYPE, schema={"type": "object"})
    def noop(ctx: TaskContext, params: dict[str, Any]) -> None:
        return None

    print("ready", flush=True)
    sys.stdin.readline()
    worker.run(concurrency=CONCURRENCY, grace=5)


def loop(url: str, token: str) -> None:
    def call(method: str, path: str, body: dict[str, Any], wait: bool = False) -> Any:
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Content-Type", "application/json")
        if wait:
            request.add_header("Prefer", "wait=5")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    stop = threading.Event()

    def serve() -> None:
        me = call("POST", "/workers", {"name": "bench-loop", "types": [TYPE]})
        while not stop.is_set():
            task = call("POST", "/tasks/claim", {"worker_id": me["id"]}, wait=True)["task"]
            if task is None:
                continue
            report = {
                "worker_id": me["id"],
                "attempt": task["attempts"],
                "status": "succeeded",
                "result": None,
            }
            call("PATCH", f"/tasks/{task['id']}", report)

    print("ready", flush=True)
    sys.stdin.readline()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [threading.Thread(target=serve, daemon=True) for _ in range(CONCURRENCY)]
    for thread in threads:
        thread.start()
    stop.wait()


if __name__ == "__main__":
    mode, url, token = sys.argv[1:4]
    {"sdk": sdk, "loop": loop}[mode](url, token)
