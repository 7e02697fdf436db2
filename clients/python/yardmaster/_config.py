"""Which server to talk to, and with which token, the way the ``yardmaster`` CLI decides:
an argument, else ``YARDMASTER_URL`` / ``YARDMASTER_TOKEN``, else the client file
(``$YARDMASTER_CLIENT_CONFIG``, else ``$XDG_CONFIG_HOME/yardmaster/client.toml``, else
``~/.config/yardmaster/client.toml``), else ``http://127.0.0.1:8080`` and no token."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None


def client_file() -> Path | None:
    """Where the client file is looked for."""
    named = os.environ.get("YARDMASTER_CLIENT_CONFIG")
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME") or (
        str(Path(os.environ["HOME"]) / ".config") if os.environ.get("HOME") else None
    )
    return None if base is None else Path(base) / "yardmaster" / "client.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        with path.open("rb") as file:
            settings: dict[str, Any] = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"client settings {path}: {err}") from None
    unknown = set(settings) - {"url", "token"}
    if unknown:
        raise ConfigError(f"client settings {path}: unknown keys {sorted(unknown)}")
    return settings


def resolve(url: str | None = None, token: str | None = None) -> Target:
    """The target from the arguments over the environment over the client file."""
    url = url or os.environ.get("YARDMASTER_URL") or None
    token = token or os.environ.get("YARDMASTER_TOKEN") or None
    if url is None or token is None:
        path = client_file()
        settings = _read_file(path) if path is not None else {}
        url = url or settings.get("url")
        token = token or settings.get("token")
    url = (url or DEFAULT_URL).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the server URL must start with http:// or https://, not {url!r}")
    return Target(url=url, token=token or None)
