"""ReceiveMessage over real gRPC (a ``mqproxy`` process in front of ``rmq-cluster up single``, a
plain HTTP/2 client), as Apache's proxy (5.3.1) serves it:

* the long poll comes from the call's deadline (``grpc-timeout``) and the request's
  ``long_polling_timeout``: at least 5 s and at most 20 s
  (``grpcClientConsumer{Min,Max}LongPollingTimeoutMillis``), never past the deadline; a deadline
  leaving less than 5 s is refused at once with ILLEGAL_POLLING_TIME (BAD_REQUEST for a client
  older than 5.0.3). The proxy ignored the deadline and long-polled up to 30 s.
* a receive asking an invisible time below 10 s or past 12 h, or none, is refused with
  ILLEGAL_INVISIBLE_TIME (``minInvisibleTimeMillsForRecv``, ``maxInvisibleTimeMills``), after the
  long poll's and the names' checks and before anything is popped, unless it asks auto_renew
  (a PushConsumer's): that one pops with 60 s (``defaultInvisibleTimeMills``). A
  ChangeInvisibleDuration is refused below 0 or past 12 h, before its receipt handle is read.
  The proxy took any invisible time, raised to 1 s at least, and gave 30 s to a receive naming
  none.
* an orderly group's receive whose first lookup of the group's config fails (here the broker is
  frozen while the proxy asks: the read times out) pops nothing: it is refused, and the next
  receive, once the broker answers, pops orderly. The proxy took the failed lookup for "no such
  group" and popped unordered: the next orderly pop then handed out the second message while
  the first was still in flight.
* an orderly message received and left unacked is handed out again once its invisible time
  passes, its delivery attempt counting up (1, 2, 3: the broker's ``orderCountInfo``, as
  Apache's proxy reads it). The proxy showed the record's reconsume times + 1, always 1 for an
  orderly message: a FIFO consumer never counted a redelivery.
"""

from __future__ import annotations

import os
import signal
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import attrs
import pytest
from google.protobuf.duration_pb2 import Duration

from rmq_cluster.deploy.testing import RunningCluster, cli, create_topics, rmq_cluster
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import LiveProxy, live_proxy

pytestmark = pytest.mark.slow  # real processes; a 20 s long poll waited out: ~40 s

TOPIC, FIFO_TOPIC, REDELIVER_TOPIC = "RecvDeadlineT", "RecvLookupT", "RecvRedeliverT"
GROUP, ORDERLY, REDELIVER = "RecvDeadlineG", "RecvLookupOrderlyG", "RecvRedeliverOrderlyG"
BROKER = "broker-a"
#: the version the Python SDK 5.1.2 sends (``x-mq-client-version``)
SDK_VERSION = "5.1.2"
#: how long a test waits for an answer the proxy owes (its longest long poll is 20 s)
ANSWER_WAIT_S = 40.0
#: how long the frozen broker's group lookup may take to fail (its read timeout is 3 s)
LOOKUP_FAIL_WAIT_S = 20.0
POLL_S = 0.05
#: the invisible time a receive asks unless told otherwise
USUAL_INVISIBLE = Duration(seconds=30)


@attrs.frozen
class Stack:
    cluster: RunningCluster
    proxy: LiveProxy
    proxy_log: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("proxy-receive")
    with rmq_cluster("single", directory=root / "cluster") as cluster, \
            live_proxy(root, cluster.namesrv_addr, extra=["--log-level", "info"]) as proxy:
        create_topics(cluster.namesrv_addr, [TOPIC, FIFO_TOPIC, REDELIVER_TOPIC], queues=1)
        for orderly in (ORDERLY, REDELIVER):
            done = cli("updateSubGroup", "-n", cluster.namesrv_addr, "-c", "DefaultCluster",
                       "-g", orderly, "-o", "true")
            assert done.returncode == 0, done.stderr
        yield Stack(cluster, proxy, root / "proxy.err")


@attrs.frozen
class Received:
    code: int
    messages: list[pb.Message]
    elapsed_s: float


