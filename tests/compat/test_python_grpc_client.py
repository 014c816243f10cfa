"""Apache's RocketMQ 5 Python SDK (``rocketmq-python-client``, unmodified, pinned from PyPI)
against ``rmq-cluster up single --acl`` with ``mqproxy`` in front of it (``up --proxy``), over
gRPC on TLS (the SDK's ``tls_enable=True``, trusting the cluster's self-signed certificate
through ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``), every call signed with an account of the
cluster's ``plain_acl.yml``; one cluster for the module:

* the producer starts (QueryRoute, Telemetry settings, Heartbeat) and sends normal messages,
  FIFO messages of two message groups and a timer message with a delivery timestamp; what the
  broker stored is read back over remoting by our client: every message with the SDK's message
  id, tag, keys and properties; each message group on one queue, in send order; the timer
  message not before its time. Then the SDK's SimpleConsumer receives the normal messages
  (ReceiveMessage on the broker's POP), changes one's invisible duration and acks each;
* SimpleConsumer redelivery: of three messages received with 3 s of invisible time, one is
  acked at once, one's invisible duration changed to 1 s and one left to its 3 s: both come
  back (delivery attempt 2, the same message id) and are acked then;
* transactions: commit, rollback, and two half messages left to the broker's check, which
  reaches the SDK's TransactionChecker over its Telemetry stream (EndTransaction from the check);
* three PushConsumers on a two-queue topic (QueryAssignment, then POP): every message consumed;
* FIFO order per message group with PushConsumers outnumbering the queues (issue 34): an
  orderly subscription group (``consumeMessageOrderly``), three consumers, two queues, eight
  message groups of fifty messages; the proxy tells the SDK ``fifo`` and pops orderly, so each
  group's messages are consumed in send order, each only after the one before it was consumed
  and acked, by whichever consumer; on ``up single`` (here) and ``2m-2s-async`` (a cluster of
  its own);
* ForwardMessageToDeadLetterQueue and RecallMessage, called on the wire (the SDK calls the first
  only for FIFO push consumption, and our broker has no recall);
* refusals: a wrong secret, an unknown access key and an account without PUB cannot send (the
  SDK reports the proxy's UNAUTHORIZED, 40100); ``rmq-cluster status`` shows the proxy on TLS.

The SDK is installed once into ``~/.cache/rmq-cluster-compat/pyclient-<version>`` (a venv of
its own: its grpcio/protobuf never meet ours); the probe (``pyclient/probe.py``) runs there,
and the checks of what it saw are shared with test_python_grpc_profiles.py (pysdk_testlib.py)
and, for both SDKs, with the Java ones (grpc_testlib.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.client import Admin
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.deploy.testing import (
    _create_topics,
    _in_thread,
    cli,
    create_topics,
    rmq_cluster,
)
from rmq_cluster.proxy import auth
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb
from rmq_cluster.proxy.tls import cert_files
from tests.integration.proxy.proxy_testlib import H2Client
from tests.integration.security.acl_cluster_testlib import ADMIN, acl_cluster

from .conftest import JAVA_DIR
from .grpc_testlib import (
    check_push,
    check_simple_consumer,
    check_stored,
    orderly_group,
    python_sdk,
    read_topic,
    running_proxy,
)
from .pysdk_testlib import (
    FIFO_PER_GROUP,
    FIFO_QUEUES,
    SDK_USER,
    Proxied,
    check_consumed,
    check_fifo,
    check_sdk_transactions,
    fifo_args,
    run_probe,
    sdk_env,
    sdk_log,
)

pytestmark = pytest.mark.slow

#: transaction checks within a second (transactionTimeOut, transactionCheckInterval)
PROFILE = JAVA_DIR / "compat-single.toml"
#: an account that may only subscribe (SDK_USER may publish and subscribe)
SDK_READER = Credentials("grpcReader1", "grpcReaderSecret1")
ACCOUNTS = [
    {"accessKey": SDK_USER.access_key, "secretKey": SDK_USER.secret_key,
     "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"},
    {"accessKey": SDK_READER.access_key, "secretKey": SDK_READER.secret_key,
     "defaultTopicPerm": "SUB", "defaultGroupPerm": "SUB"},
]


@pytest.fixture(scope="session")
def python_client() -> Path:
    """The Python of a venv holding the pinned SDK (built once, reused while it imports)."""
    return python_sdk()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    root = tmp_path_factory.mktemp("grpc-py")
    profile = tomllib.loads(PROFILE.read_text())
    props = {k: str(v) for k, v in profile.pop("broker_properties").items()}
    with acl_cluster(root, profile=profile, broker_properties=props,
                     accounts=ACCOUNTS) as cluster, \
            running_proxy(cluster.dir, root) as endpoint:
        yield Proxied(cluster.namesrv_addr, cluster.dir, endpoint, root / "home",
                      cert_files(cluster.dir).cert)


def _topics(proxied: Proxied, *kinds: str, queues: int = 8) -> dict[str, str]:
    topics = {kind: f"grpc_{kind}_{os.getpid()}" for kind in kinds}

    async def create() -> None:
        async with Admin(namesrv_addr=proxied.namesrv_addr, access_key=ADMIN.access_key,
                         secret_key=ADMIN.secret_key) as admin:
            await _create_topics(admin, list(topics.values()), queues=queues, order=False)

    _in_thread(create, timeout=60)
    return topics


def test_python_sdk_produces_and_a_simple_consumer_receives_and_acks_through_the_proxy(
    proxied: Proxied, python_client: Path
) -> None:
    topics = _topics(proxied, "normal", "fifo", "delay")
    events = run_probe(proxied, python_client, "produce",
                       topics["normal"], topics["fifo"], topics["delay"])
    check_stored(proxied.namesrv_addr, topics, events, ADMIN)
    group = f"grpc_simple_{os.getpid()}"
    consumed = run_probe(proxied, python_client, "consume",
                         topics["normal"], group, "3", "40")
    check_consumed(events, consumed)


def test_python_sdk_simple_consumer_changes_invisible_duration_and_gets_redeliveries(
    proxied: Proxied, python_client: Path
) -> None:
    topic = _topics(proxied, "simple")["simple"]
    check_simple_consumer(run_probe(proxied, python_client, "simple", topic,
                                    f"grpc_simple_rd_{os.getpid()}", "45"))


def test_python_sdk_transactions_commit_rollback_and_checks_over_telemetry(
    proxied: Proxied, python_client: Path
) -> None:
    topic = _topics(proxied, "tx")["tx"]
    check_sdk_transactions(run_probe(proxied, python_client, "transaction", topic, "40"), topic)


def test_python_sdk_push_consumers_outnumbering_the_queues_consume_everything(
    proxied: Proxied, python_client: Path
) -> None:
    topic = _topics(proxied, "push", queues=2)["push"]
    events = run_probe(proxied, python_client, "push", topic,
                       f"grpc_push_{os.getpid()}", "3", "12", "40")
    check_push(events)


def test_python_sdk_fifo_push_consumers_outnumbering_the_queues_keep_each_groups_order(
    proxied: Proxied, python_client: Path
) -> None:
    topic = _topics(proxied, "push_fifo", queues=FIFO_QUEUES)["push_fifo"]
    group = f"grpc_push_fifo_{os.getpid()}"
    orderly_group(proxied.namesrv_addr, group, ADMIN)
    check_fifo(run_probe(proxied, python_client, *fifo_args(topic, group)))


def test_python_sdk_fifo_push_consumers_keep_each_groups_order_on_2m_2s_async(
    python_client: Path, tmp_path: Path
) -> None:
    """The same on two broker groups: one queue on each master (two in all), three consumers
    (each is assigned both brokers' queues), a quarter as many messages per group (the
    cluster's six processes cost the time)."""
    with rmq_cluster("2m-2s-async", directory=tmp_path / "cluster") as cluster, \
            running_proxy(cluster.dir, tmp_path) as endpoint:
        proxied = Proxied(cluster.namesrv_addr, cluster.dir, endpoint, tmp_path / "home",
                          cert_files(cluster.dir).cert)
        topic = f"grpc_push_fifo2_{os.getpid()}"
        create_topics(cluster.namesrv_addr, [topic], queues=FIFO_QUEUES // 2)
        group = f"grpc_push_fifo2_{os.getpid()}"
        orderly_group(cluster.namesrv_addr, group)
        per_group = FIFO_PER_GROUP // 4
        check_fifo(run_probe(proxied, python_client, *fifo_args(topic, group, per_group)),
                   per_group)


def _receive_one(client: H2Client, topic: str, group: str) -> pb.Message:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), batch_size=1, auto_renew=False,
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1,
                                      broker=pb.Broker(name="broker-a")),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"))
    req.long_polling_timeout.FromSeconds(5)
    req.invisible_duration.FromSeconds(30)
    answers, trailers = client.call("ReceiveMessage", req.SerializeToString())
    assert trailers["grpc-status"] == "0", trailers
    msgs = [r.message for r in map(spb.ReceiveMessageResponse.FromString, answers)
            if r.HasField("message")]
    assert len(msgs) == 1, answers
    return msgs[0]


