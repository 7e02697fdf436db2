#!/usr/bin/env python3
"""A remote yardmaster worker in plain Python (standard library only).

It registers the type `ROOM:analysis:WordCount` (payload: {"text": "...", "pause": seconds}),
registers itself as a worker for it, then claims tasks over HTTP (holding each claim up to
20 s with `Prefer: wait=20`), reports progress as it counts, and reports the result. A
heartbeat thread keeps the worker and its task's lease alive and stops the task when the
server says it was cancelled. SIGTERM or Ctrl-C leaves cleanly (DELETE /workers/{id}), which
hands an unfinished task back to the queue at once.

    export YARDMASTER_TOKEN=ym_...   # a worker token: yardmaster token create --role worker --room lab --user w1
    python3 examples/remote_worker.py --url http://127.0.0.1:8080 --room lab

Then submit: curl -H "Authorization: Bearer $MEMBER" -H 'content-type: application/json' \
    -d '{"operation": "analysis:WordCount", "payload": {"text": "to be or not to be"}}' \
    http://127.0.0.1:8080/jobs
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "pause": {"type": "number", "minimum": 0, "maximum": 60}},
    "required": ["text"],
    "additionalProperties": False,
}


class Problem(Exception):
    """An RFC 9457 answer: its status and stable code."""

    def __init__(self, status, body):
        self.status, self.code = status, body.get("code")
        super().__init__(f"{status} {body.get('code')}: {body.get('detail')}")


class Client:
    def __init__(self, url, token):
        self.url, self.token = url.rstrip("/"), token

    def call(self, method, path, body=None, wait=None):
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=(wait or 0) + 30) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            raise Problem(err.code, json.loads(err.read() or b"{}")) from None


class Worker:
    def __init__(self, client, room, name):
        self.client, self.type = client, f"{room}:analysis:WordCount"
        client.call("POST", "/types", {"room": room, "category": "analysis", "name": "WordCount", "schema": SCHEMA})
        me = client.call("POST", "/workers", {"name": name, "types": [self.type]})
        self.id, self.heartbeat_seconds = me["id"], me["heartbeat_seconds"]
        self.held = None  # (task id, attempt) being worked on
        self.stopped = threading.Event()  # the held task must stop (cancelled, taken away)
        self.leaving = threading.Event()
        print(f"worker {self.id} serves {self.type}", flush=True)

    def beat(self):
        while not self.leaving.wait(self.heartbeat_seconds):
            held = self.held
            tasks = [] if held is None else [{"id": held[0], "attempt": held[1]}]
            try:
                answer = self.client.call("POST", f"/workers/{self.id}/heartbeat", {"tasks": tasks})
            except Problem as problem:
                print(f"heartbeat refused: {problem}", file=sys.stderr, flush=True)
                continue
            except OSError as err:
                print(f"heartbeat failed: {err}", file=sys.stderr, flush=True)
                continue
            if held is not None and any(stop["id"] == held[0] for stop in answer["stop"]):
                self.stopped.set()

    def report(self, task, body):
        body = dict(body, worker_id=self.id, attempt=task["attempts"])
        return self.client.call("PATCH", f"/tasks/{task['id']}", body)

    def run(self, task):
        words = task["payload"]["text"].split()
        pause = task["payload"].get("pause", 0)
        counts = {}
        for done, word in enumerate(words, start=1):
            if self.stopped.is_set():
                print(f"task {task['id']} stopped by the server", flush=True)
                return
            counts[word] = counts.get(word, 0) + 1
            self.report(task, {"status": "running", "progress": {"current": done, "total": len(words)}})
            time.sleep(pause / max(len(words), 1))
        self.report(task, {"status": "succeeded", "result": {"words": len(words), "counts": counts}})

    def serve(self):
        threading.Thread(target=self.beat, daemon=True).start()
        while not self.leaving.is_set():
            try:
                task = self.client.call("POST", "/tasks/claim", {"worker_id": self.id}, wait=20)["task"]
            except OSError as err:
                print(f"claim failed: {err}; trying again", file=sys.stderr, flush=True)
                self.leaving.wait(1)
                continue
            if task is None:
                continue
            self.held, self.stopped = (task["id"], task["attempts"]), threading.Event()
            try:
                self.run(task)
            except Problem as problem:
                # task_cancelled, or the run was taken away (invalid_transition): drop it.
                print(f"task {task['id']}: {problem}", flush=True)
            except Exception as err:  # the operation itself failed: say so, with its class
                self.report(task, {"status": "failed", "error_code": type(err).__name__, "message": str(err)})
            finally:
                self.held = None

    def leave(self, *_):
        self.leaving.set()
        try:
            self.client.call("DELETE", f"/workers/{self.id}")
        finally:
            os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--room", required=True)
    parser.add_argument("--name", default=f"python-{os.getpid()}")
    args = parser.parse_args()
    token = os.environ.get("YARDMASTER_TOKEN")
    if not token:
        sys.exit("set YARDMASTER_TOKEN to a worker token (yardmaster token create --role worker --room ROOM)")
    worker = Worker(Client(args.url, token), args.room, args.name)
    signal.signal(signal.SIGTERM, worker.leave)
    signal.signal(signal.SIGINT, worker.leave)
    worker.serve()


if __name__ == "__main__":
    main()
