"""The gRPC port's ACL decision (proxy/auth.py), pure: the SDKs' signature read and checked,
the clock skew bound (UTC or the proxy's local time), and which resources each call needs;
and the header-block bound of the frame guard (proxy/grpc_wire.py)."""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time

import pytest

from rmq_cluster.cluster.acl.rules import parse_plain_acl
from rmq_cluster.proxy import auth
from rmq_cluster.proxy.grpc_wire import FrameLengthGuard
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

RULES = parse_plain_acl("""
globalWhiteRemoteAddresses: ["10.9.9.*"]
accounts:
  - {accessKey: proxyAdmin1, secretKey: proxyAdminSecret1, admin: true}
  - {accessKey: sdkWriter01, secretKey: sdkWriterSecret1, defaultTopicPerm: PUB|SUB,
     defaultGroupPerm: SUB}
  - {accessKey: sdkReader01, secretKey: sdkReaderSecret1, defaultTopicPerm: SUB,
     defaultGroupPerm: SUB, groupPerms: ["G_DENIED=DENY"]}
  - {accessKey: sdkLocal001, secretKey: sdkLocalSecret1, whiteRemoteAddress: 127.0.0.2,
     defaultTopicPerm: PUB}
""")
NOW = calendar.timegm((2026, 11, 29, 15, 10, 0))
CLOCK = auth.Clock(NOW)
PEER = "127.0.0.1:50000"


def _stamp(epoch: float) -> str:
    return time.strftime(auth.DATE_FORMAT, time.gmtime(epoch))


def _signed(ak: str, sk: str, epoch: float = NOW, *, upper: bool = False) -> dict[str, str]:
    date = _stamp(epoch)
    sig = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    sig = sig.upper() if upper else sig
    return {auth.DATE_TIME: date, auth.AUTHORIZATION:
            f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"}


def _send(topic: str) -> spb.SendMessageRequest:
    return spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])


def _admit(md: dict[str, str], method: str = "SendMessage", req: object = None,
           peer: str = PEER, clock: auth.Clock = CLOCK) -> str | None:
    return auth.admit(RULES, method, req if req is not None else _send("T"), md, peer, clock,
                      max_skew_s=900)


def test_the_right_signature_is_admitted_in_either_hex_case() -> None:
    assert _admit(_signed("sdkWriter01", "sdkWriterSecret1")) == "sdkWriter01"
    assert _admit(_signed("sdkWriter01", "sdkWriterSecret1", upper=True)) == "sdkWriter01"


@pytest.mark.parametrize("md, reason", [
    ({}, "authentication header is null"),
    (_signed("sdkWriter01", "wrongSecret99"), "Check signature failed for accessKey=sdkWriter01"),
    (_signed("nobody00001", "whatever0001"), "No acl config for nobody00001"),
    (_signed("sdkWriter01", "sdkWriterSecret1", NOW - 3600), "x-mq-date-time"),
    (_signed("sdkWriter01", "sdkWriterSecret1", NOW + 3600), "x-mq-date-time"),
    ({**_signed("sdkWriter01", "sdkWriterSecret1"), auth.DATE_TIME: "2026-11-29"},
     "x-mq-date-time"),
    ({auth.AUTHORIZATION: "Basic abc"}, "authentication header is incorrect"),
    ({auth.AUTHORIZATION: "MQv2-HMAC-SHA1 Credential=, Signature=" + "0" * 40},
     "No accessKey"),
    ({auth.AUTHORIZATION: "MQv2-HMAC-SHA1 " + "x" * 2000}, "too long"),
])
def test_bad_credentials_are_refused(md: dict[str, str], reason: str) -> None:
    with pytest.raises(auth.AuthDenied, match=reason):
        _admit(md)


def test_a_refusal_never_shows_the_secret() -> None:
    with pytest.raises(auth.AuthDenied) as info:
        _admit(_signed("sdkWriter01", "wrongSecret99"))
    assert "sdkWriterSecret1" not in str(info.value) and "wrongSecret99" not in str(info.value)


def test_local_wall_time_with_a_z_is_read_at_the_proxy_offset() -> None:
    """Both SDKs write local time with a literal Z: eight hours east is fresh only when the
    proxy's own offset is eight hours east too."""
    md = _signed("sdkWriter01", "sdkWriterSecret1", NOW + 8 * 3600)
    with pytest.raises(auth.AuthDenied):
        _admit(md)
    assert _admit(md, clock=auth.Clock(NOW, (0.0, 8 * 3600.0))) == "sdkWriter01"


def test_white_lists_skip_what_the_remoting_port_skips() -> None:
    assert _admit({}, peer="10.9.9.7:1234") is None  # global white list: nothing checked
    no_signature = {auth.AUTHORIZATION: "MQv2-HMAC-SHA1 Credential=sdkLocal001, "
                                        "SignedHeaders=x-mq-date-time, Signature=" + "0" * 40}
    assert _admit(no_signature, peer="127.0.0.2:1") == "sdkLocal001"
    with pytest.raises(auth.AuthDenied):
        _admit(no_signature)


def test_permissions_per_call() -> None:
    reader = _signed("sdkReader01", "sdkReaderSecret1")
    with pytest.raises(auth.AuthDenied, match="topic:T"):
        _admit(reader)  # SendMessage needs PUB
    # every message's topic, not only the first
    two = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="A")),
                                           pb.Message(topic=pb.Resource(name="B"))])
    assert auth.resources("SendMessage", two) == [("A", 4), ("B", 4)]
    receive = spb.ReceiveMessageRequest(group=pb.Resource(name="G"),
                                        message_queue=pb.MessageQueue(topic=pb.Resource(name="T")))
    assert _admit(reader, "ReceiveMessage", receive) == "sdkReader01"
    receive.group.name = "G_DENIED"
    with pytest.raises(auth.AuthDenied, match="group:G_DENIED"):
        _admit(reader, "ReceiveMessage", receive)
    ack = spb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"))
    assert auth.resources("AckMessage", ack) == [("%RETRY%G", 8), ("T", 8)]
    producer = spb.HeartbeatRequest(client_type=pb.PRODUCER)
    assert auth.resources("Heartbeat", producer) == []
    consumer = spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER, group=pb.Resource(name="G"))
    assert auth.resources("Heartbeat", consumer) == [("%RETRY%G", 8)]
    settings = spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(
        topics=[pb.Resource(name="P")])))
    assert auth.resources("Telemetry", settings) == [("P", 4)]
    assert _admit(_signed("proxyAdmin1", "proxyAdminSecret1"), "Telemetry", settings)


def test_a_header_block_over_its_limit_is_refused_from_its_frame_headers() -> None:
    guard = FrameLengthGuard(16384, header_limit=20000)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    headers = (16384).to_bytes(3, "big") + bytes([1, 0]) + (1).to_bytes(4, "big")
    assert guard.check(preface + headers + b"\0" * 16384)
    cont = (3000).to_bytes(3, "big") + bytes([9, 0]) + (1).to_bytes(4, "big")
    assert guard.check(cont + b"\0" * 3000)
    assert not guard.check(cont)
    assert "header block" in guard.reason
    # a block that ends resets the count
    guard = FrameLengthGuard(16384, header_limit=20000)
    ended = (16384).to_bytes(3, "big") + bytes([1, 4]) + (1).to_bytes(4, "big")
    assert guard.check(preface + ended + b"\0" * 16384 + ended + b"\0" * 16384)
