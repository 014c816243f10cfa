"""Serve the dashboard: Hypercorn's Trio worker and the admin clients in one Trio loop."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..cluster.logging import get_logger
from .app import build_app
from .pool import AdminPool
from .settings import MAX_HEADER_BYTES, DashboardSettings
from .state import Dashboard

log = get_logger(component="dashboard")
#: Idle keep-alive connections close after this long; a request must arrive within it.
KEEP_ALIVE_S = 30.0
GRACEFUL_S = 2.0


def hypercorn_config(settings: DashboardSettings) -> Config:
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.h11_max_incomplete_size = MAX_HEADER_BYTES
    config.keep_alive_timeout = KEEP_ALIVE_S
    config.graceful_timeout = GRACEFUL_S
    config.include_server_header = False
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    return config


async def serve(settings: DashboardSettings,
                shutdown: Callable[[], Awaitable[None]] | None = None,
                *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Run until ``shutdown`` returns (or forever); ``task_status`` gets the bound URLs."""
    async with trio.open_nursery() as nursery:
        pool = AdminPool(nursery, settings.call_timeout_s,
                         settings.max_sessions + len(settings.clusters))
        dash = Dashboard(settings, pool)
        app: Any = build_app(dash)
        run = functools.partial(hypercorn_serve, app, hypercorn_config(settings), mode="asgi",
                                shutdown_trigger=shutdown or trio.sleep_forever)
        binds = await nursery.start(run)
        log.info("dashboard serving", urls=binds, clusters=len(settings.clusters),
                 acl=settings.acl)
        task_status.started(binds)
        if shutdown is not None:
            await shutdown()
            pool.close_all()
            nursery.cancel_scope.cancel()
