"""Admin clients the dashboard talks through, one per (cluster, account), each kept open in a
task of the server's nursery and closed when the account's session goes (or at shutdown)."""

from __future__ import annotations

import attrs
import trio

from ..client.admin import Admin
from ..client.config import ClientConfig
from ..cluster.logging import get_logger
from .sessions import Account
from .settings import ClusterRef

log = get_logger(component="dashboard")


@attrs.define
class _Held:
    admin: Admin | None = None
    ready: trio.Event = attrs.field(factory=trio.Event)
    stop: trio.Event = attrs.field(factory=trio.Event)
    error: BaseException | None = None


class AdminPool:
    """``await pool.admin(cluster, account)``: the open Admin for them (opened on first use).
    ``limit`` bounds how many are open; the oldest is closed to make room."""

    def __init__(self, nursery: trio.Nursery, call_timeout_s: float, limit: int) -> None:
        self._nursery = nursery
        self._timeout = call_timeout_s
        self._limit = limit
        self._held: dict[tuple[str, Account | None], _Held] = {}

    async def admin(self, cluster: ClusterRef, account: Account | None) -> Admin:
        key = (cluster.namesrv_addr, account)
        held = self._held.get(key)
        if held is None or held.error is not None or held.stop.is_set():
            while len(self._held) >= self._limit:
                self.close(next(iter(self._held)))
            held = self._held[key] = _Held()
            self._nursery.start_soon(self._keep, cluster, account, held)
        await held.ready.wait()
        if held.admin is None:
            self._held.pop(key, None)
            raise ConnectionError(f"cannot open an admin client for {cluster.namesrv_addr}: "
                                  f"{held.error}")
        return held.admin

    async def _keep(self, cluster: ClusterRef, account: Account | None, held: _Held) -> None:
        config = ClientConfig(namesrv_addr=cluster.namesrv_addr, call_timeout_s=self._timeout,
                              instance_name=f"dashboard-{id(held)}")
        try:
            async with Admin(client_config=config,
                             access_key=account.access_key if account else None,
                             secret_key=account.secret_key if account else None) as admin:
                held.admin = admin
                held.ready.set()
                await held.stop.wait()
        except Exception as exc:  # an address that cannot be used: the page says why
            held.error = exc
            log.warning("admin client failed", namesrv=cluster.namesrv_addr, error=str(exc))
        finally:
            held.admin = None
            held.ready.set()

    def close(self, key: tuple[str, Account | None]) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            held.stop.set()

    def close_all(self) -> None:
        for key in list(self._held):
            self.close(key)
