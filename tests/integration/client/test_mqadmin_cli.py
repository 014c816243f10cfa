"""The mqadmin-named commands through the real CLI (``python -m rmq_cluster.deploy``, a
subprocess each) against a real ``rmq-cluster up`` cluster: two NameServers, a master and its
slave. Tables are checked on their ``#`` headers and a row, ``--json`` is parsed (one object, or
JSON lines for the record streams), exit codes are 0 / 1 (one-line error) / 2 (usage)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.client.errors import MQBrokerError
from rmq_cluster.client.model import Message
from rmq_cluster.client.sync import SyncAdmin, SyncProducer, SyncPushConsumer
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.deploy.testing import RunningCluster, cli, rmq_cluster

#: every command is a Python process of its own (about a second each on a busy 2-core box)
pytestmark = pytest.mark.slow

WAIT_S = 20.0
CLUSTER = "DefaultCluster"
PROFILE = """\
base = "single"
name = "mqadmin-cli"
namesrvs = 2
slaves_per_master = 1

[namesrv_properties]
orderMessageEnable = true

# The first transaction check pass creates RMQ_SYS_TRANS_HALF_TOPIC (as Apache's does); that
# topic change re-registers the broker's whole table, which (in Apache's NameServer as in
# ours) sets every queue's perm back, undoing a wipeWritePerm. A short interval lets the wipe
# test wait for that pass instead of racing it at the 60 s default.
[broker_properties]
transactionCheckInterval = 500
"""


def wait_for(what: str, cond: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition, with a deadline


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    root = tmp_path_factory.mktemp("mqadmin-cli")
    profile = root / "profile.toml"
    profile.write_text(PROFILE)
    with rmq_cluster(str(profile), directory=root / "cluster") as c:
        yield c


def run(cluster: RunningCluster | str, *args: str) -> subprocess.CompletedProcess[str]:
    ns = cluster if isinstance(cluster, str) else cluster.namesrv_addr
    return cli(*args, "-n", ns)


def ok(cluster: RunningCluster | str, *args: str) -> str:
    done = run(cluster, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def obj(cluster: RunningCluster | str, *args: str) -> Any:
    text = ok(cluster, *args, "--json")
    lines = text.splitlines()
    assert len(lines) == 1, text  # one object on one line
    return json.loads(lines[0])


def records(cluster: RunningCluster | str, *args: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(cluster, *args, "--json").splitlines()]


def table(text: str, first_header: str) -> tuple[list[str], list[list[str]]]:
    """The ``#``-headed table starting with ``first_header``: its headers and its rows (cells
    split on runs of two or more blanks), up to the first blank line."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("#" + first_header))
    headers = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for ln in lines[start + 1:]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return headers, rows


def master(cluster: RunningCluster) -> str:
    return cluster.broker_addrs()["broker-a"]


def namesrvs(cluster: RunningCluster) -> list[str]:
    return cluster.namesrv_addr.split(";")


def test_cluster_list(cluster: RunningCluster) -> None:
    headers, rows = table(ok(cluster, "clusterList"), "Cluster Name")
    assert headers == ["#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version",
                       "#InTPS(LOAD)", "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE"]
    by_id = {r[2]: r for r in rows}
    assert by_id["0"][:5] == [CLUSTER, "broker-a", "0", master(cluster), "V4_9_7"]
    assert by_id["1"][3] == cluster.broker_addrs()["broker-a-s"]
    assert re.fullmatch(r"\d+\.\d\d\(\d+,\d+ms\)", by_id["0"][5])
    data = obj(cluster, "clusterList")
    assert data["clusters"] == {CLUSTER: ["broker-a"]}
    assert {r["brokerId"] for r in data["rows"]} == {0, 1}
    assert "brokerAddrs={" not in ok(cluster, "clusterList")  # no Python reprs


def test_update_topic_order_true_sets_the_namesrv_order_conf(cluster: RunningCluster) -> None:
    text = ok(cluster, "updateTopic", "-c", CLUSTER, "-t", "MqOrd", "-r", "4", "-w", "4",
              "-o", "true")
    assert f"create topic to {master(cluster)} success." in text
    assert "orderConf=[broker-a:4]" in text and "order=true]" in text
    for ns in namesrvs(cluster):  # mqadmin writes the order conf to every NameServer
        assert obj(ns, "topicRoute", "-t", "MqOrd")["orderTopicConf"] == "broker-a:4"
    headers, rows = table(ok(cluster, "topicRoute", "-t", "MqOrd", "--table"), "ClusterName")
    assert headers == ["#ClusterName", "#BrokerName", "#BrokerAddr", "#ReadQueue",
                       "#WriteQueue", "#Perm"]
    assert rows == [[CLUSTER, "broker-a", master(cluster), "4", "4", "6"]]
    assert obj(cluster, "updateTopic", "-c", CLUSTER, "-t", "MqUnord", "-o", "FALSE")[
        "order"] is False
    bad = run(cluster, "updateTopic", "-c", CLUSTER, "-t", "MqOrd", "-o", "yes")
    assert bad.returncode == 2 and "true or false" in bad.stderr and not bad.stdout