def _receive(proxy: LiveProxy, *, group: str = GROUP, topic: str = TOPIC,
             long_poll_ms: int | None, timeout: str, version: str = SDK_VERSION,
             batch: int = 32, attempt: str = "", invisible: Duration | None = USUAL_INVISIBLE,
             auto_renew: bool = False, long_poll: Duration | None = None) -> Received:
    """One ReceiveMessage call with ``grpc-timeout: timeout``, as an SDK makes it
    (``invisible``: its invisible_duration, None: unset; ``long_poll``: its
    long_polling_timeout, in place of ``long_poll_ms``)."""
    metadata = [("x-mq-client-id", f"recv-test-{attempt or 'any'}")]
    if version:
        metadata.append(("x-mq-client-version", version))
    client = proxy.client(metadata)
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=batch, auto_renew=auto_renew,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      broker=pb.Broker(name=BROKER)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    if invisible is not None:
        req.invisible_duration.CopyFrom(invisible)
    if long_poll_ms is not None:
        req.long_polling_timeout.FromMilliseconds(long_poll_ms)
    if long_poll is not None:
        req.long_polling_timeout.CopyFrom(long_poll)
    if attempt:
        req.attempt_id = attempt
    t0 = time.monotonic()
    try:
        answers, trailers = client.call("ReceiveMessage", req.SerializeToString(),
                                        headers=(("grpc-timeout", timeout),),
                                        timeout=ANSWER_WAIT_S)
    finally:
        client.close()
    elapsed = time.monotonic() - t0
    assert trailers.get("grpc-status") == "0", trailers
    replies = [spb.ReceiveMessageResponse.FromString(a) for a in answers]
    [status] = [r.status for r in replies if r.HasField("status")]
    return Received(status.code, [r.message for r in replies if r.HasField("message")], elapsed)


def _send(proxy: LiveProxy, topic: str, body: bytes, group: str = "") -> None:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_id = f"0102FC{zlib.crc32(body):026X}"  # one per body
    msg.system_properties.message_type = pb.NORMAL
    if group:
        msg.system_properties.message_group = group
        msg.system_properties.message_type = pb.FIFO
    client = proxy.client()
    try:
        [answer], _ = client.call("SendMessage",
                                  spb.SendMessageRequest(messages=[msg]).SerializeToString())
    finally:
        client.close()
    status = spb.SendMessageResponse.FromString(answer).status
    assert status.code == pb.OK, status


def _ack(proxy: LiveProxy, group: str, topic: str, m: pb.Message) -> None:
    client = proxy.client()
    try:
        req = spb.AckMessageRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                         receipt_handle=m.system_properties.receipt_handle)])
        [answer], _ = client.call("AckMessage", req.SerializeToString())
    finally:
        client.close()
    assert spb.AckMessageResponse.FromString(answer).status.code == pb.OK


def test_a_deadline_too_short_for_the_shortest_long_poll_is_refused_at_once(
        stack: Stack) -> None:
    """The Python SDK's SimpleConsumer with ``await_duration=2`` (3 s request timeout: a 5 s
    deadline): Apache's proxy refuses it, as the 5 s long poll would outlive the deadline."""
    got = _receive(stack.proxy, long_poll_ms=2_000, timeout="4900m")
    assert (got.code, got.messages) == (pb.ILLEGAL_POLLING_TIME, [])
    assert got.elapsed_s < 1.5, got  # refused, not long-polled
    # a client older than 5.0.3 (or naming no version) knows no ILLEGAL_POLLING_TIME
    for version in ("5.0.0", ""):
        old = _receive(stack.proxy, long_poll_ms=2_000, timeout="4S", version=version)
        assert old.code == pb.BAD_REQUEST, (version, old)


def test_the_long_poll_is_bounded_by_the_limits_and_the_deadline(stack: Stack) -> None:
    """Three empty receives at once: 30 s asked with a 60 s deadline polls 20 s (the longest);
    1 s asked polls 5 s (the shortest); 30 s asked with an 8 s deadline ends by the deadline."""
    with ThreadPoolExecutor(3) as pool:
        capped = pool.submit(_receive, stack.proxy, long_poll_ms=30_000, timeout="60S")
        raised = pool.submit(_receive, stack.proxy, long_poll_ms=1_000, timeout="30S")
        cut = pool.submit(_receive, stack.proxy, long_poll_ms=30_000, timeout="8S")
        capped_r, raised_r, cut_r = capped.result(), raised.result(), cut.result()
    for got in (capped_r, raised_r, cut_r):
        assert (got.code, got.messages) == (pb.MESSAGE_NOT_FOUND, []), got
    assert 19.0 <= capped_r.elapsed_s < 25.0, capped_r
    assert 4.5 <= raised_r.elapsed_s < 10.0, raised_r
    assert 6.0 <= cut_r.elapsed_s < 9.5, cut_r


