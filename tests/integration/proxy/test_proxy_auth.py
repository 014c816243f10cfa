"""mqproxy under ACL (``--acl plain_acl.yml``) over TLS, on real sockets: every RPC kind
(unary, server stream, the Telemetry stream) is refused with Code UNAUTHORIZED in its own
response when unsigned, signed with a wrong secret, with an unknown access key or a stale date,
or when the account lacks the permission (PUB to send, SUB on the group to receive); a right
signature goes through; the proxy refuses to start when the rules name no account for it; no
secret reaches its log. (No cluster: refusals happen before any remoting call.)"""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys
import time
from pathlib import Path

from rmq_cluster.cluster.acl.local import write_private
from rmq_cluster.cluster.acl.rules import render_plain_acl
from rmq_cluster.proxy import auth
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import LiveProxy, live_proxy

ACCOUNTS = [
    {"accessKey": "proxyAdmin1", "secretKey": "proxyAdminSecret1", "admin": True,
     "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB"},
    {"accessKey": "sdkWriter01", "secretKey": "sdkWriterSecret1",
     "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"},
    {"accessKey": "sdkReader01", "secretKey": "sdkReaderSecret1",
     "defaultTopicPerm": "SUB", "defaultGroupPerm": "DENY"},
]
SECRETS = [a["secretKey"] for a in ACCOUNTS]


def _signed(ak: str, sk: str, epoch: float | None = None) -> list[tuple[str, str]]:
    date = time.strftime(auth.DATE_FORMAT, time.gmtime(time.time() if epoch is None else epoch))
    sig = hmac.new(sk.encode(), date.encode(), hashlib.sha1).hexdigest()
    return [(auth.DATE_TIME, date), (auth.AUTHORIZATION,
            f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}")]


def _code(proxy: LiveProxy, metadata: list[tuple[str, str]], method: str, request: object,
          response: type) -> tuple[int, str]:
    client = proxy.client(metadata)
    try:
        answers, trailers = client.call(method, request.SerializeToString())  # type: ignore[attr-defined]
    finally:
        client.close()
    assert trailers["grpc-status"] == "0", trailers
    status = response.FromString(answers[0]).status
    return status.code, status.message


def test_the_grpc_port_admits_only_signed_permitted_calls(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write_private(acl, render_plain_acl(ACCOUNTS))
    with live_proxy(tmp_path, tls=True, extra=["--acl", str(acl)]) as proxy:
        beat = spb.HeartbeatRequest(client_type=pb.PRODUCER)
        writer = _signed("sdkWriter01", "sdkWriterSecret1")
        assert _code(proxy, writer, "Heartbeat", beat, spb.HeartbeatResponse)[0] == pb.OK
        refused = {
            "unsigned": [],
            "wrong secret": _signed("sdkWriter01", "notTheSecret1"),
            "unknown key": _signed("noSuchUser1", "whateverSecret"),
            "stale date": _signed("sdkWriter01", "sdkWriterSecret1", time.time() - 7200),
        }
        for why, md in refused.items():
            code, message = _code(proxy, md, "Heartbeat", beat, spb.HeartbeatResponse)
            assert code == pb.UNAUTHORIZED, (why, code, message)
        # the Telemetry stream and a server stream answer a refusal in their own messages
        settings = spb.TelemetryCommand(settings=pb.Settings(
            client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])))
        assert _code(proxy, refused["wrong secret"], "Telemetry", settings,
                     spb.TelemetryCommand)[0] == pb.UNAUTHORIZED
        reader = _signed("sdkReader01", "sdkReaderSecret1")
        receive = spb.ReceiveMessageRequest(
            group=pb.Resource(name="G"), message_queue=pb.MessageQueue(topic=pb.Resource(name="T")))
        code, message = _code(proxy, reader, "ReceiveMessage", receive, spb.ReceiveMessageResponse)
        assert (code, message) == (pb.UNAUTHORIZED, "No default permission for group:G")
        # an account without PUB cannot send; one with PUB gets past the ACL (and then meets
        # the missing cluster: any code but UNAUTHORIZED)
        msg = pb.Message(topic=pb.Resource(name="T"), body=b"x")
        msg.system_properties.message_id = "01"
        send = spb.SendMessageRequest(messages=[msg])
        code, message = _code(proxy, reader, "SendMessage", send, spb.SendMessageResponse)
        assert (code, message) == (pb.UNAUTHORIZED, "No default permission for topic:T")
        assert _code(proxy, writer, "SendMessage", send,
                     spb.SendMessageResponse)[0] != pb.UNAUTHORIZED
        assert proxy.alive
    log = (tmp_path / "proxy.err").read_text()
    assert "grpc call refused" in log
    assert not any(secret in log for secret in SECRETS)


def test_the_proxy_needs_an_account_of_its_own(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    write_private(acl, render_plain_acl(ACCOUNTS[1:]))  # no admin account
    done = subprocess.run(
        [sys.executable, "-m", "rmq_cluster.proxy", "-n", "127.0.0.1:1", "--grpc-port", "0",
         "--bind", "127.0.0.1", "--acl", str(acl)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done
    assert "no admin account" in done.stderr
