"""yardmaster: a client and a worker SDK for the yardmaster job orchestration service.

from yardmaster import Client

with Client() as client:                 # YARDMASTER_URL / YARDMASTER_TOKEN, or the CLI's file
    job = client.submit("sleep", {"seconds": 1})
    print(client.wait(job["id"])["status"])
"""

from ._api import Call, Job
from ._config import Target, resolve
from .aio import AsyncClient
from .client import Client
from .errors import ConfigError, Problem, Unreachable, WaitTimeout, YardmasterError

__all__ = [
    "AsyncClient",
    "Call",
    "Client",
    "ConfigError",
    "Job",
    "Problem",
    "Target",
    "Unreachable",
    "WaitTimeout",
    "YardmasterError",
    "resolve",
]
__version__ = "0.1.0"
