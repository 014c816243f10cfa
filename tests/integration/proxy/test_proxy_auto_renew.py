"""The proxy renews the invisible time of what an ``auto_renew`` receive (a PushConsumer's) pops
until it is acked, as Apache's proxy (5.3.1) does: real processes (``rmq-cluster up single``,
two ``mqproxy`` processes with a 2 s ``defaultInvisibleTimeMills`` and a scan every 200 ms), a
plain HTTP/2 client.

* a message held past several invisible times is not received by another consumer of the
  group; the first one's ack with its ORIGINAL receipt handle (the proxy acks the newest one it
  renewed) ends it: it never comes back;
* a client that says it is going (NotifyClientTermination) has the message it held given back
  with 1 s (``invisibleTimeMillisWhenClear``), not left for its renewed minute;
* a client silent for ``channelExpiredTimeout`` (6 s here) is gone too.

The proxy renewed nothing: a message whose consumption outlasted the 60 s default turned visible
and was delivered again (here after 2 s)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator

import attrs
import pytest
from google.protobuf.message import Message as PbMessage

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import LiveProxy, live_proxy

pytestmark = pytest.mark.slow  # real processes, invisible times waited out: ~40 s

HOLD_T, GONE_T, SILENT_T = "RenewHoldT", "RenewGoneT", "RenewSilentT"
GROUP = "RenewG"
BROKER = "broker-a"
#: the proxies' default invisible time (what an auto_renew receive pops with)
INVISIBLE_MS = 2_000
#: the second proxy's channelExpiredTimeout
EXPIRY_MS = 6_000
#: both proxies: renew 1.5 s ahead, scan every 200 ms; receives long-poll 1 s
COMMON = ("--default-invisible-time-ms", str(INVISIBLE_MS), "--renew-ahead-time-ms", "1500",
          "--renew-schedule-period-ms", "200", "--min-long-polling-ms", "500",
          "--max-long-polling-ms", "1000", "--log-level", "info")
#: how long the first message is held: several invisible times
HOLD_S = 4 * INVISIBLE_MS / 1000
#: how long "never comes back" is watched: past the last renewed invisible time and the
#: broker's revive (every second)
WATCH_S = 3 * INVISIBLE_MS / 1000 + 2
ANSWER_WAIT_S = 30.0


@attrs.frozen
class Stack:
    cluster: RunningCluster
    #: renewals of 2 s each (several of them in a hold)
    short: LiveProxy
    #: Apache's renewals (60 s first), clients gone after 6 s of silence
    apache: LiveProxy


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("proxy-renew")
    (root / "short").mkdir()
    (root / "apache").mkdir()
    with rmq_cluster("single", directory=root / "cluster") as cluster, \
            live_proxy(root / "short", cluster.namesrv_addr,
                       extra=[*COMMON, "--renew-policy-ms", str(INVISIBLE_MS)]) as short, \
            live_proxy(root / "apache", cluster.namesrv_addr,
                       extra=[*COMMON, "--channel-expired-timeout-ms", str(EXPIRY_MS)]) as apache:
        create_topics(cluster.namesrv_addr, [HOLD_T, GONE_T, SILENT_T], queues=1)
        yield Stack(cluster, short, apache)


def _call(proxy: LiveProxy, client_id: str, method: str, req: PbMessage,
          timeout: str = "10S") -> list[bytes]:
    client = proxy.client([("x-mq-client-id", client_id)])
    try:
        answers, trailers = client.call(method, req.SerializeToString(),
                                        headers=(("grpc-timeout", timeout),))
    finally:
        client.close()
    assert trailers.get("grpc-status") == "0", trailers
    return answers


def _receive(proxy: LiveProxy, client_id: str, topic: str, *, auto_renew: bool
             ) -> list[pb.Message]:
    """One receive of up to one message (1 s long poll): a PushConsumer's (auto_renew, no
    invisible time) or a SimpleConsumer's (10 s)."""
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), batch_size=1, auto_renew=auto_renew,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      broker=pb.Broker(name=BROKER)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.long_polling_timeout.FromMilliseconds(1_000)
    if not auto_renew:
        req.invisible_duration.FromSeconds(10)
    replies = [spb.ReceiveMessageResponse.FromString(a)
               for a in _call(proxy, client_id, "ReceiveMessage", req)]
    return [r.message for r in replies if r.HasField("message")]


