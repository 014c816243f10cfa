"""How long what a receive pops stays invisible, as Apache's proxy (5.3.1) checks it
(``GrpcValidator.validateInvisibleTime``; docs/protocol/grpc.md, "A receive's invisible time"):
a ReceiveMessage's ``invisible_duration`` must lie within [``minInvisibleTimeMillsForRecv``,
``maxInvisibleTimeMills``] unless it asks ``auto_renew`` (it then gets
``defaultInvisibleTimeMills``); a ChangeInvisibleDuration's within [0,
``maxInvisibleTimeMills``]. Anything else is refused with ILLEGAL_INVISIBLE_TIME. Pure."""

from __future__ import annotations

import attrs
from google.protobuf import duration_pb2

from .convert import ProxyError, duration_ms
from .pb import definition_pb2 as pb


@attrs.frozen
class InvisibleLimits:
    """``defaultInvisibleTimeMills``, ``minInvisibleTimeMillsForRecv`` and
    ``maxInvisibleTimeMills`` (0 or less: no upper bound), in milliseconds."""

    default_ms: int
    min_for_recv_ms: int
    max_ms: int


def _millis(asked: duration_pb2.Duration) -> int:
    ms = duration_ms(asked)
    if ms is None:
        raise ProxyError(pb.ILLEGAL_INVISIBLE_TIME, "the invisibleTime is not a valid duration")
    return ms


def _within(ms: int, min_ms: int, max_ms: int) -> int:
    if ms < min_ms:
        raise ProxyError(pb.ILLEGAL_INVISIBLE_TIME,
                         f"the invisibleTime is too small. min is {min_ms}")
    if 0 < max_ms < ms:
        raise ProxyError(pb.ILLEGAL_INVISIBLE_TIME,
                         f"the invisibleTime is too large. max is {max_ms}")
    return ms


def receive_invisible_ms(limits: InvisibleLimits, asked: duration_pb2.Duration, *,
                         auto_renew: bool) -> int:
    """The invisible time a ReceiveMessage pops with, in milliseconds; ProxyError
    ILLEGAL_INVISIBLE_TIME when it asks one out of the limits. A receive asking no invisible
    time asks 0 (refused unless the minimum is 0), as on Apache's proxy; one asking
    ``auto_renew`` gets ``default_ms``, whatever it asked, unless that is no valid Duration
    (Apache's proxy reads it first)."""
    ms = _millis(asked)
    if auto_renew:
        return limits.default_ms
    return _within(ms, limits.min_for_recv_ms, limits.max_ms)


def change_invisible_ms(limits: InvisibleLimits, asked: duration_pb2.Duration) -> int:
    """The invisible time a ChangeInvisibleDuration sets, in milliseconds: 0 (visible at once)
    up to ``max_ms``; ProxyError ILLEGAL_INVISIBLE_TIME otherwise."""
    return _within(_millis(asked), 0, limits.max_ms)
