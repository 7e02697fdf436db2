"""The worker SDK: functions served as registered job types by a remote worker over HTTP.

    from pydantic import BaseModel
    from yardmaster.worker import TaskContext, Worker

    class Text(BaseModel):
        text: str

    worker = Worker(room="lab")

    @worker.task("analysis:WordCount")
    def count(ctx: TaskContext, params: Text) -> dict[str, int]:
        ctx.progress(1, 1)
        return {"words": len(params.text.split())}

    worker.run(concurrency=8)

``run`` registers the types (a pydantic model's JSON Schema, or the ``schema`` given) and the
worker, claims tasks with long-polls (as many at once as slots are free), runs each on a thread
of its own (an ``async def`` function in an event loop of that thread), heartbeats, and reports
the outcome. A cancel reaches the task as ``ctx.cancelled`` and as :class:`Cancelled` at its next
``progress`` or ``log``. On SIGTERM or SIGINT it stops claiming, gives running tasks ``grace``
seconds, then leaves, which hands what is left back to the queue at once."""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from types import FrameType
from typing import Any

from . import _api as api
from .client import Client
from .errors import Problem, YardmasterError

log = logging.getLogger("yardmaster.worker")

#: How long one claim is held at the server: also how soon a stop is noticed while idle.
CLAIM_HOLD = 5.0
#: How long a freed slot waits for others while tasks run, so that claims take several tasks.
GATHER = 0.005


class Cancelled(YardmasterError):
    """The task was cancelled, or taken from this worker: stop, nothing more is reported."""


class RetryLater(YardmasterError):
    """Raise to give the task back, to run again after ``delay`` seconds (no failure counted)."""

    def __init__(self, delay: float, reason: str | None = None) -> None:
        self.delay, self.reason = delay, reason
        super().__init__(reason or f"retry in {delay} s")


class TaskFailed(YardmasterError):
    """Raise to fail the task with a stable ``code`` (any other exception fails it with its class
    name). Failures are retried by the task's retry policy, like any job's."""

    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message
        super().__init__(f"{code}: {message}")


class TaskContext:
    """What a running task may do: read itself, report progress and messages, see a cancel."""

    def __init__(self, worker: Worker, task: api.Job) -> None:
        self._worker, self.task = worker, task
        self.id: str = task["id"]
        self.attempt: int = task["attempts"]
        self.type: str = task["operation"]
        self._cancelled = threading.Event()

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled or taken away (the heartbeat or a report said so)."""
        return self._cancelled.is_set()

    def progress(self, current: int, total: int | None = None, message: str | None = None) -> None:
        """Reports progress (an event, and a renewed lease); :class:`Cancelled` once cancelled."""
        body: dict[str, Any] = {"progress": {"current": current, "total": total}}
        if message is not None:
            body["message"] = message
        self._running(body)

    def log(self, message: str) -> None:
        """Adds a message to the task's events; :class:`Cancelled` once cancelled."""
        self._running({"message": message})

    def _running(self, body: dict[str, Any]) -> None:
        if self.cancelled:
            raise Cancelled(f"task {self.id} was cancelled")
        try:
            self._worker._report(self, "running", body)
        except Problem as problem:
            if problem.code in ("task_cancelled", "invalid_transition", "task_forbidden", "task_not_found"):
                self._cancelled.set()
                raise Cancelled(f"task {self.id}: {problem.code}") from None
            raise


