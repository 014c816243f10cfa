"""mqadmin 4.9.8 and 5.3.1 (Apache's rocketmq-tools, unmodified) against Apache RocketMQ
4.9.7's own NameServer and Broker and against ours, booted from the same broker.conf
(tests/interop/oracle.py): the commands that print what the broker answers by key
(``clusterList``, ``brokerStatus``, ``getBrokerConfig``, ``brokerConsumeStats``) print every row
and column Apache's broker gives them, on ours too, and never ``null`` on ours (Apache's own
prints one: ``putMessageDistributeTime`` before its first put). Our extension keys add rows;
none is missing. (A 5.x broker is not booted here: its JVM alone takes longer than
this whole test on the 2-core machine; the 5.x tools are checked against 4.9.7, which they
support.)"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.client import ConsumeFromWhere, ConsumeResult, Message, ReceivedMessage
from rmq_cluster.client.sync import SyncAdmin, SyncProducer, SyncPushConsumer
from tests.interop import oracle

from .test_mqadmin import FAILED, NULL, OWN_NULL, jvm

pytestmark = pytest.mark.slow

CLUSTER = "InteropCluster"
#: a traced message consumed, and its trace records found, within this
TRACE_WAIT_S = 60.0


def _run(classpath: str, home: Path, ns: str, broker: str) -> dict[str, str]:
    commands = {
        "clusterList": ["clusterList", "-n", ns],
        "brokerStatus": ["brokerStatus", "-n", ns, "-b", broker],
        "getBrokerConfig": ["getBrokerConfig", "-n", ns, "-b", broker],
        "brokerConsumeStats": ["brokerConsumeStats", "-n", ns, "-b", broker],
    }
    script = "".join("\t".join(args) + "\n" for args in commands.values())
    done = subprocess.run(jvm(classpath, home, "AdminBatch"), input=script,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sections = dict(re.findall(r"@@BEGIN (\d+)\n(.*?)@@END \1\n", done.stdout, re.S))
    names = list(commands)
    return {names[int(i)]: text for i, text in sections.items()}


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, oracle.Cluster]]:
    """Apache's NameServer and Broker and ours, side by side, for every tools version."""
    root = tmp_path_factory.mktemp("mqadmin-vs")
    try:
        java_cp = oracle.java_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ's Java nodes are not available: {exc}", pytrace=False)
    with contextlib.ExitStack() as stack:
        yield {kind: stack.enter_context(oracle.running_cluster(
            kind, root / kind, cp=java_cp if kind == "java" else None))
            for kind in ("java", "ours")}


@pytest.fixture(scope="module")
def outputs(mqadmin_tools: tuple[str, str], clusters: dict[str, oracle.Cluster],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    version, classpath = mqadmin_tools
    home = tmp_path_factory.mktemp(f"mqadmin-home-{version}")
    return {kind: _run(classpath, home / kind, c.namesrv_addr, c.broker_addr)
            for kind, c in clusters.items()}


def _keys(text: str, sep: str) -> set[str]:
    return {ln.split(sep, 1)[0].strip() for ln in text.splitlines() if sep in ln}


def test_every_command_prints_what_apache_does_and_no_null(
    outputs: dict[str, dict[str, str]]
) -> None:
    java, ours = outputs["java"], outputs["ours"]
    for name in java:
        for kind, text in (("java", java[name]), ("ours", ours[name])):
            assert not FAILED.search(text), (kind, name, text[-2000:])
        # (Apache's own broker answers one null: putMessageDistributeTime before its first put)
        nulls = [ln for ln in ours[name].splitlines()
                 if NULL.search(ln) and not OWN_NULL.search(ln)]
        assert not nulls, (name, nulls[:5])
    # brokerStatus: "key : value" rows; getBrokerConfig: "key = value" rows
    assert _keys(java["brokerStatus"], " : ") - _keys(ours["brokerStatus"], " : ") == set()
    assert _keys(java["getBrokerConfig"], "=") - _keys(ours["getBrokerConfig"], "=") == set()
    # clusterList: the same header, and a row per broker with as many columns
    head = re.compile(r"^#.*$", re.M)
    assert head.findall(java["clusterList"]) == head.findall(ours["clusterList"])
    rows = {k: [ln.split() for ln in v["clusterList"].splitlines() if ln.startswith(CLUSTER)]
            for k, v in outputs.items()}
    assert [len(r) for r in rows["java"]] == [len(r) for r in rows["ours"]] == [len(
        rows["java"][0])]
    assert rows["java"][0][:3] == rows["ours"][0][:3]  # cluster, broker name, id
    assert head.findall(java["brokerConsumeStats"]) == head.findall(ours["brokerConsumeStats"])


# --------------------------------------------------------------------------- message traces


def _traced_round_trip(c: oracle.Cluster, tag: str) -> str:
    """Our producer and push consumer, both with ``enable_msg_trace``, through ``c``; the
    message's id once our own reader finds its Pub and SubAfter records."""
    topic = f"TraceVs{tag}"
    got = threading.Event()

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        got.set()
        return ConsumeResult.SUCCESS

    with SyncProducer(f"TracePG{tag}", namesrv_addr=c.namesrv_addr, enable_msg_trace=True) as p:
        sent = p.send(Message(topic, b"traced", tags="TagT", keys=f"tk-{tag}"))
    with SyncPushConsumer(f"TraceCG{tag}", listener, {topic: "*"},
                          namesrv_addr=c.namesrv_addr, enable_msg_trace=True,
                          consume_from=ConsumeFromWhere.FIRST_OFFSET):
        assert got.wait(TRACE_WAIT_S), "not consumed"
    with SyncAdmin(namesrv_addr=c.namesrv_addr) as admin:
        deadline = time.monotonic() + TRACE_WAIT_S
        while {v.kind.value for v in admin.query_msg_trace(sent.msg_id)} < {"Pub", "SubAfter"}:
            assert time.monotonic() < deadline, "trace records not found"
            time.sleep(0.1)  # polling a condition with a deadline
    return sent.msg_id


def test_apaches_mqadmin_reads_the_traces_our_client_writes(
    mqadmin_classpath: str, clusters: dict[str, oracle.Cluster],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Our client's traces, on Apache's broker and on ours, read by mqadmin 4.9.8's
    ``queryMsgTraceById``: a Pub row for our producer group and a Sub row for our consumer
    group, both successful."""
    home = tmp_path_factory.mktemp("mqadmin-trace-home")
    for kind, c in clusters.items():
        msg_id = _traced_round_trip(c, kind)
        done = subprocess.run(jvm(mqadmin_classpath, home, "AdminBatch"),
                              input=f"queryMsgTraceById\t-n\t{c.namesrv_addr}\t-i\t{msg_id}\n",
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        text = done.stdout
        assert not FAILED.search(text), (kind, text[-3000:])
        assert re.search(rf"^Pub +TracePG{kind} +127\.0\.0\.1 +\S+ \S+ +\d+ms +success",
                         text, re.M), (kind, text)
        assert re.search(rf"^Sub +TraceCG{kind} +127\.0\.0\.1 +\S+ \S+ +\d+ms +success",
                         text, re.M), (kind, text)
