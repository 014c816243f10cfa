"""Issue 34: an AckMessage and a ChangeInvisibleDuration whose remoting connection to the broker
is reset while they are under way (the broker killed and restarted at its address) are made once
more by ``mqproxy`` on a new connection, within their deadline, and succeed; they were answered
INTERNAL_ERROR. Real processes: ``rmq-cluster up single``, a ``mqproxy`` process, a plain HTTP/2
client. The broker is frozen (SIGSTOP) so that both requests are in its socket's receive queue,
unread, when it is killed: the kernel resets the connection with them in flight."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rmq_cluster.deploy.testing import cli, create_topics, pid_running, rmq_cluster
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import H2Client, LiveProxy, live_proxy

TOPIC, GROUP = "LostConnT", "LostConnG"
BROKER = "broker-a"
#: the proxy's deadline for a call to the cluster: room for the broker's restart on a loaded
#: machine (the retry waits for it within the deadline)
CALL_TIMEOUT_S = 45.0
#: how long the test waits for the requests to reach the frozen broker's socket
QUEUED_WAIT_S = 10.0
POLL_S = 0.02


def _send(client: H2Client, body: bytes) -> None:
    msg = pb.Message(topic=pb.Resource(name=TOPIC), body=body)
    msg.system_properties.message_id = f"0102FC0000000100000000000000000{len(body):03X}"
    [answer], _ = client.call("SendMessage",
                              spb.SendMessageRequest(messages=[msg]).SerializeToString())
    assert spb.SendMessageResponse.FromString(answer).status.code == pb.OK


def _receive(client: H2Client, want: int) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP), batch_size=want, auto_renew=False,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1,
                                      broker=pb.Broker(name=BROKER)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.long_polling_timeout.FromSeconds(5)
    req.invisible_duration.FromSeconds(60)
    got: list[pb.Message] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        answers, trailers = client.call("ReceiveMessage", req.SerializeToString())
        assert trailers["grpc-status"] == "0", trailers
        got += [r.message for r in map(spb.ReceiveMessageResponse.FromString, answers)
                if r.HasField("message")]
    assert len(got) == want, got
    return got


def _queued_bytes(port: int) -> int:
    """Bytes waiting unread in the receive queues of the connections accepted on ``port``
    (the frozen broker's: /proc/net/tcp, established sockets whose local port it is)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == "01" and int(local.rpartition(":")[2], 16) == port:
                total += int(queues.partition(":")[2], 16)
    return total


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g}s"
        time.sleep(POLL_S)  # polled until the condition holds, within the deadline


def _ack(proxy: LiveProxy, m: pb.Message) -> pb.Status:
    client = proxy.client()
    try:
        req = spb.AckMessageRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                         receipt_handle=m.system_properties.receipt_handle)])
        [answer], _ = client.call("AckMessage", req.SerializeToString(),
                                  timeout=CALL_TIMEOUT_S + 15)
        return spb.AckMessageResponse.FromString(answer).status
    finally:
        client.close()


def _change(proxy: LiveProxy, m: pb.Message) -> pb.Status:
    client = proxy.client()
    try:
        req = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC),
            receipt_handle=m.system_properties.receipt_handle,
            message_id=m.system_properties.message_id)
        req.invisible_duration.FromSeconds(1)
        [answer], _ = client.call("ChangeInvisibleDuration", req.SerializeToString(),
                                  timeout=CALL_TIMEOUT_S + 15)
        return spb.ChangeInvisibleDurationResponse.FromString(answer).status
    finally:
        client.close()


def test_ack_and_change_invisible_in_flight_when_the_broker_restarts_succeed(
    tmp_path: Path
) -> None:
    with rmq_cluster("single", directory=tmp_path / "cluster") as cluster, \
            live_proxy(tmp_path, cluster.namesrv_addr,
                       extra=["--call-timeout", str(CALL_TIMEOUT_S)]) as proxy:
        create_topics(cluster.namesrv_addr, [TOPIC], queues=1)
        client = proxy.client()
        try:
            for body in (b"acked", b"changed"):
                _send(client, body)
            msgs = sorted(_receive(client, 2), key=lambda m: m.body)  # b"acked" first
        finally:
            client.close()
        port = int(cluster.broker_addrs()[BROKER].rpartition(":")[2])
        pid = cluster.pids()[BROKER]
        os.kill(pid, signal.SIGSTOP)
        try:
            with ThreadPoolExecutor(2) as pool:
                # each request written to the broker's socket, unread: in flight
                calls: list[Future[pb.Status]] = []
                for call, m in ((_ack, msgs[0]), (_change, msgs[1])):
                    before = _queued_bytes(port)
                    calls.append(pool.submit(call, proxy, m))
                    _wait(lambda b=before: _queued_bytes(port) > b,  # type: ignore[misc]
                          QUEUED_WAIT_S, "request queued at the broker")
                assert not any(c.done() for c in calls), [c.result() for c in calls]
                os.kill(pid, signal.SIGKILL)  # unread data: the kernel resets the connection
                _wait(lambda: not pid_running(pid), QUEUED_WAIT_S, "broker exit")
                again = cli("restart", BROKER, "--dir", str(cluster.dir))
                assert again.returncode == 0, again.stderr
                ack_status, change_status = (c.result() for c in calls)
        finally:
            if pid_running(pid):
                os.kill(pid, signal.SIGKILL)
        assert (ack_status.code, change_status.code) == (pb.OK, pb.OK), (ack_status,
                                                                         change_status)