def test_send_then_read_by_offset_id_key_and_queue(cluster: RunningCluster) -> None:
    ok(cluster, "updateTopic", "-c", CLUSTER, "-t", "MqMsg", "-r", "2", "-w", "2")
    headers, rows = table(ok(cluster, "sendMessage", "-t", "MqMsg", "-p", "hello admin",
                             "-k", "mk1", "-c", "TagM", "-b", "broker-a", "-i", "1"),
                          "Broker Name")
    assert headers == ["#Broker Name", "#QID", "#Send Result", "#MsgId"]
    (row,) = rows
    assert row[:3] == ["broker-a", "1", "SEND_OK"]
    sent = obj(cluster, "sendMessage", "-t", "MqMsg", "-p", "second", "-k", "mk2",
               "-b", "broker-a", "-i", "1")
    assert sent["queueOffset"] == 1 and sent["sendStatus"] == "SEND_OK"

    view = ok(cluster, "queryMsgByOffset", "-t", "MqMsg", "-b", "broker-a", "-i", "1",
              "-o", "0")
    assert re.search(r"^Topic:\s+MqMsg$", view, re.M)
    assert re.search(r"^Tags:\s+\[TagM\]$", view, re.M)
    assert re.search(r"^Keys:\s+\[mk1\]$", view, re.M)
    assert re.search(r"^Message Body:\s+hello admin$", view, re.M)
    assert f"UNIQ_KEY={row[3]}" in view
    by_offset = obj(cluster, "queryMsgByOffset", "-t", "MqMsg", "-b", "broker-a", "-i", "1",
                    "-o", "1")["messages"]
    assert [m["msgId"] for m in by_offset] == [sent["msgId"]]
    assert by_offset[0]["body"] == "second" and by_offset[0]["bodyEncoding"] == "text"
    by_id = obj(cluster, "queryMsgById", "-i", sent["offsetMsgId"])["messages"]
    assert by_id[0]["properties"]["KEYS"] == "mk2"
    headers, rows = table(ok(cluster, "queryMsgByKey", "-t", "MqMsg", "-k", "mk1"),
                          "Message ID")
    assert headers == ["#Message ID", "#QID", "#Offset"] and rows == [[row[3], "1", "0"]]
    missing = run(cluster, "queryMsgByOffset", "-t", "MqMsg", "-b", "broker-a", "-i", "1",
                  "-o", "7")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1

    got = records(cluster, "consumeMessage", "-t", "MqMsg", "-b", "broker-a", "-i", "1",
                  "-o", "0")
    assert [(m["queueOffset"], m["body"]) for m in got] == [(0, "hello admin"), (1, "second")]
    text = ok(cluster, "consumeMessage", "-t", "MqMsg", "-c", "1")
    assert re.findall(r"^MSGID: (\S+)", text, re.M) == [row[3]]
    printed = records(cluster, "printMsg", "-t", "MqMsg", "-d", "false")
    assert [m["msgId"] for m in printed] == [row[3], sent["msgId"]]
    assert all("body" not in m for m in printed)
    assert "BODY: second" in ok(cluster, "printMsg", "-t", "MqMsg")
    usage = run(cluster, "consumeMessage", "-t", "MqMsg", "-i", "1")
    assert usage.returncode == 2 and "-b BROKER_NAME" in usage.stderr

    headers, rows = table(ok(cluster, "topicStatus", "-t", "MqMsg"), "Broker Name")
    assert headers == ["#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated"]
    assert [r[:4] for r in rows] == [["broker-a", "0", "0", "0"], ["broker-a", "1", "0", "2"]]
    status = obj(cluster, "topicStatus", "-t", "MqMsg")
    assert status["queues"][1]["maxOffset"] == 2 and status["queues"][1][
        "lastUpdateTimestamp"] > 0


