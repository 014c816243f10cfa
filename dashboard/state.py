"""The dashboard's state shared by its routes and pages: settings, sessions, admin clients."""

from __future__ import annotations

import time

import trio
from starlette.requests import Request
from starlette.responses import Response

from ..client.admin import Admin
from ..client.errors import MQClientError
from .pool import AdminPool
from .sessions import COOKIE, Account, Session, SessionStore
from .settings import MAX_CONCURRENT_LOGINS, ClusterRef, DashboardSettings


class Forbidden(Exception):
    """An action the session may not take (403)."""


class Dashboard:
    """The app's state: settings, sessions, the admin clients, live streams served."""

    def __init__(self, settings: DashboardSettings, pool: AdminPool) -> None:
        self.settings = settings
        self.sessions = SessionStore(settings.max_sessions, settings.session_idle_s)
        self.pool = pool
        self.live_streams = 0
        self.logins = trio.CapacityLimiter(MAX_CONCURRENT_LOGINS)

    def cluster(self, cid: int) -> ClusterRef:
        if not 0 <= cid < len(self.settings.clusters):
            raise LookupError(f"no cluster {cid}")
        return self.settings.clusters[cid]

    async def admin(self, cid: int, session: Session) -> Admin:
        return await self.pool.admin(self.cluster(cid), session.account)

    def can_act(self, session: Session) -> bool:
        return not self.settings.acl or (session.account is not None and session.account.admin)

    async def verify(self, access_key: str, secret_key: str) -> Account | None:
        """The account if a runtime-info call signed with it succeeds on a broker of the first
        cluster; admin if GET_BROKER_CONFIG (admin-only under our ACL) does too."""
        async with self.logins:
            return await self._verify(access_key, secret_key)

    async def _verify(self, access_key: str, secret_key: str) -> Account | None:
        probe = Account(access_key, secret_key, False)
        ref = self.settings.clusters[0]
        async with Admin(namesrv_addr=ref.namesrv_addr, access_key=access_key,
                         secret_key=secret_key) as admin:
            try:
                addrs = await admin.master_addrs()
                if not addrs:
                    return None
                await admin.broker_status(addrs[0])
            except (MQClientError, ValueError):
                return None
            try:
                await admin.get_broker_config(addrs[0])
            except (MQClientError, ValueError):
                return probe
        return Account(access_key, secret_key, True)


def session_of(dash: Dashboard, request: Request) -> tuple[Session, bool]:
    now = time.monotonic()
    s = dash.sessions.get(request.cookies.get(COOKIE), now)
    if s is not None:
        return s, False
    return dash.sessions.new(now), True


def with_cookie(resp: Response, session: Session) -> Response:
    resp.set_cookie(COOKIE, session.sid, httponly=True, samesite="strict", path="/")
    return resp
