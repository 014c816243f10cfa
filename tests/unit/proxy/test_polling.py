"""A receive's long-polling time from its client's deadline, as Apache's proxy (5.3.1,
``ReceiveMessageActivity``) computes it, and the ``grpc-timeout`` header it is read from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.proxy.grpc_wire import GrpcWireError, parse_timeout
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.polling import PollingLimits, polling_ms, refusal_code

APACHE = PollingLimits(min_ms=5_000, max_ms=20_000)


@pytest.mark.parametrize(("requested", "left", "want"), [
    (20_000, 23_000, 20_000),   # an SDK's PushConsumer: 20 s asked, 3 s request timeout on top
    (30_000, 60_000, 20_000),   # capped at the longest
    (2_000, 12_000, 5_000),     # raised to the shortest (the Java SDK's 2 s await, 10 s timeout)
    (30_000, 8_000, 8_000),     # cut to the time left, which is at least the shortest
    (2_000, 4_999, None),       # the Python SDK's await 2 s + 3 s timeout: refused
    (None, 23_000, 20_000),     # no long poll asked: the time left less half the request timeout
    (None, 9_000, 7_500),
    (None, 3_000, None),
    (5_000, 5_000, 5_000),
    (0, 4_000, None),
])
def test_polling_time_as_apaches_proxy(requested: int | None, left: int, want: int | None
                                       ) -> None:
    assert polling_ms(APACHE, requested_ms=requested, time_left_ms=left,
                      request_timeout_ms=3_000) == want


def test_without_a_deadline_only_the_limits_bound_it() -> None:
    assert polling_ms(APACHE, requested_ms=1_000, time_left_ms=None, request_timeout_ms=0) == 5_000
    assert polling_ms(APACHE, requested_ms=60_000, time_left_ms=None,
                      request_timeout_ms=0) == 20_000
    assert polling_ms(APACHE, requested_ms=None, time_left_ms=None, request_timeout_ms=0) == 20_000


@given(st.none() | st.integers(-10**9, 10**9), st.none() | st.integers(0, 10**9),
       st.integers(0, 10**6))
def test_a_poll_never_outlives_the_deadline_nor_leaves_the_limits(
        requested: int | None, left: int | None, request_timeout: int) -> None:
    poll = polling_ms(APACHE, requested_ms=requested, time_left_ms=left,
                      request_timeout_ms=request_timeout)
    if poll is None:
        assert left is not None and left < APACHE.min_ms
        return
    assert APACHE.min_ms <= poll <= APACHE.max_ms
    assert left is None or poll <= left


@pytest.mark.parametrize(("version", "code"), [
    ("5.1.2", pb.ILLEGAL_POLLING_TIME), ("5.0.7", pb.ILLEGAL_POLLING_TIME),
    ("5.0.3", pb.ILLEGAL_POLLING_TIME), ("5.0.2", pb.BAD_REQUEST), ("5.0.0", pb.BAD_REQUEST),
    ("", pb.BAD_REQUEST),
    ("5.0.10", pb.BAD_REQUEST),  # Java's String.compareTo, as Apache's proxy compares
])
def test_the_refusal_code_follows_the_client_version(version: str, code: int) -> None:
    assert refusal_code(version) == code


@pytest.mark.parametrize(("text", "seconds"), [
    ("4S", 4.0), ("2500m", 2.5), ("1H", 3600.0), ("2M", 120.0), ("99999999u", 99.999999),
    ("5000000n", 0.005), ("0S", 0.0),
])
def test_grpc_timeout_values(text: str, seconds: float) -> None:
    assert parse_timeout(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "S", "4", "4s", "123456789S", "-1S", "1.5S", " 4S",
                                  "４S", "4SS"])
def test_malformed_grpc_timeouts_are_refused(text: str) -> None:
    with pytest.raises(GrpcWireError):
        parse_timeout(text)
