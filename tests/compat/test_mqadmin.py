"""The real mqadmin: Apache's rocketmq-tools 4.9.8 and 5.3.1 (``MQAdminStartup``,
unmodified, from Maven Central), the same command matrix each, against a real rmq-cluster.
The commands run in one JVM (tests/compat/java/AdminBatch.java calls ``MQAdminStartup.main0``
once per command line and marks each command's output); ``sendMessage`` and ``clusterRT`` keep
process-wide state or loop, so they run in JVMs of their own. Every command's output is checked
for the fields it prints, and for ``null`` (a value the broker did not answer). A live producer
and push consumer (our Python client) give the connection and progress commands something to
show. mqadmin exits 0 even when a command fails, so a failure is read from its output."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.client.model import Message
from rmq_cluster.client.sync import SyncAdmin, SyncProducer, SyncPushConsumer
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

from .conftest import JAVA_DIR, JVM_OPTS

pytestmark = pytest.mark.slow

PROFILE = JAVA_DIR / "compat-single.toml"
#: mqadmin reads $ROCKETMQ_HOME/conf/logback_tools.xml (ours: warnings to stderr).
MQADMIN_HOME = JAVA_DIR / "mqadmin-home"
TOPIC, NEW_TOPIC, PG, CG, SUB_GROUP = "AdmT", "AdmNewT", "PG_ADM", "CG_ADM", "SubG_ADM"
#: mqadmin's sendMessage writes here, not to TOPIC: the module's cluster serves both mqadmin
#: versions (one after the other when the module runs alone or on one xdist worker), and TOPIC's
#: counts are what the other version's commands are checked against.
SEND_TOPIC = "AdmSendT"
COUNT = 6
WAIT_S = 60.0
FAILED = re.compile(r"command failed|Exception|@@THROWN")


def java() -> str:
    found = shutil.which("java")
    assert found, "java is needed for mqadmin (see conftest)"
    return found


def jvm(classpath: str, home: Path, main: str) -> list[str]:
    return [java(), *JVM_OPTS, f"-Drocketmq.home.dir={MQADMIN_HOME}", f"-Duser.home={home}",
            "-cp", classpath, main]


def wait_for(what: str, cond: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with rmq_cluster(str(PROFILE), directory=tmp_path_factory.mktemp("mqadmin-cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def live(cluster: RunningCluster) -> Iterator[dict[str, Any]]:
    """A producer and a push consumer of ours, online while the commands run."""
    ns = cluster.namesrv_addr
    got: list[Any] = []
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> None:
        with lock:
            got.extend(msgs)

    with SyncAdmin(namesrv_addr=ns) as admin:
        admin.update_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=2,
                           write_queue_nums=2)
        wait_for("the topic's route", lambda: _routed(admin, TOPIC))
        with SyncProducer(PG, namesrv_addr=ns) as producer, \
                SyncPushConsumer(CG, listener, {TOPIC: "*"}, namesrv_addr=ns):
            sent = [producer.send(Message(TOPIC, f"body-{i}".encode(), tags="TagA",
                                          keys=(f"key-{i}",))) for i in range(COUNT)]
            wait_for("the consumer to read everything", lambda: len(got) >= COUNT)
            wait_for("the consumer's offsets", lambda: _caught_up(admin, CG))
            yield {"sent": sent, "got": got, "admin": admin}


def _routed(admin: SyncAdmin, topic: str) -> bool:
    try:
        return bool(admin.topic_route(topic).queue_datas)
    except Exception:  # not there yet
        return False


def _caught_up(admin: SyncAdmin, group: str) -> bool:
    try:
        rows, _tps = admin.consumer_progress(group)
    except Exception:  # not there yet
        return False
    return bool(rows) and sum(r.diff for r in rows) == 0 and sum(
        r.broker_offset for r in rows) >= COUNT


@pytest.fixture(scope="module")
def out(mqadmin_tools: tuple[str, str], cluster: RunningCluster, live: dict[str, Any],
        tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """command name -> what it printed; every command once, in this order, in one JVM."""
    version, mqadmin_classpath = mqadmin_tools
    ns = cluster.namesrv_addr
    broker = cluster.broker_addrs()["broker-a"]
    first = live["sent"][0]
    # 5.x looks a message up by id within a topic (-t, required there; unknown to 4.9.8)
    by_id_topic = ["-t", TOPIC] if version.startswith("5.") else []
    commands = [
        ("clusterList", ["clusterList", "-n", ns]),
        ("updateTopic", ["updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", NEW_TOPIC,
                         "-r", "3", "-w", "3"]),
        ("topicRouteNew", ["topicRoute", "-n", ns, "-t", NEW_TOPIC]),
        ("topicList", ["topicList", "-n", ns]),
        ("topicRoute", ["topicRoute", "-n", ns, "-t", TOPIC]),
        ("topicStatus", ["topicStatus", "-n", ns, "-t", TOPIC]),
        ("deleteTopic", ["deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", NEW_TOPIC]),
        ("topicListAfterDelete", ["topicList", "-n", ns]),
        ("updateSubGroup", ["updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", SUB_GROUP,
                            "-r", "2", "-q", "5"]),
        ("consumerProgress", ["consumerProgress", "-n", ns, "-g", CG]),
        ("consumerConnection", ["consumerConnection", "-n", ns, "-g", CG]),
        ("producerConnection", ["producerConnection", "-n", ns, "-g", PG, "-t", TOPIC]),
        ("brokerStatus", ["brokerStatus", "-n", ns, "-b", broker]),
        ("brokerConsumeStats", ["brokerConsumeStats", "-n", ns, "-b", broker]),
        ("queryMsgById", ["queryMsgById", "-n", ns, "-i", first.offset_msg_id, *by_id_topic]),
        ("queryMsgByKey", ["queryMsgByKey", "-n", ns, "-t", TOPIC, "-k", "key-3"]),
        ("queryMsgByOffset", ["queryMsgByOffset", "-n", ns, "-t", TOPIC, "-b", "broker-a",
                              "-i", str(first.queue.queue_id), "-o", str(first.queue_offset)]),
        ("updateBrokerConfig", ["updateBrokerConfig", "-n", ns, "-b", broker,
                                "-k", "slaveReadEnable", "-v", "true"]),
        ("getBrokerConfig", ["getBrokerConfig", "-n", ns, "-b", broker]),
        ("statsAll", ["statsAll", "-n", ns]),
        ("consumeMessage", ["consumeMessage", "-n", ns, "-t", TOPIC, "-b", "broker-a",
                            "-i", str(first.queue.queue_id), "-o", "0", "-c", str(COUNT)]),
        ("resetOffsetByTime", ["resetOffsetByTime", "-n", ns, "-g", CG, "-t", TOPIC, "-s", "0"]),
        ("wipeWritePerm", ["wipeWritePerm", "-n", ns, "-b", "broker-a"]),
        ("topicRouteWiped", ["topicRoute", "-n", ns, "-t", TOPIC]),
        ("addWritePerm", ["addWritePerm", "-n", ns, "-b", "broker-a"]),
        ("topicRouteRestored", ["topicRoute", "-n", ns, "-t", TOPIC]),
    ]
    home = tmp_path_factory.mktemp("mqadmin-home")
    script = "".join("\t".join(args) + "\n" for _, args in commands)
    done = subprocess.run(jvm(mqadmin_classpath, home, "AdminBatch"), input=script,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    sections = re.findall(r"@@BEGIN (\d+)\n(.*?)@@END \1\n", done.stdout, re.S)
    assert len(sections) == len(commands), done.stdout[-3000:]
    result = {commands[int(i)][0]: text for i, text in sections}
    for name, text in result.items():
        if name != "queryMsgByOffset":  # it prints "WARN: No Consumer" lines, checked below
            assert not FAILED.search(text), (name, text[-2000:])
    # a value the broker does not answer prints as null (clusterList, brokerStatus, ...)
    nulls = {name: [ln for ln in text.splitlines() if NULL.search(ln) and not OWN_NULL.search(ln)]
             for name, text in result.items()}
    assert not any(nulls.values()), {k: v[:5] for k, v in nulls.items() if v}
    return result


#: A value mqadmin found no key for.
NULL = re.compile(r"(?<![\w\"])null\b")
#: mqadmin's own text with a null in it, whatever the broker answers: the client's
#: MessageTrack of a consumed message has no exception (queryMsgById / queryMsgByOffset), a
#: plain message's MessageExt no transaction id (consumeMessage prints it), 5.x's
#: updateSubGroup prints the group config it built itself (no subscriptionDataSet).
OWN_NULL = re.compile(
    r"^MessageTrack \[.*exceptionDesc=null\]$|transactionId='null'|"
    r"^SubscriptionGroupConfig\{.*subscriptionDataSet=null"
)


def test_cluster_list(out: dict[str, str], cluster: RunningCluster) -> None:
    (row,) = [ln.split() for ln in out["clusterList"].splitlines() if ln.startswith("Default")]
    assert row[:4] == ["DefaultCluster", "broker-a", "0", cluster.broker_addrs()["broker-a"]]
    assert row[4].startswith("V4_")


def test_update_topic_route_list_and_delete(out: dict[str, str]) -> None:
    assert "create topic to" in out["updateTopic"] and "success" in out["updateTopic"]
    assert f"topicName={NEW_TOPIC}, readQueueNums=3, writeQueueNums=3" in out["updateTopic"]
    assert re.search(r'"readQueueNums":3', out["topicRouteNew"])
    assert re.search(r'"writeQueueNums":3', out["topicRouteNew"])
    topics = set(out["topicList"].split())
    assert {TOPIC, NEW_TOPIC, "TBW102"} <= topics
    assert f"delete topic [{NEW_TOPIC}] from cluster [DefaultCluster] success" in out[
        "deleteTopic"]
    assert NEW_TOPIC not in set(out["topicListAfterDelete"].split())
    assert TOPIC in set(out["topicListAfterDelete"].split())


def test_topic_route_and_status(out: dict[str, str], live: dict[str, Any]) -> None:
    route = out["topicRoute"]
    assert '"brokerName":"broker-a"' in route and '"cluster":"DefaultCluster"' in route
    assert '"perm":6' in route and '"readQueueNums":2' in route and '"writeQueueNums":2' in route
    rows = [ln.split() for ln in out["topicStatus"].splitlines() if ln.startswith("broker-a")]
    per_queue = {int(r[1]): (int(r[2]), int(r[3])) for r in rows}
    want: dict[int, int] = {}
    for s in live["sent"]:
        want[s.queue.queue_id] = max(want.get(s.queue.queue_id, 0), s.queue_offset + 1)
    assert per_queue == {q: (0, want.get(q, 0)) for q in (0, 1)}


def test_update_sub_group(out: dict[str, str]) -> None:
    text = out["updateSubGroup"]
    assert "create subscription group to" in text and "success" in text
    # -r is retryMaxTimes, -q retryQueueNums
    assert f"groupName={SUB_GROUP}" in text and "retryMaxTimes=2" in text
    assert "retryQueueNums=5" in text


def test_consumer_progress_connection_and_producer_connection(out: dict[str, str],
                                                                live: dict[str, Any]) -> None:
    rows = [ln.split() for ln in out["consumerProgress"].splitlines() if ln.startswith(TOPIC)]
    assert sorted(int(r[2]) for r in rows) == [0, 1]
    broker_total = sum(int(r[3]) for r in rows)
    consumer_total = sum(int(r[4]) for r in rows)
    assert broker_total == consumer_total == COUNT
    assert re.search(r"Diff Total:\s*0\b", out["consumerProgress"])
    conn = out["consumerConnection"]
    assert "CONSUME_PASSIVELY" in conn and "CLUSTERING" in conn
    assert re.search(rf"{TOPIC}\s+\*", conn)  # the subscription table
    row = re.compile(r"^(\d+\s+)?\S+@\S+\s+127\.0\.0\.1:\d+\s+\w+\s+\w+", re.M)
    assert row.search(conn), conn  # clientId, address, language, version
    prod = out["producerConnection"]
    assert row.search(prod), prod


def test_broker_status(out: dict[str, str]) -> None:
    status = dict(
        (k.strip(), v.strip()) for k, v in
        (ln.split(":", 1) for ln in out["brokerStatus"].splitlines() if " : " in ln)
    )
    assert status["brokerActive"] == "true"
    assert int(status["msgPutTotalTodayNow"]) >= COUNT
    assert int(status["commitLogMaxOffset"]) > 0


def test_broker_consume_stats(out: dict[str, str], live: dict[str, Any]) -> None:
    """GET_BROKER_CONSUME_STATS (317): a row per queue of every group with offsets, caught up."""
    text = out["brokerConsumeStats"]
    rows = [ln.split() for ln in text.splitlines() if ln.startswith(TOPIC + " ")]
    assert {(r[1], r[2]) for r in rows} == {(CG, "broker-a")}, text
    assert sorted(int(r[3]) for r in rows) == [0, 1]
    assert re.search(r"Diff Total:\s*0\b", text), text


def test_query_messages(out: dict[str, str], live: dict[str, Any]) -> None:
    first = live["sent"][0]
    by_id = out["queryMsgById"]
    assert re.search(rf"Topic:\s+{TOPIC}\b", by_id) and re.search(r"Keys:\s+\[key-0\]", by_id)
    assert re.search(rf"Queue Offset:\s+{first.queue_offset}\b", by_id)
    assert re.search(r"Tags:\s+\[TagA\]", by_id)
    rows = [ln.split() for ln in out["queryMsgByKey"].splitlines() if ln and ln[0] != "#"]
    third = live["sent"][3]
    assert [r[0] for r in rows] == [third.msg_id]
    assert (int(rows[0][1]), int(rows[0][2])) == (third.queue.queue_id, third.queue_offset)
    by_offset = out["queryMsgByOffset"]
    assert re.search(rf"OffsetID:\s+{first.offset_msg_id}", by_offset)
    assert re.search(rf"Queue ID:\s+{first.queue.queue_id}\b", by_offset)
    assert f"UNIQ_KEY={first.msg_id}" in by_offset


def test_broker_config_update_and_get(out: dict[str, str], cluster: RunningCluster) -> None:
    assert f"update broker config success, {cluster.broker_addrs()['broker-a']}" in out[
        "updateBrokerConfig"]
    cfg = dict((k.strip(), v.strip()) for k, v in
               (ln.split("=", 1) for ln in out["getBrokerConfig"].splitlines() if "=" in ln))
    assert cfg["slaveReadEnable"] == "true"
    assert cfg["brokerIP1"] == "127.0.0.1"
    assert cfg["enablePropertyFilter"] == "true"  # from the profile


def test_stats_all_and_consume_message(out: dict[str, str], live: dict[str, Any]) -> None:
    rows = [ln.split() for ln in out["statsAll"].splitlines() if ln.startswith(TOPIC + " ")]
    assert [r[1] for r in rows] == [CG]
    q = live["sent"][0].queue.queue_id
    in_queue = [s for s in live["sent"] if s.queue.queue_id == q]
    ids = re.findall(r"^MSGID: (\S+)", out["consumeMessage"], re.M)
    assert ids == [s.msg_id for s in sorted(in_queue, key=lambda s: s.queue_offset)]


def test_reset_offset_by_time(out: dict[str, str]) -> None:
    # our consumer is online: the broker resets it (INVOKE_BROKER_TO_RESET_OFFSET) and mqadmin
    # prints "#brokerName #queueId #offset", not the offline fallback's six columns
    text = out["resetOffsetByTime"]
    assert re.search(r"^#brokerName\s+#queueId\s+#offset\s*$", text, re.M), text
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("broker-a")]
    # timestamp 0: every queue rolls back to offset 0
    assert {int(r[1]): int(r[2]) for r in rows} == {0: 0, 1: 0}, text


def test_wipe_write_perm(out: dict[str, str], cluster: RunningCluster) -> None:
    assert re.search(r"wipe write perm of broker\[broker-a\] in name server\[.*\] OK, \d+",
                     out["wipeWritePerm"]), out["wipeWritePerm"]
    assert '"perm":4' in out["topicRouteWiped"]
    assert re.search(r"add write perm of broker\[broker-a\] in name server\[.*\] OK, \d+",
                     out["addWritePerm"]), out["addWritePerm"]
    assert '"perm":6' in out["topicRouteRestored"]


def test_send_message_and_cluster_rt(mqadmin_tools: tuple[str, str], cluster: RunningCluster,
                                     live: dict[str, Any], out: dict[str, str],
                                     tmp_path: Path) -> None:
    _version, mqadmin_classpath = mqadmin_tools
    ns = cluster.namesrv_addr
    admin = live["admin"]
    admin.update_topic(SEND_TOPIC, cluster="DefaultCluster", read_queue_nums=2,
                       write_queue_nums=2)
    wait_for("the send topic's route", lambda: _routed(admin, SEND_TOPIC))
    done = subprocess.run(
        [*jvm(mqadmin_classpath, tmp_path, "org.apache.rocketmq.tools.command.MQAdminStartup"),
         "sendMessage", "-n", ns, "-t", SEND_TOPIC, "-p", "from-mqadmin", "-k", "mq-key",
         "-c", "TagM"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert not FAILED.search(done.stdout + done.stderr), done.stdout + done.stderr
    (row,) = [ln.split() for ln in done.stdout.splitlines() if ln.startswith("broker-a")]
    assert row[2] == "SEND_OK"
    (got,) = admin.query_msg_by_id(row[3], SEND_TOPIC)
    assert got.body == b"from-mqadmin" and got.tags == "TagM" and got.keys == "mq-key"
    # clusterRT sends and prints a row per round until stopped: read two rounds, then stop it
    proc = subprocess.Popen(
        [*jvm(mqadmin_classpath, tmp_path, "org.apache.rocketmq.tools.command.MQAdminStartup"),
         "clusterRT", "-n", ns, "-a", "3", "-s", "64", "-i", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
    )
    rows: list[list[str]] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        for line in proc.stdout:
            assert not FAILED.search(line), line
            if line.startswith("DefaultCluster"):
                rows.append(line.split())
            if len(rows) >= 2 or time.monotonic() > deadline:
                break
    finally:
        proc.kill()  # our own child, by its handle
        proc.wait()
    assert len(rows) == 2
    for r in rows:
        assert r[1] == "broker-a" and float(r[2]) >= 0 and r[3:5] == ["3", "0"]