def test_groups_connections_progress_and_stats(cluster: RunningCluster) -> None:
    ns = cluster.namesrv_addr
    got: list[Any] = []
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> None:
        with lock:
            got.extend(msgs)

    with SyncAdmin(namesrv_addr=ns) as admin:
        admin.update_topic("MqGrp", cluster=CLUSTER, read_queue_nums=2, write_queue_nums=2)
        with SyncProducer("PG_MQ", namesrv_addr=ns) as producer, \
                SyncPushConsumer("CG_MQ", listener, {"MqGrp": "A || B"}, namesrv_addr=ns):
            for i in range(4):
                producer.send(Message("MqGrp", f"g{i}".encode(), tags="A"))
            wait_for("the consumer", lambda: len(got) >= 4)
            wait_for("the committed offsets", lambda: sum(
                r.consumer_offset for r in admin.consumer_progress("CG_MQ")[0]
                if r.queue.topic == "MqGrp") == 4)
            # first: inTps counts the sends of the last minute, and each CLI call below is a
            # process start (seconds each on a loaded machine)
            (stats,) = records(cluster, "statsAll", "-t", "MqGrp")
            assert stats["group"] == "CG_MQ" and stats["inMsg24Hour"] == 4
            assert stats["outMsg24Hour"] == 4 and stats["accumulation"] == 0
            assert stats["inTps"] > 0

            text = ok(cluster, "consumerConnection", "-g", "CG_MQ")
            headers, rows = table(text, "ClientId")
            assert headers == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
            assert len(rows) == 1 and rows[0][1].startswith("127.0.0.1:")
            assert ["MqGrp", "A || B"] in table(text, "Topic")[1]
            assert "ConsumeType: CONSUME_PASSIVELY" in text and "MessageModel: CLUSTERING" in text
            conn = obj(cluster, "consumerConnection", "-g", "CG_MQ")
            assert conn["connections"][0]["clientId"] == rows[0][0]
            headers, rows = table(ok(cluster, "producerConnection", "-g", "PG_MQ", "-t",
                                     "MqGrp"), "ClientId")
            assert headers == ["#ClientId", "#ClientAddr", "#Language", "#Version"]
            assert len(rows) == 1

            text = ok(cluster, "consumerProgress", "-g", "CG_MQ")
            headers, rows = table(text, "Topic")
            assert headers[:5] == ["#Topic", "#Broker Name", "#QID", "#Broker Offset",
                                   "#Consumer Offset"]
            mine = [r for r in rows if r[0] == "MqGrp"]
            assert sum(int(r[3]) for r in mine) == sum(int(r[4]) for r in mine) == 4
            assert re.search(r"^Diff Total: 0$", text, re.M)
            # without -g, as mqadmin: one line per group (a %RETRY% topic names each)
            headers, rows = table(ok(cluster, "consumerProgress"), "Group")
            assert headers == ["#Group", "#Count", "#Version", "#Type", "#Model", "#TPS",
                               "#Diff Total"]
            (line,) = [r for r in rows if r[0] == "CG_MQ"]
            assert line[1] == "1" and line[3:5] == ["PUSH", "CLUSTERING"] and line[-1] == "0"
            every = obj(cluster, "consumerProgress")["groups"]
            assert any(g["group"] == "CG_MQ" and g["count"] == 1 for g in every)

            headers, rows = table(ok(cluster, "statsAll", "-t", "MqGrp"), "Topic")
            assert headers == ["#Topic", "#Consumer Group", "#Accumulation", "#InTPS",
                               "#OutTPS", "#InMsg24Hour", "#OutMsg24Hour"]
            assert rows[0][:3] == ["MqGrp", "CG_MQ", "0"] and rows[0][-2:] == ["4", "4"]
            # the broker side of statsAll refuses what it cannot answer, with a remark
            addr = master(cluster)
            for name, key in (("TOPIC_PUT_NUMS", "bad topic!"), ("GROUP_GET_NUMS", "MqGrp"),
                              ("NO_SUCH_STATS", "MqGrp"), ("GROUP_GET_NUMS", "MqGrp@nobody")):
                with pytest.raises(MQBrokerError) as err:
                    admin.view_broker_stats(addr, name, key)
                assert err.value.code == ResponseCode.SYSTEM_ERROR and err.value.remark

    text = ok(cluster, "updateSubGroup", "-c", CLUSTER, "-g", "SubMq", "-r", "3", "-q", "2")
    assert f"create subscription group to {master(cluster)} success." in text
    assert "retryMaxTimes=3" in text and "retryQueueNums=2" in text
    deleted = obj(cluster, "deleteSubGroup", "-c", CLUSTER, "-g", "SubMq")
    assert deleted["deleted"] == [master(cluster)]
    assert deleted["deletedTopics"] == ["%RETRY%SubMq", "%DLQ%SubMq"]
    bad = run(cluster, "updateSubGroup", "-c", CLUSTER, "-g", "bad group!")
    assert bad.returncode == 2


