"""A remoting call of the proxy's that lost its connection with the request under way (the
broker restarted, the connection was reset or dropped) is made once more on a new connection,
when making it twice does no harm: an ack, a change of invisible time, a route or config read.
Sends, pops and ends of transactions never are (the first may have been carried out: a second
would store or pop again). The second attempt is bounded by the first one's deadline: while the
peer refuses connections (a broker restarting at its address), connecting is tried again every
``RECONNECT_POLL_S`` until that deadline, and the request goes out again on the first connection
that opens, and again on the next if that one too is lost under it (a killed broker's listening
socket can complete a connect just before it closes, then reset it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from ..client.errors import MQRemotingError, MQTimeoutError
from ..client.instance import ClientInstance
from ..cluster.logging import get_logger
from ..cluster.protocol.route import TopicRouteData
from ..cluster.remoting.errors import RemotingClosedError, RemotingConnectError

log = get_logger(node="proxy", component="calls")
T = TypeVar("T")
#: how often a peer that refuses connections is tried again, within the call's deadline
RECONNECT_POLL_S: Final = 0.1


def lost_in_flight(exc: BaseException) -> bool:
    """The call's connection closed before its answer came (not a timeout: that one's time
    is spent)."""
    return (isinstance(exc, MQRemotingError) and not isinstance(exc, MQTimeoutError)
            and isinstance(exc.__cause__, RemotingClosedError))


def _refused(exc: BaseException) -> bool:
    """No connection could be made: nothing was sent."""
    return isinstance(exc, MQRemotingError) and isinstance(exc.__cause__, RemotingConnectError)


async def idempotent_call(call: Callable[[float], Awaitable[T]], timeout_s: float,
                          what: str) -> T:
    """``call(seconds left)``, made once more when its connection was lost under it, within
    ``timeout_s`` from now in all; the first attempt's error when the second cannot be made
    in time."""
    deadline = trio.current_time() + timeout_s
    try:
        return await call(timeout_s)
    except MQRemotingError as exc:
        if not lost_in_flight(exc):
            raise
        return await once_more(call, deadline, exc, what)


async def once_more(call: Callable[[float], Awaitable[T]], deadline: float,
                    first: MQRemotingError, what: str,
                    still_wanted: Callable[[], bool] = lambda: True) -> T:
    """The second attempt of a call lost in flight (``first``): sent on the first new
    connection that opens before ``deadline`` (and on the next, if that one is lost under it
    too); ``first`` is raised when none does, or when ``still_wanted()`` turns false while
    the peer refuses (another master took its place)."""
    log.info("connection lost under a call: once more on a new connection", call=what,
             error=str(first)[:200])
    while True:
        left = deadline - trio.current_time()
        if left <= 0 or not still_wanted():
            raise first
        try:
            with trio.move_on_at(deadline):
                return await call(left)
            raise first
        except MQRemotingError as exc:
            if not (_refused(exc) or lost_in_flight(exc)):
                raise
        # the peer is not accepting yet (restarting): nothing was sent; or the new connection
        # was reset under the call too (a dying peer's listener still completed the connect
        # before it closed): again shortly
        await trio.sleep(min(RECONNECT_POLL_S, max(0.0, deadline - trio.current_time())))


async def fetch_route(instance: ClientInstance, topic: str, timeout_s: float | None = None
                      ) -> TopicRouteData:
    """``topic``'s route from the NameServers (``ClientInstance.fetch_route``: the next
    NameServer after a failure), once more when the connection was lost under it, within
    ``timeout_s`` (default: the instance's call timeout)."""
    t = instance.config.call_timeout_s if timeout_s is None else timeout_s
    return await idempotent_call(lambda _left: instance.fetch_route(topic), t, "route")