class Reporter:
    """Sends the outcomes of tasks that end together in one ``POST /tasks:report`` (up to
    1,000), each task's thread waiting for its own answer, so its slot frees once its outcome
    is written."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._waiting: queue.SimpleQueue[tuple[dict[str, Any], Future[dict[str, Any]]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._send, name="yardmaster-reports", daemon=True)
        self._thread.start()

    def report(self, body: dict[str, Any]) -> dict[str, Any]:
        """Applies one report (with its ``id``): the task as it now is, or :class:`Problem`."""
        answer: Future[dict[str, Any]] = Future()
        self._waiting.put((body, answer))
        result = answer.result()
        if result["status"] != 200:
            raise Problem(int(result["status"]), result.get("problem") or {})
        task: dict[str, Any] = result["task"]
        return task

    def close(self) -> None:
        self._waiting.put(None)
        self._thread.join(timeout=60)

    def _send(self) -> None:
        while (first := self._waiting.get()) is not None:
            batch = [first]
            while len(batch) < 1000:
                try:
                    more = self._waiting.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._waiting.put(None)
                    break
                batch.append(more)
            try:
                call = api.Call("POST", "/tasks:report", json={"reports": [body for body, _ in batch]})
                results = self._client.request(call)["results"]
            except Exception as err:
                for _, answer in batch:
                    answer.set_exception(err)
                continue
            for (_, answer), result in zip(batch, results, strict=True):
                answer.set_result(result)


#: A function for a task thread to call, and its arguments.
Work = tuple[Callable[..., None], tuple[Any, ...]]


class TaskThreads:
    """The threads tasks run on: daemon threads, so a task still running when the worker has left
    (one that never calls ``progress`` and so never sees its cancel) does not keep the process
    alive after ``run`` returns. Never holds more tasks than threads: the claim loop's slots see
    to that."""

    def __init__(self, size: int) -> None:
        self._work: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"yardmaster-task-{n}", daemon=True)
            for n in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, function: Callable[..., None], *args: Any) -> None:
        self._work.put((function, args))

    def close(self, grace: float) -> bool:
        """Lets the running tasks finish within ``grace`` seconds: whether they all did."""
        for _ in self._threads:
            self._work.put(None)
        deadline = time.monotonic() + grace
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            function, args = work
            try:
                function(*args)
            except BaseException:  # a task's SystemExit must not take a thread from the pool
                log.exception("a task thread caught an escaped exception")


@dataclass
class Served:
    """One registered type and the function that runs its tasks."""

    room: str | None
    category: str
    name: str
    schema: dict[str, Any]
    function: Callable[..., Any]
    model: Any = None


def split_type(type_name: str, room: str | None) -> tuple[str | None, str, str]:
    parts = type_name.split(":")
    if len(parts) == 2:
        return room, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise ValueError(f"a type is category:name or room:category:name, not {type_name!r}")


def model_of(function: Callable[..., Any]) -> Any:
    """The pydantic model the function's parameters are, if its second parameter is one."""
    parameters = list(inspect.signature(function, eval_str=True).parameters.values())
    if len(parameters) < 2:
        return None
    annotation = parameters[1].annotation
    if inspect.isclass(annotation) and hasattr(annotation, "model_json_schema"):
        return annotation
    return None


