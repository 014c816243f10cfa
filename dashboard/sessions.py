"""Dashboard sessions: a random id in an HttpOnly, SameSite=Strict cookie, a CSRF token per
session, the account a login proved (kept in memory only, never rendered). Pure: the clock is
passed in."""

from __future__ import annotations

import hmac
import secrets
from collections import OrderedDict

import attrs

#: The session cookie's name.
COOKIE: str = "rmqdash"


@attrs.frozen
class Account:
    """An account a login proved against the cluster: ``admin`` when an admin-only read signed
    with it succeeded too."""

    access_key: str
    secret_key: str = attrs.field(repr=False)
    admin: bool


@attrs.define
class Session:
    sid: str
    csrf: str
    last_seen: float
    account: Account | None = None
    #: one line shown on the next page (the outcome of an action)
    flash: str | None = None

    def check_csrf(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf, token or "")

    def take_flash(self) -> str | None:
        msg, self.flash = self.flash, None
        return msg


class SessionStore:
    """At most ``limit`` sessions (the least recently seen goes first), each forgotten after
    ``idle_s`` without a request."""

    def __init__(self, limit: int, idle_s: float) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def get(self, sid: str | None, now: float) -> Session | None:
        if not sid:
            return None
        s = self._by_id.get(sid)
        if s is None:
            return None
        if now - s.last_seen > self.idle_s:
            del self._by_id[sid]
            return None
        s.last_seen = now
        self._by_id.move_to_end(sid)
        return s

    def new(self, now: float) -> Session:
        while len(self._by_id) >= self.limit:
            self._by_id.popitem(last=False)
        s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now)
        self._by_id[s.sid] = s
        return s

    def login(self, old: Session, account: Account, now: float) -> Session:
        """A fresh session id and CSRF token for the account (the old id is dropped)."""
        self._by_id.pop(old.sid, None)
        s = self.new(now)
        s.account = account
        return s

    def drop(self, sid: str) -> None:
        self._by_id.pop(sid, None)

    def __len__(self) -> int:
        return len(self._by_id)
