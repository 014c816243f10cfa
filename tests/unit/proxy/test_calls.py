"""proxy/calls.py: which failures make an idempotent call go out once more, and that the second
attempt keeps within the first one's deadline (Trio's autojump clock: no real waiting)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from rmq_cluster.client.errors import MQRemotingError, MQTimeoutError
from rmq_cluster.cluster.remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from rmq_cluster.proxy.calls import RECONNECT_POLL_S, idempotent_call, once_more


def _error(cls: type[MQRemotingError], cause: Exception) -> MQRemotingError:
    try:
        raise cls(str(cause)) from cause
    except MQRemotingError as exc:
        return exc


def lost() -> MQRemotingError:
    return _error(MQRemotingError, RemotingClosedError("read failed: connection reset"))


def refused() -> MQRemotingError:
    return _error(MQRemotingError, RemotingConnectError("cannot connect: refused"))


def timed_out() -> MQRemotingError:
    return _error(MQTimeoutError, RemotingTimeoutError("no answer"))


def scripted(*outcomes: Callable[[], MQRemotingError] | str
             ) -> tuple[Callable[[float], object], list[tuple[float, float]]]:
    """A call that raises (or returns) each outcome in turn; it records (when, time left)."""
    seen: list[tuple[float, float]] = []
    left = list(outcomes)

    async def call(timeout: float) -> str:
        seen.append((trio.current_time(), timeout))
        outcome = left.pop(0)
        if isinstance(outcome, str):
            return outcome
        raise outcome()

    return call, seen


async def test_a_call_lost_in_flight_goes_out_once_more_within_the_deadline(
    autojump_clock: trio.testing.MockClock
) -> None:
    call, seen = scripted(lost, refused, refused, "ok")
    start = trio.current_time()
    assert await idempotent_call(call, 5.0, "ack") == "ok"  # type: ignore[arg-type]
    # refused connects (nothing sent) tried again every RECONNECT_POLL_S, on what is left
    assert [round(t - start, 3) for t, _ in seen] == [0, 0, RECONNECT_POLL_S,
                                                       2 * RECONNECT_POLL_S]
    assert seen[-1][1] == pytest.approx(5.0 - 2 * RECONNECT_POLL_S)


async def test_lost_again_goes_out_again_and_never_after_a_timeout_or_a_refusal_first(
    autojump_clock: trio.testing.MockClock
) -> None:
    """A second attempt lost under the call too (a killed broker's listener completed the
    connect just before it closed, then reset it: seen in test_proxy_lost_connection) goes out
    again on the next connection, within the deadline; a lost call never ends in a loop."""
    call, seen = scripted(lost, lost, "ok")
    start = trio.current_time()
    assert await idempotent_call(call, 5.0, "ack") == "ok"  # type: ignore[arg-type]
    assert [round(t - start, 3) for t, _ in seen] == [0, 0, RECONNECT_POLL_S]
    call, seen = scripted(*[lost] * 1000)
    with pytest.raises(MQRemotingError, match="reset"):
        await idempotent_call(call, 2.0, "ack")  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(2.0 + RECONNECT_POLL_S)
    assert len(seen) <= 2 + 2.0 / RECONNECT_POLL_S
    for first in (timed_out, refused):  # the time is spent / the caller's own refusal
        call, seen = scripted(first, "never")
        with pytest.raises(MQRemotingError):
            await idempotent_call(call, 5.0, "ack")  # type: ignore[arg-type]
        assert len(seen) == 1


async def test_a_peer_refusing_until_the_deadline_gets_the_first_error(
    autojump_clock: trio.testing.MockClock
) -> None:
    call, seen = scripted(lost, *[refused] * 1000)
    start = trio.current_time()
    with pytest.raises(MQRemotingError, match="reset"):
        await idempotent_call(call, 2.0, "ack")  # type: ignore[arg-type]
    assert trio.current_time() - start == pytest.approx(2.0)
    assert len(seen) <= 2 + 2.0 / RECONNECT_POLL_S


async def test_the_wait_for_a_refusing_peer_ends_when_it_is_no_longer_wanted(
    autojump_clock: trio.testing.MockClock
) -> None:
    """A master that refuses while the route names another (a failover): the first error at
    once, for the caller to go to the new master."""
    call, seen = scripted(refused, refused, "never")
    wanted = iter([True, True, False])
    start = trio.current_time()
    with pytest.raises(MQRemotingError, match="reset"):
        await once_more(call, start + 5.0, lost(), "ack",  # type: ignore[arg-type]
                        lambda: next(wanted))
    assert len(seen) == 2 and trio.current_time() - start == pytest.approx(RECONNECT_POLL_S * 2)