def test_an_sdks_usual_receive_gets_a_message_sent_while_it_polls(stack: Stack) -> None:
    """A PushConsumer's receive (20 s long poll, 23 s deadline) is served as before."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_receive, stack.proxy, long_poll_ms=20_000, timeout="23S",
                              attempt="usual")
        _send(stack.proxy, TOPIC, b"usual 1")
        got = pending.result()
    assert got.code == pb.OK and [m.body for m in got.messages] == [b"usual 1"], got
    assert got.elapsed_s < 10.0, got
    _ack(stack.proxy, GROUP, TOPIC, got.messages[0])


def _change_invisible(proxy: LiveProxy, handle: str, invisible: Duration, *,
                      topic: str = TOPIC) -> spb.ChangeInvisibleDurationResponse:
    client = proxy.client()
    try:
        req = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=topic), receipt_handle=handle,
            invisible_duration=invisible, message_id="01")
        [answer], _ = client.call("ChangeInvisibleDuration", req.SerializeToString())
    finally:
        client.close()
    return spb.ChangeInvisibleDurationResponse.FromString(answer)


def _refused(got: Received) -> int:
    """The code of a receive refused at once: no message, no long poll."""
    assert not got.messages and got.elapsed_s < 1.5, got
    return got.code


#: Apache's proxy's maxInvisibleTimeMills (12 h) and minInvisibleTimeMillsForRecv (10 s)
MAX_INVISIBLE = Duration(seconds=12 * 3600)
MIN_INVISIBLE = Duration(seconds=10)


def test_a_receive_out_of_the_invisible_time_limits_is_refused_before_it_pops(
        stack: Stack) -> None:
    proxy = stack.proxy
    _send(proxy, TOPIC, b"invisible 1")
    just_under = Duration(seconds=9, nanos=999_000_000)
    just_over = Duration(seconds=12 * 3600, nanos=1_000_000)
    for asked in (just_under, just_over, None, Duration(seconds=3),
                  Duration(seconds=1, nanos=-1), Duration(seconds=10**12)):
        got = _receive(proxy, long_poll_ms=5_000, timeout="30S", invisible=asked)
        assert _refused(got) == pb.ILLEGAL_INVISIBLE_TIME, (asked, got)
    # checked after the long poll and the names, as Apache's proxy does
    assert _refused(_receive(proxy, long_poll_ms=2_000, timeout="4S",
                             invisible=just_under)) == pb.ILLEGAL_POLLING_TIME
    assert _refused(_receive(proxy, group="bad group!", long_poll_ms=5_000, timeout="30S",
                             invisible=just_under)) == pb.ILLEGAL_CONSUMER_GROUP
    assert _refused(_receive(proxy, long_poll_ms=None, timeout="30S",
                             long_poll=Duration(seconds=1, nanos=-1))) == pb.ILLEGAL_POLLING_TIME
    # nothing was popped: the least invisible time gets the message, and says so
    got = _receive(proxy, long_poll_ms=5_000, timeout="30S", invisible=MIN_INVISIBLE)
    assert got.code == pb.OK and [m.body for m in got.messages] == [b"invisible 1"], got
    assert got.messages[0].system_properties.invisible_duration == MIN_INVISIBLE
    handle = got.messages[0].system_properties.receipt_handle
    # a change past 12 h or below 0 is refused, whatever its handle; 12 h and 0 are not
    for asked in (just_over, Duration(nanos=-1_000_000)):
        for h in (handle, "not-a-handle"):
            code = _change_invisible(proxy, h, asked).status.code
            assert code == pb.ILLEGAL_INVISIBLE_TIME, (asked, h, code)
    assert _change_invisible(proxy, "x", just_over, topic="bad topic!").status.code == \
        pb.ILLEGAL_TOPIC  # the names first
    changed = _change_invisible(proxy, handle, MAX_INVISIBLE)
    assert changed.status.code == pb.OK, changed
    visible = _change_invisible(proxy, changed.receipt_handle, Duration())
    assert visible.status.code == pb.OK, visible
    # visible again at once (once the broker's revive puts it back); a PushConsumer's receive
    # (auto_renew, no invisible time) pops it with the default 60 s
    deadline = time.monotonic() + ANSWER_WAIT_S
    again = _receive(proxy, long_poll_ms=20_000, timeout="30S", invisible=None, auto_renew=True)
    while not again.messages and time.monotonic() < deadline:
        again = _receive(proxy, long_poll_ms=5_000, timeout="10S", invisible=None,
                         auto_renew=True)
    assert [m.body for m in again.messages] == [b"invisible 1"], again
    assert again.messages[0].system_properties.invisible_duration == Duration(seconds=60)
    _ack(proxy, GROUP, TOPIC, again.messages[0])


def _wait_for_log(path: Path, *needles: str) -> None:
    deadline = time.monotonic() + LOOKUP_FAIL_WAIT_S
    while not all(n in path.read_text() for n in needles):
        assert time.monotonic() < deadline, f"no {needles} in the proxy's log"
        time.sleep(POLL_S)  # polled until the line is there, within the deadline


def test_an_orderly_receive_whose_group_lookup_fails_pops_nothing(stack: Stack) -> None:
    proxy = stack.proxy
    for n in range(2):
        _send(proxy, FIFO_TOPIC, f"fifo {n}".encode(), group="g1")
    pid = stack.cluster.pids()[BROKER]
    os.kill(pid, signal.SIGSTOP)  # the proxy's first lookup of ORDERLY's config times out
    try:
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(_receive, proxy, group=ORDERLY, topic=FIFO_TOPIC,
                                long_poll_ms=5_000, timeout="30S", batch=1, attempt="first")
            _wait_for_log(stack.proxy_log, "group config unknown", ORDERLY)
            os.kill(pid, signal.SIGCONT)  # what the proxy sends next, the broker answers
            refused = first.result()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert refused.code != pb.OK and not refused.messages, refused
    assert refused.code == pb.PROXY_TIMEOUT, refused
    # the broker answers the lookup now: orderly, one batch of the queue in flight at a time
    got = _receive(proxy, group=ORDERLY, topic=FIFO_TOPIC, long_poll_ms=5_000, timeout="30S",
                   batch=1, attempt="second")
    assert [m.body for m in got.messages] == [b"fifo 0"], got
    blocked = _receive(proxy, group=ORDERLY, topic=FIFO_TOPIC, long_poll_ms=5_000,
                       timeout="30S", batch=1, attempt="third")
    assert (blocked.code, blocked.messages) == (pb.MESSAGE_NOT_FOUND, []), blocked
    _ack(proxy, ORDERLY, FIFO_TOPIC, got.messages[0])
    after = _receive(proxy, group=ORDERLY, topic=FIFO_TOPIC, long_poll_ms=5_000,
                     timeout="30S", batch=1, attempt="fourth")
    assert [m.body for m in after.messages] == [b"fifo 1"], after


#: the invisible time of the redelivery test's receives, and its proxy's least one
SHORT_INVISIBLE_MS = 1_000
SHORT_INVISIBLE = Duration(seconds=SHORT_INVISIBLE_MS // 1_000)


def _receive_when_visible(proxy: LiveProxy, name: str) -> pb.Message:
    """The one message of REDELIVER_TOPIC, received once the queue's batch in flight turned
    visible again (each receive a new attempt), within ANSWER_WAIT_S."""
    deadline = time.monotonic() + ANSWER_WAIT_S
    for n in range(1_000):
        got = _receive(proxy, group=REDELIVER, topic=REDELIVER_TOPIC, long_poll_ms=5_000,
                       timeout="30S", batch=1, attempt=f"{name}-{n}",
                       invisible=SHORT_INVISIBLE)
        if got.messages:
            [message] = got.messages
            return message
        assert got.code == pb.MESSAGE_NOT_FOUND, got
        assert time.monotonic() < deadline, f"{name}: no message within {ANSWER_WAIT_S} s"
    raise AssertionError(f"{name}: no message")


def test_an_orderly_messages_redeliveries_count_in_its_delivery_attempt(
        stack: Stack, tmp_path: Path) -> None:
    with live_proxy(tmp_path, stack.cluster.namesrv_addr,
                    extra=["--min-invisible-time-ms-for-recv", str(SHORT_INVISIBLE_MS)]) as proxy:
        _send(proxy, REDELIVER_TOPIC, b"again", group="g1")
        seen = [_receive_when_visible(proxy, f"delivery-{n}") for n in range(3)]
        assert [m.body for m in seen] == [b"again"] * 3
        assert {m.system_properties.message_type for m in seen} == {pb.FIFO}
        assert [m.system_properties.delivery_attempt for m in seen] == [1, 2, 3]
        _ack(proxy, REDELIVER, REDELIVER_TOPIC, seen[-1])
