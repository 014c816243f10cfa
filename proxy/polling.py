"""How long a ReceiveMessage may long-poll, as Apache's proxy (5.3.1) decides it from the call's
deadline (docs/protocol/grpc.md, "A receive's long polling"). Pure: numbers in, a decision out."""

from __future__ import annotations

from typing import Final

import attrs

from .pb import definition_pb2 as pb

#: the first client version Apache's proxy answers ILLEGAL_POLLING_TIME (older ones, and a
#: client that names none, get BAD_REQUEST); compared as strings, as Java's ``compareTo`` does
ILLEGAL_POLLING_TIME_SINCE: Final = "5.0.3"


#: a client's request timeout when its Settings named none (the SDKs' default ``requestTimeout``)
DEFAULT_CLIENT_REQUEST_TIMEOUT_MS: Final = 3_000


@attrs.frozen
class ReceiveCall:
    """What a ReceiveMessage call says besides its request: the milliseconds left before its
    deadline (None: it set none), the client's version (``x-mq-client-version``), the request
    timeout its Settings named and the client's id (``x-mq-client-id``, "" when it sent none)."""

    time_left_ms: int | None = None
    client_version: str = ""
    request_timeout_ms: int = DEFAULT_CLIENT_REQUEST_TIMEOUT_MS
    client_id: str = ""


@attrs.frozen
class PollingLimits:
    """``grpcClientConsumerMinLongPollingTimeoutMillis`` and ``...MaxLongPollingTimeoutMillis``."""

    min_ms: int
    max_ms: int


def polling_ms(limits: PollingLimits, *, requested_ms: int | None, time_left_ms: int | None,
               request_timeout_ms: int) -> int | None:
    """The pop's long-polling time in milliseconds, or None: the time left before the client's
    deadline is too short for the shortest long poll (the receive is refused).

    ``requested_ms``: the request's ``long_polling_timeout`` (None: not set; then the time left
    less half the client's request timeout, ``request_timeout_ms``). Either is raised to
    ``min_ms``, then cut to ``max_ms``; past the time left it is cut to the time left, if that
    is ``min_ms`` at least. ``time_left_ms`` None: the call has no deadline (Apache's proxy
    fails such a receive on its missing deadline; here only the limits bound it)."""
    if requested_ms is not None:
        poll = requested_ms
    elif time_left_ms is not None:
        poll = time_left_ms - request_timeout_ms // 2
    else:
        poll = limits.max_ms
    poll = min(max(poll, limits.min_ms), limits.max_ms)
    if time_left_ms is None or poll <= time_left_ms:
        return poll
    return time_left_ms if time_left_ms >= limits.min_ms else None


def refusal_code(client_version: str) -> int:
    """The v2 Code a receive refused for want of time gets: ILLEGAL_POLLING_TIME, or
    BAD_REQUEST for a client older than 5.0.3 (or naming no version), which knows no such code."""
    if not client_version or client_version < ILLEGAL_POLLING_TIME_SINCE:
        return int(pb.BAD_REQUEST)
    return int(pb.ILLEGAL_POLLING_TIME)
