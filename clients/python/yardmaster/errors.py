"""Errors: every refusal of the server is an RFC 9457 problem with a stable ``code``."""

from __future__ import annotations

from typing import Any


class YardmasterError(Exception):
    """Anything this package raises on purpose."""


class ConfigError(YardmasterError):
    """The server or token could not be worked out (a bad URL, a broken client file)."""


class Problem(YardmasterError):
    """The server refused a request: ``status``, the problem's stable ``code``, its ``title``,
    ``detail`` and ``pointer`` (a JSON pointer into the request, when one part was at fault).
    ``body`` holds the whole problem, extension members included."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.code: str = str(body.get("code") or f"http_{status}")
        self.title: str | None = body.get("title")
        self.detail: str | None = body.get("detail")
        self.pointer: str | None = body.get("pointer")
        self.body = body
        self.retry_after = retry_after
        where = f" at {self.pointer}" if self.pointer else ""
        super().__init__(f"{status} {self.code}{where}: {self.detail or self.title or 'no detail'}")


class Unreachable(YardmasterError):
    """The server could not be reached, or kept answering 503, within the retry budget."""


class WaitTimeout(YardmasterError):
    """A job did not end within the time :meth:`Client.wait` was given."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        super().__init__(f"job {job.get('id')} is still {job.get('status')}")
