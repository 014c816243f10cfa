"""The invisible time of a gRPC receive and of a change of it, checked as Apache's proxy (5.3.1,
``GrpcValidator.validateInvisibleTime``) checks it, and the protobuf Duration it is read from
(as protobuf-java's ``Durations.toMillis`` reads it). The proxy took any invisible time and
raised it to at least 1 s."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from google.protobuf.duration_pb2 import Duration
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.convert import (
    MAX_DURATION_NANOS,
    MAX_DURATION_SECONDS,
    ProxyError,
    duration_ms,
)
from rmq_cluster.proxy.invisible import (
    InvisibleLimits,
    change_invisible_ms,
    receive_invisible_ms,
)
from rmq_cluster.proxy.pb import definition_pb2 as pb

#: Apache's ProxyConfig defaults: defaultInvisibleTimeMills 60 s, minInvisibleTimeMillsForRecv
#: 10 s, maxInvisibleTimeMills 12 h
APACHE = InvisibleLimits(default_ms=60_000, min_for_recv_ms=10_000, max_ms=12 * 3600 * 1000)
HOURS_12 = 43_200_000


def _ms(ms: int) -> Duration:
    d = Duration()
    d.FromMilliseconds(ms)
    return d


def test_the_proxys_defaults_are_apaches() -> None:
    c = ProxyConfig()
    assert InvisibleLimits(c.default_invisible_time_ms, c.min_invisible_time_ms_for_recv,
                           c.max_invisible_time_ms) == APACHE


@pytest.mark.parametrize(("seconds", "nanos", "want"), [
    (0, 0, 0),
    (30, 0, 30_000),
    (1, 999_999_999, 1_999),                 # truncated, not rounded
    (0, -1, 0),                              # toward zero: -1 ns is 0 ms
    (-1, -500_000_000, -1_500),
    (MAX_DURATION_SECONDS, MAX_DURATION_NANOS, MAX_DURATION_SECONDS * 1000 + 999),
    (-MAX_DURATION_SECONDS, 0, -MAX_DURATION_SECONDS * 1000),
    (MAX_DURATION_SECONDS + 1, 0, None),     # past protobuf's range (about 10 000 years)
    (-MAX_DURATION_SECONDS - 1, 0, None),
    (2**63 - 1, 0, None),
    (0, 1_000_000_000, None),                # nanos past a second
    (0, -1_000_000_000, None),
    (1, -1, None),                           # seconds and nanos of opposite signs
    (-1, 1, None),
])
def test_a_duration_in_milliseconds_as_protobuf_java_reads_it(seconds: int, nanos: int,
                                                              want: int | None) -> None:
    assert duration_ms(Duration(seconds=seconds, nanos=nanos)) == want


@given(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1))
def test_any_duration_is_read_or_refused_never_raises(seconds: int, nanos: int) -> None:
    ms = duration_ms(Duration(seconds=seconds, nanos=nanos))
    valid = (abs(seconds) <= MAX_DURATION_SECONDS and abs(nanos) <= MAX_DURATION_NANOS
             and not (seconds < 0 < nanos or nanos < 0 < seconds))
    assert (ms is not None) == valid
    if ms is not None:  # the exact value, truncated toward zero
        assert ms == math.trunc(Fraction(seconds * 10**9 + nanos, 10**6))


@pytest.mark.parametrize("ms", [10_000, 30_000, HOURS_12])
def test_a_receive_within_the_limits_pops_with_what_it_asked(ms: int) -> None:
    assert receive_invisible_ms(APACHE, _ms(ms), auto_renew=False) == ms


@pytest.mark.parametrize(("asked", "why"), [
    (Duration(), "too small. min is 10000"),          # none asked: 0
    (_ms(9_999), "too small. min is 10000"),
    (_ms(3_000), "too small. min is 10000"),           # what the SDK tests ask: their own min
    (_ms(-1_000), "too small. min is 10000"),
    (_ms(HOURS_12 + 1), "too large. max is 43200000"),
    (Duration(seconds=MAX_DURATION_SECONDS), "too large. max is 43200000"),
    (Duration(seconds=1, nanos=-1), "not a valid duration"),
    (Duration(seconds=2**40), "not a valid duration"),
])
def test_a_receive_out_of_the_limits_is_refused(asked: Duration, why: str) -> None:
    with pytest.raises(ProxyError) as refused:
        receive_invisible_ms(APACHE, asked, auto_renew=False)
    assert refused.value.code == pb.ILLEGAL_INVISIBLE_TIME
    assert why in refused.value.message


@pytest.mark.parametrize("asked", [Duration(), _ms(1_000), _ms(HOURS_12 * 2)])
def test_a_receive_asking_auto_renew_gets_the_default_whatever_it_asked(asked: Duration
                                                                        ) -> None:
    """A PushConsumer's receive: auto_renew, no invisible time."""
    assert receive_invisible_ms(APACHE, asked, auto_renew=True) == 60_000


def test_auto_renew_does_not_excuse_a_duration_that_is_none() -> None:
    with pytest.raises(ProxyError) as refused:
        receive_invisible_ms(APACHE, Duration(seconds=-1, nanos=5), auto_renew=True)
    assert refused.value.code == pb.ILLEGAL_INVISIBLE_TIME


def test_settings_move_the_limits_and_a_max_of_zero_is_none() -> None:
    tests = InvisibleLimits(default_ms=30_000, min_for_recv_ms=1_000, max_ms=0)
    assert receive_invisible_ms(tests, _ms(3_000), auto_renew=False) == 3_000
    assert receive_invisible_ms(tests, _ms(HOURS_12 * 10), auto_renew=False) == HOURS_12 * 10
    assert receive_invisible_ms(tests, Duration(), auto_renew=True) == 30_000
    with pytest.raises(ProxyError):
        receive_invisible_ms(tests, _ms(999), auto_renew=False)


@pytest.mark.parametrize("ms", [0, 1, 1_000, 5_000, HOURS_12])
def test_a_change_may_ask_from_zero_to_the_max(ms: int) -> None:
    """0 makes the message visible at once; no receive minimum here (Apache checks [0, max])."""
    assert change_invisible_ms(APACHE, _ms(ms)) == ms


@pytest.mark.parametrize("asked", [_ms(-1), _ms(HOURS_12 + 1), Duration(seconds=0, nanos=-2**31),
                                   Duration(seconds=-(2**63))])
def test_a_change_out_of_the_limits_is_refused(asked: Duration) -> None:
    with pytest.raises(ProxyError) as refused:
        change_invisible_ms(APACHE, asked)
    assert refused.value.code == pb.ILLEGAL_INVISIBLE_TIME
