"""One exception hierarchy for the client: every error carries the RocketMQ response code (or
None when no response came) and the remark the peer sent."""

from __future__ import annotations


class MQClientError(Exception):
    """Base of every client error. ``code``: RocketMQ response code if a peer answered."""

    def __init__(
        self, message: str, *, code: int | None = None, remark: str | None = None,
        addr: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.remark = remark
        self.addr = addr


class MQBrokerError(MQClientError):
    """A broker or NameServer answered with a non-success code."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        super().__init__(
            f"CODE: {code} DESC: {remark or ''} (from {addr or '?'})",
            code=code, remark=remark, addr=addr,
        )


class MQRemotingError(MQClientError):
    """No answer: connect failure, timeout or closed connection (``code`` is None)."""


class MQTimeoutError(MQRemotingError):
    """A call got no response in time."""


class NoRouteError(MQClientError):
    """No route for a topic (or no writable/readable queue in it)."""


class ClientStateError(MQClientError):
    """The client is not running (not started, or closed)."""


class TransactionError(MQClientError):
    """A transactional send could not complete."""
