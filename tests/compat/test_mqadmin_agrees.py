"""Our mqadmin-named commands and Apache's own mqadmin (rocketmq-tools 4.9.8, unmodified; the
harness of test_mqadmin.py) print the same figures for the same cluster: topicStatus,
consumerProgress, queryMsgByKey, clusterList and statsAll (whose 24-hour counts both read from
the broker's VIEW_BROKER_STATS_DATA). One cluster, one JVM, our commands in subprocesses."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.client.model import Message
from rmq_cluster.client.sync import SyncAdmin, SyncProducer, SyncPushConsumer
from rmq_cluster.deploy.testing import cli, rmq_cluster

from .test_mqadmin import FAILED, jvm

pytestmark = pytest.mark.slow

TOPIC, PG, CG = "AgreeT", "PG_AGREE", "CG_AGREE"
COUNT = 5
WAIT_S = 60.0


def wait_for(what: str, cond: Any, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)  # polling a condition with a deadline


def rows(text: str, first: str) -> list[list[str]]:
    """Whitespace-split lines starting with ``first`` (the data rows of a table)."""
    return [ln.split() for ln in text.splitlines() if ln.startswith(first)]


def _committed(admin: SyncAdmin) -> int:
    try:
        return sum(r.consumer_offset for r in admin.consumer_progress(CG)[0]
                   if r.queue.topic == TOPIC)
    except Exception:  # the group is not known yet
        return 0


def test_ours_and_apache_mqadmin_print_the_same(mqadmin_classpath: str, tmp_path: Path) -> None:
    with rmq_cluster("single", directory=tmp_path / "cluster") as cluster:
        ns = cluster.namesrv_addr
        got: list[Any] = []
        lock = threading.Lock()

        def listener(msgs: list[Any]) -> None:
            with lock:
                got.extend(msgs)

        with SyncAdmin(namesrv_addr=ns) as admin:
            admin.update_topic(TOPIC, cluster="DefaultCluster", read_queue_nums=2,
                               write_queue_nums=2)
            with SyncProducer(PG, namesrv_addr=ns) as producer, \
                    SyncPushConsumer(CG, listener, {TOPIC: "*"}, namesrv_addr=ns):
                for i in range(COUNT):
                    producer.send(Message(TOPIC, f"b{i}".encode(), keys=("agree-key",)))
                wait_for("the consumer", lambda: len(got) >= COUNT)
                wait_for("the committed offsets", lambda: _committed(admin) == COUNT)

                commands = {
                    "topicStatus": ["topicStatus", "-t", TOPIC],
                    "consumerProgress": ["consumerProgress", "-g", CG],
                    "queryMsgByKey": ["queryMsgByKey", "-t", TOPIC, "-k", "agree-key"],
                    "clusterList": ["clusterList"],
                    "statsAll": ["statsAll", "-t", TOPIC],
                }
                script = "".join("\t".join([*args, "-n", ns]) + "\n"
                                 for args in commands.values())
                done = subprocess.run(jvm(mqadmin_classpath, tmp_path, "AdminBatch"),
                                      input=script, capture_output=True, text=True,
                                      timeout=300)
                assert done.returncode == 0, done.stderr[-3000:]
                sections = dict(re.findall(r"@@BEGIN (\d+)\n(.*?)@@END \1\n", done.stdout,
                                           re.S))
                names = list(commands)
                apache = {names[int(i)]: text for i, text in sections.items()}
                assert set(apache) == set(commands), done.stdout[-3000:]
                for name, text in apache.items():
                    assert not FAILED.search(text), (name, text[-2000:])
                ours = {}
                for name, args in commands.items():
                    mine = cli(*args, "-n", ns)
                    assert mine.returncode == 0, (name, mine.stderr)
                    ours[name] = mine.stdout

    # the same header line (columns, in order) and the same rows
    for name in commands:
        head = re.compile(r"^#.*$", re.M)
        theirs_head = head.search(apache[name])
        assert theirs_head is not None, apache[name]
        assert re.split(r"\s{2,}|\s(?=#)", theirs_head.group().strip()) == re.split(
            r"\s{2,}|\s(?=#)", head.search(ours[name]).group().strip()), name
    assert rows(ours["topicStatus"], "broker-a") == rows(apache["topicStatus"], "broker-a")
    assert rows(ours["consumerProgress"], TOPIC) == rows(apache["consumerProgress"], TOPIC)
    assert re.search(r"Diff Total:\s*0\b", apache["consumerProgress"])
    assert re.search(r"Diff Total:\s*0\b", ours["consumerProgress"])
    assert sorted(rows(ours["queryMsgByKey"], "")[1:]) == sorted(
        r for r in rows(apache["queryMsgByKey"], "") if r and not r[0].startswith("#"))
    assert [r[:5] for r in rows(ours["clusterList"], "DefaultCluster")] == [
        r[:5] for r in rows(apache["clusterList"], "DefaultCluster")]
    # topic, group, accumulation, (TPS), messages in and out in 24 hours
    (theirs,) = rows(apache["statsAll"], TOPIC)
    (mine,) = rows(ours["statsAll"], TOPIC)
    assert theirs[:3] == mine[:3] == [TOPIC, CG, "0"]
    assert theirs[-2:] == mine[-2:] == [str(COUNT), str(COUNT)]
