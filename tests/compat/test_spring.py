"""A minimal Spring Boot 3.5 service on Apache's rocketmq-spring-boot-starter 2.3.4 (with
rocketmq-client 5.3.2, unmodified, from Maven Central) against a real rmq-cluster: RocketMQTemplate
syncSend / asyncSend / sendMessageInTransaction with a local-transaction listener, and a
@RocketMQMessageListener receiving them (tests/compat/spring: a CommandLineRunner prints one JSON
line per observation and exits). Asserted field by field: topic, tags, keys, body, user
properties, queue, offset, transaction outcome."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from rmq_cluster.client.sync import SyncAdmin
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

from .conftest import JAVA_DIR, JVM_OPTS

pytestmark = pytest.mark.slow

#: transaction check-back within seconds (transactionTimeOut/CheckInterval 1 s)
PROFILE = JAVA_DIR / "compat-single.toml"
JVM_TIMEOUT_S = 180
TOPIC = "spring-t"
SYNC, ASYNC, TX = 6, 4, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with rmq_cluster(str(PROFILE), directory=tmp_path_factory.mktemp("spring-cluster")) as c:
        yield c


@pytest.fixture(scope="module")
def events(spring_classpath: str, cluster: RunningCluster,
           tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    with SyncAdmin(namesrv_addr=cluster.namesrv_addr) as admin:
        admin.update_topic(TOPIC, broker_addr=cluster.broker_addrs()["broker-a"],
                           read_queue_nums=4, write_queue_nums=4)
    home = tmp_path_factory.mktemp("spring-home")
    java = shutil.which("java")
    assert java, "java is needed (see conftest)"
    proc = subprocess.Popen(
        [java, *JVM_OPTS, f"-Duser.home={home}", "-cp", spring_classpath, "compat.ProbeApp",
         f"--rocketmq.name-server={cluster.namesrv_addr}", f"--probe.topic={TOPIC}",
         "--probe.prefix=spring"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        cwd=home,
    )
    try:
        out, err = proc.communicate(timeout=JVM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # our own child, by its handle
        out, err = proc.communicate()
    evs = [json.loads(line) for line in out.splitlines() if line.startswith("{\"event\"")]
    assert proc.returncode == 0, (proc.returncode, [e for e in evs if e["event"] == "failed"],
                                  out[-2000:], err[-3000:])
    assert [e for e in evs if e["event"] == "done"], out[-2000:]
    return evs


def of(evs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["event"] == event]


def test_template_sends_reach_the_message_listener(events: list[dict[str, Any]]) -> None:
    sent = {e["idx"]: e for e in of(events, "sent")}
    assert sorted(sent) == list(range(SYNC + ASYNC + TX))
    assert Counter(s["mode"] for s in sent.values()) == {"sync": SYNC, "async": ASYNC, "tx": TX}
    assert all(s["status"] == "SEND_OK" for s in sent.values())
    received = of(events, "recv")
    by_idx: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in received:
        by_idx[int(r["props"]["idx"])].append(r)
    committed = [*range(SYNC + ASYNC), SYNC + ASYNC, SYNC + ASYNC + 2]
    assert sorted(by_idx) == committed  # the rolled-back one never arrives
    for idx, got in by_idx.items():
        s = sent[idx]
        assert len(got) == 1, got  # each exactly once
        (r,) = got
        for field in ("topic", "tags", "keys", "body_sha", "body_len"):
            assert r[field] == s[field], (field, r, s)
        assert r["body"] == f"spring-{idx}-\u00e9\u4e2d"
        assert r["props"]["idx"] == str(idx)
        assert r["props"]["color"] == ("red" if idx % 2 == 0 else "blue")
        assert r["props"]["KEYS"] == f"k{idx}" and r["props"]["TAGS"] == s["tags"]
        assert r["msg_id"] == r["props"]["UNIQ_KEY"] == s["msg_id"]
        assert r["reconsume_times"] == 0
        if s["mode"] != "tx":  # a transactional message is stored again when committed
            assert (r["broker"], r["queue_id"], r["queue_offset"]) == (
                s["broker"], s["queue_id"], s["queue_offset"])
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in received:
        per_queue[r["queue_id"]].append(r["queue_offset"])
    for queue, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), (queue, offsets)


def test_send_message_in_transaction_commit_rollback_and_check_back(
        events: list[dict[str, Any]]) -> None:
    base = SYNC + ASYNC
    sent = {e["idx"]: e for e in of(events, "sent") if e["mode"] == "tx"}
    assert {i - base: s["local_state"] for i, s in sent.items()} == {
        0: "COMMIT_MESSAGE", 1: "ROLLBACK_MESSAGE", 2: "UNKNOW"}
    local = {e["idx"]: e for e in of(events, "local")}
    assert {i - base: e["answer"] for i, e in local.items()} == {
        0: "COMMIT", 1: "ROLLBACK", 2: "UNKNOWN"}
    for idx, e in local.items():
        assert e["transaction_id"] == sent[idx]["msg_id"]
    checks = of(events, "check")
    assert {c["idx"] for c in checks} == {base + 2}  # only the unknown one is checked back
    for c in checks:
        assert c["transaction_id"] == sent[base + 2]["msg_id"]
        assert c["body"] == f"spring-{base + 2}-\u00e9\u4e2d"
        h = c["headers"]
        assert (h["rocketmq_TOPIC"], h["rocketmq_TAGS"], h["rocketmq_KEYS"]) == (
            TOPIC, "TagT", f"k{base + 2}")
        assert (h["idx"], h["color"]) == (str(base + 2), "red")