class Worker:
    """A remote worker: the types it serves, and the loop that claims and runs their tasks."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        room: str | None = None,
        name: str | None = None,
        client: Client | None = None,
    ) -> None:
        self.client = client or Client(url, token)
        self.room, self.name = room, name or f"{socket.gethostname()}-python"
        self.served: dict[str, Served] = {}
        self.id: str | None = None
        self._stopping = threading.Event()
        self._gone = threading.Event()
        self._lock = threading.Lock()
        self._running: dict[str, TaskContext] = {}
        self._reporter: Reporter | None = None

    def task(
        self, type_name: str, *, schema: dict[str, Any] | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Serves ``type_name`` (``category:name`` in the worker's room, or ``room:category:name``)
        with the decorated ``function(ctx, params)``: ``params`` is a pydantic model instance
        when the parameter is annotated with one (its JSON Schema is registered), else the
        payload as a dict checked against ``schema``."""

        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            room, category, name = split_type(type_name, self.room)
            model = model_of(function)
            described = model.model_json_schema() if model is not None else schema
            if described is None:
                raise ValueError(f"{type_name}: annotate params with a pydantic model, or pass schema=")
            self.served[f"{category}:{name}"] = Served(room, category, name, described, function, model)
            return function

        return register

    def stop(self) -> None:
        """Stops claiming; :meth:`run` then lets running tasks finish and leaves."""
        self._stopping.set()

    def run(self, concurrency: int = 4, *, grace: float = 30.0, handle_signals: bool = True) -> None:
        """Registers, then claims and runs tasks until :meth:`stop`, SIGTERM or SIGINT."""
        if concurrency < 1:
            raise ValueError("concurrency is at least 1")
        if handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        full_names = self._register()
        self._reporter = Reporter(self.client)
        beating = threading.Thread(target=self._heartbeat, name="yardmaster-heartbeat", daemon=True)
        beating.start()
        slots = threading.Semaphore(concurrency)
        pool = TaskThreads(concurrency)
        try:
            while not self._stopping.is_set():
                free = self._take_free(slots, concurrency)
                if free == 0:
                    continue
                try:
                    tasks = self._claim(free)
                except YardmasterError as err:
                    tasks = []
                    if isinstance(err, Problem) and err.code in ("worker_gone", "worker_not_found"):
                        # Marked gone after a silence (a long pause, the server away): register again.
                        log.warning("claim refused (%s); registering again", err.code)
                        full_names = self._register()
                    else:
                        log.warning("claim failed: %s", err)
                        self._stopping.wait(1.0)
                for _ in range(free - len(tasks)):
                    slots.release()
                for task in tasks:
                    pool.submit(self._run_task, task, slots)
        finally:
            log.info("stopping: %d tasks running, %.0f s of grace", len(self._running), grace)
            if not pool.close(grace):
                with self._lock:
                    for ctx in self._running.values():
                        ctx._cancelled.set()
            self._reporter.close()
            self._leave()
            log.info("left; served %s", ", ".join(full_names))

    # The loop's parts

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: no more claims", signum)
        self.stop()

    def _register(self) -> list[str]:
        if not self.served:
            raise ValueError("no task is served: decorate a function with @worker.task(...)")
        names = []
        for served in self.served.values():
            body: dict[str, Any] = {"category": served.category, "name": served.name, "schema": served.schema}
            if served.room is not None:
                body["room"] = served.room
            registered = self.client.request(api.Call("POST", "/types", json=body))
            names.append(registered["id"])
        me = self.client.request(api.Call("POST", "/workers", json={"name": self.name, "types": names}))
        self.id, self.heartbeat_seconds = me["id"], float(me["heartbeat_seconds"])
        log.info("worker %s serves %s", self.id, ", ".join(names))
        return names

    def _take_free(self, slots: threading.Semaphore, concurrency: int) -> int:
        """Waits for a free slot (a second at most, to notice a stop), then takes every free one.
        While tasks are running, it gathers for up to :data:`GATHER` seconds until half the
        slots are free, so short tasks are claimed several to a request, not one by one."""
        if not slots.acquire(timeout=1.0):
            return 0
        free = 1
        deadline = time.monotonic() + GATHER
        while free < concurrency:
            if slots.acquire(blocking=False):
                free += 1
                continue
            if 2 * free >= concurrency or not self._running:
                break
            left = deadline - time.monotonic()
            if left <= 0 or not slots.acquire(timeout=left):
                break
            free += 1
        return free

    def _claim(self, most: int) -> list[api.Job]:
        call = api.Call(
            "POST", "/tasks/claim", json={"worker_id": self.id, "max_tasks": most}, hold=CLAIM_HOLD
        )
        return list(self.client.request(call)["tasks"])

    def _run_task(self, task: api.Job, slots: threading.Semaphore) -> None:
        ctx = TaskContext(self, task)
        with self._lock:
            self._running[ctx.id] = ctx
        try:
            self._execute(ctx)
        finally:
            with self._lock:
                self._running.pop(ctx.id, None)
            slots.release()

    def _execute(self, ctx: TaskContext) -> None:
        served = self.served.get(ctx.type.split(":", 1)[1]) or self.served.get(ctx.type)
        try:
            if served is None:
                raise TaskFailed("unknown_type", f"this worker serves no {ctx.type}")
            params = ctx.task.get("payload") or {}
            if served.model is not None:
                params = served.model.model_validate(params)
            answer = served.function(ctx, params)
            if inspect.isawaitable(answer):
                answer = asyncio.run(_awaited(answer))
            if hasattr(answer, "model_dump"):
                answer = answer.model_dump(mode="json")
            self._report_quietly(ctx, "succeeded", {"result": answer})
        except Cancelled:
            log.info("task %s stopped: cancelled", ctx.id)
        except RetryLater as later:
            body: dict[str, Any] = {"delay_seconds": later.delay}
            if later.reason:
                body["message"] = later.reason
            self._report_quietly(ctx, "retry_later", body)
        except TaskFailed as failed:
            self._report_quietly(ctx, "failed", {"error_code": failed.code, "message": failed.message})
        except Exception as err:
            log.exception("task %s failed", ctx.id)
            self._report_quietly(
                ctx, "failed", {"error_code": type(err).__name__, "message": str(err) or repr(err)}
            )

    def _report(self, ctx: TaskContext, status: str, body: dict[str, Any]) -> api.Job:
        """Progress goes at once (its answer says whether the task was cancelled); outcomes go
        through the reporter, several in one request when tasks end together."""
        report = {"worker_id": self.id, "attempt": ctx.attempt, "status": status, **body}
        if status == "running" or self._reporter is None:
            return self.client.request(api.Call("PATCH", f"/tasks/{ctx.id}", json=report))
        return self._reporter.report({"id": ctx.id, **report})

    def _report_quietly(self, ctx: TaskContext, status: str, body: dict[str, Any]) -> None:
        try:
            self._report(ctx, status, body)
        except YardmasterError as err:
            # Refused (the run is over, or cancelled), or the server stayed away: the task's
            # lease lapses and the server gives it to another run.
            log.warning("task %s: the %s report was not applied: %s", ctx.id, status, err)

    def _heartbeat(self) -> None:
        # Beats go on through the grace: the running tasks' leases need them until the worker leaves.
        while not self._gone.wait(self.heartbeat_seconds):
            with self._lock:
                held = [{"id": ctx.id, "attempt": ctx.attempt} for ctx in self._running.values()]
            try:
                call = api.Call("POST", f"/workers/{self.id}/heartbeat", json={"tasks": held})
                answer = self.client.request(call)
            except YardmasterError as err:
                log.warning("heartbeat failed: %s", err)
                continue
            with self._lock:
                for stop in answer.get("stop", []):
                    ctx = self._running.get(stop["id"])
                    if ctx is not None and ctx.attempt == stop["attempt"]:
                        ctx._cancelled.set()

    def _leave(self) -> None:
        self._gone.set()
        if self.id is None:
            return
        try:
            self.client.request(api.Call("DELETE", f"/workers/{self.id}"))
        except YardmasterError as err:
            log.warning("could not leave: %s", err)


async def _awaited(answer: Any) -> Any:
    return await answer