def _first(proxy: LiveProxy, client_id: str, topic: str, *, auto_renew: bool,
           within_s: float = ANSWER_WAIT_S) -> tuple[pb.Message | None, float]:
    """The first message a receiver gets within ``within_s`` (None: none), and when."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        got = _receive(proxy, client_id, topic, auto_renew=auto_renew)
        if got:
            return got[0], time.monotonic() - t0
    return None, time.monotonic() - t0


def _send(proxy: LiveProxy, topic: str, body: bytes) -> None:
    msg = pb.Message(topic=pb.Resource(name=topic), body=body)
    msg.system_properties.message_id = f"0102FC{zlib.crc32(body):026X}"
    msg.system_properties.message_type = pb.NORMAL
    [answer] = _call(proxy, "renew-producer", "SendMessage",
                     spb.SendMessageRequest(messages=[msg]))
    assert spb.SendMessageResponse.FromString(answer).status.code == pb.OK


def _held(proxy: LiveProxy, client_id: str, topic: str, body: bytes) -> pb.Message:
    _send(proxy, topic, body)
    m, _ = _first(proxy, client_id, topic, auto_renew=True)
    assert m is not None and m.body == body, m
    assert m.system_properties.invisible_duration.ToMilliseconds() == INVISIBLE_MS
    return m


def test_a_held_message_stays_invisible_and_an_ack_with_its_first_handle_ends_it(
        stack: Stack) -> None:
    m = _held(stack.short, "renew-a", HOLD_T, b"held 1")
    other, _ = _first(stack.short, "renew-b", HOLD_T, auto_renew=False, within_s=HOLD_S)
    assert other is None, "the message came back while its first receiver held it"
    ack = spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=pb.Resource(name=HOLD_T),
        entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)])
    [answer] = _call(stack.short, "renew-a", "AckMessage", ack)
    acked = spb.AckMessageResponse.FromString(answer)
    assert acked.status.code == pb.OK, acked
    assert acked.entries[0].receipt_handle == m.system_properties.receipt_handle
    again, _ = _first(stack.short, "renew-b", HOLD_T, auto_renew=False, within_s=WATCH_S)
    assert again is None, "an acked message came back"


def test_a_client_gone_has_its_message_given_back_in_a_second(stack: Stack) -> None:
    proxy = stack.apache
    _held(proxy, "renew-gone", GONE_T, b"gone 1")
    # renewed for a minute by now (first renewal 1.5 s before its 2 s end)
    other, _ = _first(proxy, "renew-b", GONE_T, auto_renew=False, within_s=2.0)
    assert other is None
    # a heartbeat just before: the client is not silent for the channel expiry (6 s) after
    beat = spb.HeartbeatRequest(group=pb.Resource(name=GROUP),
                                client_type=pb.PUSH_CONSUMER)
    [answer] = _call(proxy, "renew-gone", "Heartbeat", beat)
    assert spb.HeartbeatResponse.FromString(answer).status.code == pb.OK
    bye = spb.NotifyClientTerminationRequest(group=pb.Resource(name=GROUP))
    [answer] = _call(proxy, "renew-gone", "NotifyClientTermination", bye)
    assert spb.NotifyClientTerminationResponse.FromString(answer).status.code == pb.OK
    back, after_s = _first(proxy, "renew-b", GONE_T, auto_renew=False)
    assert back is not None and back.body == b"gone 1"
    # given back with 1 s, then revived into the retry topic (the broker's revive: ~1 s)
    assert 0.8 <= after_s < 4.0, after_s
    _ack(proxy, back)


def test_a_client_silent_past_the_channel_expiry_is_gone(stack: Stack) -> None:
    proxy = stack.apache
    _held(proxy, "renew-silent", SILENT_T, b"silent 1")
    t0 = time.monotonic()
    back, _ = _first(proxy, "renew-b", SILENT_T, auto_renew=False)
    after_s = time.monotonic() - t0
    assert back is not None and back.body == b"silent 1"
    assert EXPIRY_MS / 1000 - 1 <= after_s < EXPIRY_MS / 1000 + 8, after_s
    _ack(proxy, back)


def _ack(proxy: LiveProxy, m: pb.Message) -> None:
    ack = spb.AckMessageRequest(
        group=pb.Resource(name=GROUP), topic=m.topic,
        entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)])
    [answer] = _call(proxy, "renew-b", "AckMessage", ack)
    assert spb.AckMessageResponse.FromString(answer).status.code == pb.OK
