"""What a server's handlers get besides their params (ServerContext), and what a handler is."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infill.core import cache
from infill.core.cache import ModelCache


@dataclass
class ServerContext:
    """What handlers may use besides their params."""

    models: ModelCache = field(default_factory=lambda: cache.SHARED)  # the process's one model cache
    transport: str = "stdio"  # "stdio" | "socket" | "inprocess"
    idle_timeout: float = 0.0
    started: float = field(default_factory=time.time)
    # True once the client of the request in progress has gone away (set per request by the socket server);
    # long handlers poll it through their progress callback and stop before writing anything
    cancelled: Callable[[], bool] = lambda: False


Handler = Callable[[dict[str, Any], ServerContext], dict[str, Any]]
