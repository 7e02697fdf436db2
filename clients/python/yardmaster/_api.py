"""The requests of the API, as values both clients send, and what their answers mean.

Each public method of :class:`yardmaster.Client` and :class:`yardmaster.AsyncClient` builds a
:class:`Call` here and sends it; so the two clients differ only in how they wait."""

from __future__ import annotations

import email.utils
import json
import math
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._config import resolve
from .errors import Problem, YardmasterError

Job = dict[str, Any]
"""A job as the server shows it (``id``, ``operation``, ``status``, ``payload``, ``result``, …)."""

USER_AGENT = "yardmaster-python/0.1.0"

# How long an idle connection is kept for the next request: under the server's keep-alive
# (5 s), so a request is never sent on a connection the server is closing in that instant.
LIMITS = httpx.Limits(keepalive_expiry=3.0)

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

#: Longest single hold of a long-poll; the server caps it too (``server.max_wait_seconds``).
MAX_HOLD = 60.0


@dataclass
class Call:
    """One request: what to send, and whether sending it again is harmless."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Safe to repeat after a 503 or a lost connection (reads, keyed submissions, cancels).
    repeatable: bool = True
    #: The long-poll hold asked with ``Prefer: wait=N``, in seconds.
    hold: float | None = None
    #: A multipart form: its fields, then its files (``(field, (name, bytes))``).
    form: dict[str, str] | None = None
    files: list[tuple[str, tuple[str, bytes]]] | None = None

    def prepared_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.hold is not None:
            headers["Prefer"] = f"wait={max(0, math.ceil(self.hold))}"
        return headers


class Settings:
    """What both clients hold: the server and token (an argument, else ``YARDMASTER_URL`` /
    ``YARDMASTER_TOKEN``, else the CLI's client file), the timeout of a request beyond its
    long-poll hold, the seconds a 503 or a lost connection is tried again for, and the headers
    every request carries."""

    def __init__(self, url: str | None, token: str | None, timeout: float, retry_budget: float) -> None:
        target = resolve(url, token)
        self.url, self.token = target.url, target.token
        self.timeout, self.retry_budget = timeout, retry_budget
        self.headers = {"User-Agent": USER_AGENT}
        if target.token:
            self.headers["Authorization"] = f"Bearer {target.token}"


def new_key() -> str:
    """An idempotency key for a submission that names none, so a retry cannot make a second job."""
    return f"sdk-{uuid.uuid4().hex}"


def submission(
    operation: str, payload: Mapping[str, Any] | None, fields: Mapping[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {"operation": operation}
    if payload is not None:
        body["payload"] = dict(payload)
    body.update({name: value for name, value in fields.items() if value is not None})
    body.setdefault("idempotency_key", new_key())
    return body


def submit(operation: str, payload: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> Call:
    return Call("POST", "/jobs", json=submission(operation, payload, fields))


def submit_many(jobs: Iterable[Mapping[str, Any]]) -> Call:
    items = []
    for job in jobs:
        item = dict(job)
        item.setdefault("idempotency_key", new_key())
        items.append(item)
    return Call("POST", "/jobs:batch", json={"jobs": items})


def get(job_id: str, hold: float | None = None) -> Call:
    return Call("GET", f"/jobs/{job_id}", hold=hold)


def get_task(task_id: str, hold: float | None = None) -> Call:
    return Call("GET", f"/tasks/{task_id}", hold=hold)


def cancel(job_id: str) -> Call:
    return Call("POST", f"/jobs/{job_id}/cancel")


def retry(job_id: str) -> Call:
    # Repeated after an unknown outcome it would answer 409 `invalid_transition`: not repeated.
    return Call("POST", f"/jobs/{job_id}/retry", repeatable=False)


def page(path: str, filters: Mapping[str, Any], cursor: str | None) -> Call:
    params = {name: value for name, value in filters.items() if value is not None}
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", path, params=params)


def events_page(job_id: str, after: int | None, limit: int | None) -> Call:
    params = {name: value for name, value in {"after": after, "limit": limit}.items() if value is not None}
    return Call("GET", f"/jobs/{job_id}/events", params=params)


def stream(path: str, last_event_id: str | None) -> Call:
    headers = {"Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return Call("GET", path, headers=headers)


def types(room: str | None) -> Call:
    return Call("GET", "/types", params={"room": room} if room else None)


def create_token(user: str, role: str, rooms: Iterable[str] | None, read_only: bool) -> Call:
    body: dict[str, Any] = {"user": user, "role": role, "read_only": read_only}
    if rooms is not None:
        body["rooms"] = list(rooms)
    return Call("POST", "/admin/tokens", json=body, repeatable=False)


def upload(directory: Path, service: str, room: str | None, key: str | None) -> Call:
    form = {"service": service, "idempotency_key": key or new_key()}
    if room is not None:
        form["room"] = room
    return Call("POST", "/uploads", form=form, files=upload_files(directory))


def result(job_id: str) -> Call:
    return Call("GET", f"/jobs/{job_id}/result")


def upload_files(directory: Path) -> list[tuple[str, tuple[str, bytes]]]:
    """Every file under ``directory``, named by its path within it (``dir/name`` nests)."""
    if not (directory / "run.sh").is_file():
        raise FileNotFoundError(f"{directory} has no run.sh")
    files = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        files.append(("files", (path.relative_to(directory).as_posix(), path.read_bytes())))
    return files


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The JSON object an answer of the API is."""
    answer = response.json()
    if not isinstance(answer, dict):
        raise YardmasterError(f"{response.request.method} {response.request.url.path}: not a JSON object")
    return answer


def problem_of(response: httpx.Response) -> Problem:
    """The problem a refusal carries (a body that is not one becomes its ``detail``)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500] or response.reason_phrase}
    return Problem(response.status_code, body, retry_after(response))


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds (a number or an HTTP date), if the answer has one."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unreadable: the client's own pause applies
    return max(0.0, when.timestamp() - time.time())


def is_transient(response: httpx.Response) -> bool:
    return response.status_code == 503


@dataclass
class Event:
    """One server-sent event: its ``id``, its ``event`` name and its data (the job event as JSON)."""

    id: str | None
    event: str | None
    data: dict[str, Any]


class EventParser:
    """Reads ``text/event-stream`` line by line (comments and keep-alives skipped)."""

    def __init__(self) -> None:
        self._id: str | None = None
        self._event: str | None = None
        self._data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if line == "":
            if not self._data:
                self._event = None
                return None
            text = "\n".join(self._data)
            event = Event(self._id, self._event, json.loads(text))
            self._event, self._data = None, []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


class Backoff:
    """When to send a request again after a 503 or a lost connection, within ``budget`` seconds:
    the server's ``Retry-After`` when it gives one, else a pause that doubles from 0.1 s to 5 s."""

    def __init__(self, budget: float) -> None:
        self._deadline = time.monotonic() + budget
        self._pause = 0.1

    def delay(self, asked: float | None = None) -> float | None:
        """The pause before the next try, or ``None`` when the budget would be spent."""
        delay = self._pause if asked is None else min(asked, 30.0)
        self._pause = min(self._pause * 2, 5.0)
        return delay if time.monotonic() + delay <= self._deadline else None


def may_repeat(call: Call, err: httpx.TransportError) -> bool:
    """Whether a request that failed on the way may be sent again: one that never reached the
    server (no connection) always, any other only when repeating it is harmless."""
    return call.repeatable or isinstance(err, httpx.ConnectError)


def should_stop(events_seen: int, job: Job) -> bool:
    """Whether an event stream that ended is over: its job has ended and the reconnection after
    that ending brought nothing new."""
    return events_seen == 0 and job.get("status") in TERMINAL
