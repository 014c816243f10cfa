"""Serve the dashboard: Hypercorn's HTTP/1.1 connection handler behind our own accept loop, and
the admin clients, in one Trio loop.

Not ``hypercorn.trio.serve``: in its Trio worker an exception escaping one connection's handler
(hypercorn 0.18 lets a send race between the request's answer and the peer's EOF escape as
``BusyResourceError``, pgjones/hypercorn#203) ends the whole server. Here each connection is
its own failure domain, and connections beyond ``max_connections`` are closed at once."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import AppWrapper, ConnectionState
from hypercorn.utils import wrap_app

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


class _Connection(TCPServer):
    """Hypercorn's connection, ended as soon as the peer has closed and no answer is being
    written: Hypercorn's own waits out the keep-alive time (30 s) on a closed socket, so a
    client opening and closing connections in a loop would hold ``max_connections`` slots."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._peer_gone = trio.Event()

    async def _read_data(self) -> None:
        try:
            await super()._read_data()
        finally:
            self._peer_gone.set()
            await self.idle_task.stop()

    async def _idle_timeout(self) -> None:
        async with trio.open_nursery() as waiting:
            async def until(event: Callable[[], Awaitable[None]]) -> None:
                await event()
                waiting.cancel_scope.cancel()

            waiting.start_soon(until, self.context.terminated.wait)
            waiting.start_soon(until, self._peer_gone.wait)
            waiting.start_soon(until, functools.partial(trio.sleep, self.config.keep_alive_timeout))
        with trio.CancelScope(shield=True):
            await self._initiate_server_close()


async def _serve_http(app: AppWrapper, config: Config, settings: DashboardSettings,
                      shutdown: Callable[[], Awaitable[None]], *,
                      task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections until ``shutdown`` returns; then give open ones ``GRACEFUL_S``."""
    listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)
    context = WorkerContext(None)
    slots = trio.CapacityLimiter(settings.max_connections)

    async def handle(stream: trio.SocketStream) -> None:
        try:
            slots.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:
            log.warning("dashboard connection refused: too many open",
                        max_connections=settings.max_connections)
            await stream.aclose()
            return
        try:
            await _Connection(app, config, context, ConnectionState({}), stream)
        except Exception as exc:  # one connection's failure is that connection's only
            log.warning("dashboard connection failed", error=repr(exc)[:300])
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
        finally:
            slots.release_on_behalf_of(stream)

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            await accepting.start(functools.partial(
                trio.serve_listeners, handle, listeners, handler_nursery=connections))
            task_status.started([_url(listener) for listener in listeners])
            await shutdown()
            accepting.cancel_scope.cancel()
        await context.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout


def _url(listener: trio.SocketListener) -> str:
    host, port = listener.socket.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(settings: DashboardSettings,
                shutdown: Callable[[], Awaitable[None]] | None = None,
                *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
    """Run until ``shutdown`` returns (or forever); ``task_status`` gets the bound URLs."""
    config = hypercorn_config(settings)
    async with trio.open_nursery() as nursery:
        pool = AdminPool(nursery, settings.call_timeout_s,
                         settings.max_sessions + len(settings.clusters))
        dash = Dashboard(settings, pool)
        asgi: Any = build_app(dash)  # Starlette's ASGI types are looser than Hypercorn's
        app = wrap_app(asgi, config.wsgi_max_body_size, "asgi")
        binds = await nursery.start(_serve_http, app, config, settings,
                                    shutdown or trio.sleep_forever)
        log.info("dashboard serving", urls=binds, clusters=len(settings.clusters),
                 acl=settings.acl)
        task_status.started(binds)
        if shutdown is not None:
            await shutdown()
            pool.close_all()
            nursery.cancel_scope.cancel()
