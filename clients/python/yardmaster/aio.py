"""The asyncio client: the same calls as :class:`yardmaster.Client`, awaited."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from . import _api as api
from .errors import Problem, Unreachable, WaitTimeout


class AsyncClient(api.Settings):
    """:class:`yardmaster.Client` for asyncio: the same calls, awaited, and iterators that are
    asynchronous."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_budget: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retry_budget)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self.headers, timeout=timeout, transport=transport, limits=api.LIMITS
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    # Jobs

    async def submit(
        self, operation: str, payload: Mapping[str, Any] | None = None, **fields: Any
    ) -> api.Job:
        """Submits one job (``POST /jobs``); ``fields`` are the submission's other members
        (``room``, ``queue``, ``priority``, ``depends_on``, ``run_at``, ``idempotency_key``, …)."""
        return await self._json(api.submit(operation, payload, fields))

    async def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> builtins.list[api.Job]:
        """Submits up to 1,000 jobs in one request and one transaction (``POST /jobs:batch``):
        all or none. An item's ``depends_on`` may name an earlier item as ``"#N"``."""
        answer = await self._json(api.submit_many(jobs))
        return list(answer["jobs"])

    async def get(self, job_id: str) -> api.Job:
        return await self._json(api.get(job_id))

    async def wait(self, job_id: str, timeout: float | None = None) -> api.Job:
        """The job once it has ended, by long-polls (``Prefer: wait``), never by sleeping;
        :class:`WaitTimeout` (holding the job as it last was) when ``timeout`` seconds pass first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = api.MAX_HOLD if deadline is None else min(api.MAX_HOLD, deadline - time.monotonic())
            job = await self._json(api.get(job_id, hold=max(0.0, left)))
            if job["status"] in api.TERMINAL:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job)

    async def cancel(self, job_id: str) -> api.Job:
        return await self._json(api.cancel(job_id))

    async def retry(self, job_id: str) -> api.Job:
        return await self._json(api.retry(job_id))

    def list(self, **filters: Any) -> AsyncIterator[dict[str, Any]]:
        """Job summaries, newest first, page after page (``room``, ``status``, ``operation``,
        ``queue``, ``parent_job_id``; ``limit`` is the page size)."""
        return self._pages("/jobs", filters)

    def children(self, job_id: str, **filters: Any) -> AsyncIterator[dict[str, Any]]:
        return self._pages(f"/jobs/{job_id}/children", filters)

    def events(
        self, job_id: str, *, follow: bool = False, after: int | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """The job's events in order. With ``follow``, then each event as it is written, until the
        job's last: the event stream, resumed with ``Last-Event-ID`` across a dropped connection
        or a server restart, with no gap and no repeat."""
        if follow:
            return self._follow(
                f"/jobs/{job_id}/events/stream", job_id, None if after is None else str(after)
            )
        return self._event_pages(job_id, after)

    def room_events(self, room: str, *, after: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every event of a room's jobs as it is written (the room's stream, resumed as ``events``)."""
        return self._follow(f"/rooms/{room}/events/stream", None, after)

    async def task(self, task_id: str, *, wait: float | None = None) -> api.Job:
        """A task (a job of a registered type); with ``wait``, held until it ends or that long."""
        return await self._json(api.get_task(task_id, hold=wait))

    # Uploads

    async def upload(
        self,
        directory: str | Path,
        service: str,
        *,
        room: str | None = None,
        idempotency_key: str | None = None,
    ) -> api.Job:
        """Uploads a directory holding ``run.sh`` (``POST /uploads``): the job that runs it."""
        return await self._json(api.upload(Path(directory), service, room, idempotency_key))

    async def download_result(self, job_id: str, path: str | Path, timeout: float | None = None) -> Path:
        """Waits for the job to end, then writes the ZIP of its outputs and logs to ``path``."""
        target = Path(path)
        while True:
            await self.wait(job_id, timeout)
            response = await self._send(api.result(job_id), stream=True)
            try:
                if response.status_code == 202:
                    continue
                with target.open("wb") as file:
                    async for chunk in response.aiter_bytes():
                        file.write(chunk)
                return target
            finally:
                await response.aclose()

    # Types, tokens

    async def types(self, room: str | None = None) -> builtins.list[dict[str, Any]]:
        return list((await self._json(api.types(room)))["types"])

    async def create_token(
        self, user: str, *, role: str = "member", rooms: Iterable[str] | None = None, read_only: bool = False
    ) -> dict[str, Any]:
        """Creates a token (admins): the answer's ``token`` is shown this once."""
        return await self._json(api.create_token(user, role, rooms, read_only))

    async def tokens(self) -> builtins.list[dict[str, Any]]:
        return list((await self._json(api.Call("GET", "/admin/tokens")))["tokens"])

    async def revoke_token(self, token_id: str) -> None:
        await (await self._send(api.Call("DELETE", f"/admin/tokens/{token_id}"))).aclose()

    # The wire

    async def request(self, call: api.Call) -> dict[str, Any]:
        """Sends any call and answers its JSON (the worker SDK's way in)."""
        return await self._json(call)

    async def _json(self, call: api.Call) -> dict[str, Any]:
        response = await self._send(call)
        try:
            return api.json_object(response)
        finally:
            await response.aclose()

    @contextlib.asynccontextmanager
    async def _stream(self, call: api.Call) -> AsyncIterator[httpx.Response]:
        response = await self._send(call, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    async def _send(self, call: api.Call, *, stream: bool = False) -> httpx.Response:
        backoff = api.Backoff(self.retry_budget)
        timeout = self.timeout + (call.hold or 0.0)
        while True:
            request = self._http.build_request(
                call.method,
                call.path,
                params=call.params,
                json=call.json,
                data=call.form,
                files=call.files,
                headers=call.prepared_headers(),
                timeout=timeout,
            )
            try:
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as err:
                delay = backoff.delay() if api.may_repeat(call, err) else None
                if delay is None:
                    raise Unreachable(f"{call.method} {call.path}: {err}") from err
                await asyncio.sleep(delay)
                continue
            if api.is_transient(response) and call.repeatable:
                delay = backoff.delay(api.retry_after(response))
                if delay is not None:
                    await response.aclose()
                    await asyncio.sleep(delay)
                    continue
            if response.status_code >= 400:
                await response.aread()
                await response.aclose()
                raise api.problem_of(response)
            return response

    async def _pages(self, path: str, filters: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            page = await self._json(api.page(path, filters, cursor))
            for job in page["jobs"]:
                yield job
            cursor = page.get("next_cursor")
            if cursor is None:
                return

    async def _event_pages(self, job_id: str, after: int | None) -> AsyncIterator[dict[str, Any]]:
        while True:
            page = await self._json(api.events_page(job_id, after, None))
            if not page["events"]:
                return
            for event in page["events"]:
                yield event
            after = page["next_after"]

    async def _follow(self, path: str, job_id: str | None, last: str | None) -> AsyncIterator[dict[str, Any]]:
        backoff = api.Backoff(self.retry_budget)
        while True:
            seen = 0
            try:
                async with self._stream(api.stream(path, last)) as response:
                    parser = api.EventParser()
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is not None:
                            last, seen = event.id or last, seen + 1
                            backoff = api.Backoff(self.retry_budget)
                            yield event.data
            except (httpx.TransportError, Unreachable) as err:
                delay = backoff.delay()
                if delay is None:
                    raise Unreachable(
                        f"the event stream {path} dropped and did not come back: {err}"
                    ) from err
                await asyncio.sleep(delay)
                continue
            except Problem as problem:
                delay = backoff.delay(problem.retry_after) if problem.status == 503 else None
                if delay is None:
                    raise
                await asyncio.sleep(delay)
                continue
            # A clean end: the job's last event, or a server going away. A room's stream never
            # ends on its own; a job's is over once the job has ended and a reconnection after
            # that brought nothing new.
            if job_id is not None and api.should_stop(seen, await self.get(job_id)):
                return