def test_wipe_and_add_write_perm_and_delete_topic(cluster: RunningCluster) -> None:
    wait_for("the first transaction check pass to create the half topic",
             lambda: "RMQ_SYS_TRANS_HALF_TOPIC" in obj(cluster, "topicList")["topics"])
    ok(cluster, "updateTopic", "-c", CLUSTER, "-t", "MqDel", "-o", "true")
    text = ok(cluster, "wipeWritePerm", "-b", "broker-a")
    for ns in namesrvs(cluster):
        assert re.search(rf"^wipe write perm of broker\[broker-a\] in name server\[{ns}\] "
                         r"OK, \d+$", text, re.M)
        assert obj(ns, "topicRoute", "-t", "MqDel")["queueDatas"][0]["perm"] == 4
    added = obj(cluster, "addWritePerm", "-b", "broker-a")
    assert [n["namesrv"] for n in added["namesrvs"]] == namesrvs(cluster)
    assert all(n["topicCount"] > 0 for n in added["namesrvs"])
    for ns in namesrvs(cluster):
        assert obj(ns, "topicRoute", "-t", "MqDel")["queueDatas"][0]["perm"] == 6

    text = ok(cluster, "deleteTopic", "-c", CLUSTER, "-t", "MqDel")
    assert f"delete topic [MqDel] from cluster [{CLUSTER}] success." in text
    assert "delete topic [MqDel] from NameServer success." in text
    for ns in namesrvs(cluster):
        assert "MqDel" not in obj(ns, "topicList")["topics"]
        gone = run(ns, "topicRoute", "-t", "MqDel", "--json")
        assert gone.returncode == 1 and json.loads(gone.stdout)["code"] == 17
    assert run(cluster, "deleteTopic", "-t", "MqDel").returncode == 2  # -c is required


def test_ha_status(cluster: RunningCluster) -> None:
    ok(cluster, "sendMessage", "-t", CLUSTER, "-p", "replicate me")

    def caught_up() -> bool:
        (b,) = obj(cluster, "haStatus", "-c", CLUSTER)["brokers"]
        return bool(b["slaves"]) and b["slaves"][0]["ackOffset"] == b["commitLogMaxOffset"]

    wait_for("the slave to ack everything", caught_up)
    text = ok(cluster, "haStatus", "-b", master(cluster))
    assert re.search(rf"^#MasterAddr\s+{master(cluster)}$", text, re.M)
    assert re.search(r"^#SlaveNum\s+1$", text, re.M)
    headers, rows = table(text, "SlaveAddr")
    assert headers == ["#SlaveAddr", "#SlaveAckOffset", "#Diff", "#TransferSpeed(KB/s)",
                       "#Status"]
    assert rows[0][2] == "0" and rows[0][4] == "OK"
    (slave,) = obj(cluster, "haStatus", "-b", cluster.broker_addrs()["broker-a-s"])["brokers"]
    assert slave["role"] == "SLAVE" and slave["connected"] is True


def test_cluster_rt(cluster: RunningCluster) -> None:
    rounds = records(cluster, "clusterRT", "-a", "3", "-s", "16", "--rounds", "2", "-i", "0")
    assert [(r["round"], r["cluster"], r["brokerName"], r["successCount"], r["failCount"])
            for r in rounds] == [(1, CLUSTER, "broker-a", 3, 0), (2, CLUSTER, "broker-a", 3, 0)]
    headers, rows = table(ok(cluster, "clusterRT", "-a", "2"), "Cluster Name")
    assert headers == ["#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount"]
    assert rows[0][:2] == [CLUSTER, "broker-a"] and rows[0][3:] == ["2", "0"]
    assert run(cluster, "clusterRT", "-a", "10000000").returncode == 2


def test_failures_exit_1_with_one_line(cluster: RunningCluster, tmp_path: Path) -> None:
    done = run(cluster, "topicStatus", "-t", "NoSuchTopicHere")
    assert done.returncode == 1 and not done.stdout
    assert len(done.stderr.strip().splitlines()) == 1
    done = run(cluster, "producerConnection", "-g", "NobodyPG", "-t", CLUSTER, "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["error"]
    done = run("127.0.0.1:1", "clusterList")  # nothing listens there
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert run(cluster, "topicStatus").returncode == 2  # -t is required
    assert run(cluster, "queryMsgByOffset", "-t", "MqOrd", "-b", "broker-a", "-i", "x",
               "-o", "0").returncode == 2