def test_forward_to_dead_letter_queue_and_recall_on_the_wire(proxied: Proxied) -> None:
    """ForwardMessageToDeadLetterQueue puts the received message into ``%DLQ%<group>`` at once
    and acks it; RecallMessage is answered NOT_IMPLEMENTED (no recall in our broker), as
    Apache's proxy answers when its broker does not know the request."""
    topic = _topics(proxied, "dlq", queues=1)["dlq"]
    group = f"grpc_dlq_{os.getpid()}"
    client = H2Client(int(proxied.endpoint.rpartition(":")[2]), cert=proxied.cert,
                      metadata=_signed(ADMIN))
    try:
        msg = pb.Message(topic=pb.Resource(name=topic), body=b"to the DLQ")
        msg.system_properties.message_id = "0102FC00000001000000000000000000D1"
        [answer], _ = client.call("SendMessage",
                                  spb.SendMessageRequest(messages=[msg]).SerializeToString())
        assert spb.SendMessageResponse.FromString(answer).status.code == pb.OK
        got = _receive_one(client, topic, group)
        fwd = spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=topic),
            receipt_handle=got.system_properties.receipt_handle,
            message_id=got.system_properties.message_id, delivery_attempt=1,
            max_delivery_attempts=16)
        [answer], _ = client.call("ForwardMessageToDeadLetterQueue", fwd.SerializeToString())
        status = spb.ForwardMessageToDeadLetterQueueResponse.FromString(answer).status
        assert status.code == pb.OK, status
        recall = spb.RecallMessageRequest(topic=pb.Resource(name=topic), recall_handle="x")
        [answer], _ = client.call("RecallMessage", recall.SerializeToString())
        assert spb.RecallMessageResponse.FromString(answer).status.code == pb.NOT_IMPLEMENTED
    finally:
        client.close()
    [dead] = read_topic(proxied.namesrv_addr, f"%DLQ%{group}", 1, ADMIN)
    assert dead.body == b"to the DLQ"
    assert dead.msg_id == msg.system_properties.message_id


