"""The errors a remoting call raises, and the error answers a connection sends (pure)."""

from __future__ import annotations

from typing import Final

from .codec import RemotingCommand
from .codes import FLAG_RESPONSE

#: RocketMQ's remark when its request executor rejects a request.
OVERLOAD_REMARK: Final = "[OVERLOAD]system busy, start flow control for a while"


class RemotingError(Exception):
    """Base of the errors a call can raise."""


class RemotingTimeoutError(RemotingError):
    """No response within the call's timeout."""


class RemotingConnectError(RemotingError):
    """The address could not be connected to."""


class RemotingClosedError(RemotingError):
    """The connection closed before the call completed."""


class RemotingUnsentError(RemotingClosedError):
    """The connection was found closed before the request went out: nothing reached the peer,
    so the call may be made again on a new connection (the pools do so once)."""


def error_response(request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    """Generic error answers are JSON whatever the request's serialize type (as RocketMQ does)."""
    return error_answer(request.opaque, code, remark)


def error_answer(opaque: int, code: int, remark: str) -> RemotingCommand:
    return RemotingCommand(code=int(code), opaque=opaque, flag=FLAG_RESPONSE, remark=remark)


def exception_remark(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
