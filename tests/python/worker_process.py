"""A worker process for the tests that kill or stop one: serves ``ROOM:analysis:Slow``, whose
task reports progress every 50 ms for ``steps`` steps (or, ``deaf``, sleeps an hour and reports
nothing), and prints ``started ID`` as each begins.

    python worker_process.py URL TOKEN ROOM GRACE_SECONDS
"""

from __future__ import annotations

import logging
import sys
import time

from pydantic import BaseModel

from yardmaster.worker import TaskContext, Worker


class Slow(BaseModel):
    steps: int
    deaf: bool = False


def main() -> None:
    url, token, room, grace = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    worker = Worker(url, token, room=room, name="process")

    @worker.task("analysis:Slow")
    def slow(ctx: TaskContext, params: Slow) -> dict[str, int]:
        print(f"started {ctx.id}", flush=True)
        if params.deaf:
            time.sleep(3600)
        for step in range(params.steps):
            ctx.progress(step, params.steps)
            time.sleep(0.05)
        return {"steps": params.steps}

    worker.run(concurrency=2, grace=grace)
    print("left", flush=True)


if __name__ == "__main__":
    main()
