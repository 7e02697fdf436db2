#!/usr/bin/env python3
"""A remote yardmaster worker on the Python SDK (``pip install ./clients/python[pydantic]``).

It serves the type ``ROOM:analysis:WordCount`` (payload: {"text": "...", "pause": seconds}):
counts the words, reporting progress after each, and answers the counts. The SDK registers the
type (the model's JSON Schema) and the worker, claims with long-polls, heartbeats, stops a task
that is cancelled (at its next progress report), and on SIGTERM or Ctrl-C lets running tasks
finish for a few seconds, then leaves, handing the rest back to the queue at once.

    # a worker token: yardmaster token create --role worker --room lab --user w1
    export YARDMASTER_TOKEN=ym_...
    python3 examples/remote_worker.py --url http://127.0.0.1:8080 --room lab

Then submit: curl -H "Authorization: Bearer $MEMBER" -H 'content-type: application/json' \\
    -d '{"room": "lab", "operation": "analysis:WordCount", "payload": {"text": "to be or not to be"}}' \\
    http://127.0.0.1:8080/jobs
"""

from __future__ import annotations

import argparse
import logging
import os
import time

from pydantic import BaseModel, Field

from yardmaster.worker import TaskContext, Worker


class Text(BaseModel):
    text: str
    pause: float = Field(default=0, ge=0, le=60, description="Seconds the whole count takes")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", default=None, help="default: YARDMASTER_URL, then the CLI's client file")
    parser.add_argument("--room", required=True)
    parser.add_argument("--name", default=f"python-{os.getpid()}")
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    worker = Worker(args.url, room=args.room, name=args.name)

    @worker.task("analysis:WordCount")
    def word_count(ctx: TaskContext, params: Text) -> dict[str, object]:
        words = params.text.split()
        counts: dict[str, int] = {}
        for done, word in enumerate(words, start=1):
            counts[word] = counts.get(word, 0) + 1
            ctx.progress(done, len(words))  # raises Cancelled once the task is cancelled
            time.sleep(params.pause / max(len(words), 1))
        return {"words": len(words), "counts": counts}

    worker.run(concurrency=args.concurrency, grace=5)


if __name__ == "__main__":
    main()