def _signed(who: Credentials) -> tuple[tuple[str, str], ...]:
    """The 5.x signature the SDKs send with each call."""
    date = time.strftime(auth.DATE_FORMAT, time.gmtime())
    sig = hmac.new(who.secret_key.encode(), date.encode(), hashlib.sha1).hexdigest()
    return ((auth.DATE_TIME, date), (auth.AUTHORIZATION, f"{auth.ALGORITHM} Credential="
            f"{who.access_key}, SignedHeaders=x-mq-date-time, Signature={sig}"))


def test_wrong_credentials_and_missing_permissions_are_refused_and_status_shows_the_proxy(
    proxied: Proxied, python_client: Path
) -> None:
    """A wrong secret, an unknown key and an account without PUB: the SDK cannot send, and
    what it reports (its exception, or its log when the refusal came at startup: "failed to
    fetch topic route") carries the proxy's Code UNAUTHORIZED (40100) and remark."""
    topic = _topics(proxied, "refused")["refused"]
    log = sdk_log(proxied.home)
    before = log.stat().st_size if log.exists() else 0
    refused = [Credentials(SDK_USER.access_key, "notTheSecret99"),
               Credentials("grpcNobody1", "grpcNobodySecret1"), SDK_READER]
    env = {**sdk_env(proxied.cert, SDK_USER),
           "PROBE_ACCOUNTS": json.dumps([[c.access_key, c.secret_key] for c in refused])}
    events = run_probe(proxied, python_client, "try_send", topic, env=env)
    outcomes = [e for e in events if e["event"] in ("sent", "refused")]
    assert [e["event"] for e in outcomes] == ["refused"] * 3, events
    said = log.read_bytes()[before:].decode(errors="replace")
    said += "".join(e["error"] for e in outcomes)
    for remark in (f"Check signature failed for accessKey={SDK_USER.access_key}",
                   "No acl config for grpcNobody1", f"No default permission for topic:{topic}"):
        assert f"{pb.UNAUTHORIZED}, {remark}" in said, (remark, said[-3000:])
    assert (proxied.cert.with_suffix(".key").stat().st_mode & 0o777) == 0o600
    done = cli("status", "--dir", str(proxied.dir), "--json")
    assert done.returncode == 0, done.stderr
    [proxy] = json.loads(done.stdout)["proxies"]
    assert (proxy["address"], proxy["tls"], proxy["state"]) == (proxied.endpoint, True, "up")
    text = cli("status", "--dir", str(proxied.dir))
    assert text.returncode == 0 and proxied.endpoint in text.stdout and "TLS" in text.stdout

