"""RocketMQ 5 POP consumption with Apache's own 5.3.1 Java client and mqadmin (rocketmq-client
and rocketmq-tools, unmodified, from Maven Central) against a real rmq-cluster (NameServer and
broker as OS processes).

The real ``mqadmin setConsumeMode -m POP`` switches the group; then six push consumers (four
queues) built with ``clientRebalance=false`` ask the broker's QUERY_ASSIGNMENT, pop, ack, and
one message failing once comes back through changeInvisibleTime; the client's own pop / ack /
changeInvisibleTime calls (``MQClientAPIImpl``) show invisible-time redelivery through the pop
retry topic and orderly pop (tests/compat/java5/src/main/java/PopScenarios.java)."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster

from .conftest import JAVA_DIR, JVM_OPTS, build_java_probes
from .test_java_client import Events, finish, of, parse
from .test_mqadmin import FAILED, MQADMIN_HOME, java

pytestmark = pytest.mark.slow

JAVA5_DIR = Path(__file__).parent / "java5"
VERSION = "5.3.1"
PROFILE = JAVA_DIR / "compat-single.toml"
PREFIX = "pop"
JVM_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def classpath() -> str:
    return build_java_probes(VERSION, JAVA5_DIR)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with rmq_cluster(str(PROFILE), directory=tmp_path_factory.mktemp("pop-cluster")) as c:
        yield c


def mqadmin(classpath: str, home: Path, *args: str) -> str:
    done = subprocess.run(
        [java(), *JVM_OPTS, f"-Drocketmq.home.dir={MQADMIN_HOME}", f"-Duser.home={home}",
         "-cp", classpath, "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0 and not FAILED.search(out), out[-3000:]
    return out


@pytest.fixture(scope="module")
def events(classpath: str, cluster: RunningCluster,
           tmp_path_factory: pytest.TempPathFactory) -> Events:
    ns = cluster.namesrv_addr
    home = tmp_path_factory.mktemp("pop-java-home")
    create_topics(ns, [f"{PREFIX}PushT", f"{PREFIX}ApiT"], queues=4)
    create_topics(ns, [f"{PREFIX}FifoT"], queues=1)
    out = mqadmin(classpath, home, "setConsumeMode", "-n", ns, "-c", "DefaultCluster",
                  "-t", f"{PREFIX}PushT", "-g", f"{PREFIX}PushG", "-m", "POP", "-q", "0")
    assert "success" in out.lower(), out
    java_bin = java()
    proc = subprocess.Popen(
        [java_bin, *JVM_OPTS, f"-Duser.home={home}", "-cp", classpath, "PopScenarios", ns,
         PREFIX, "push", "api"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )
    rc, stdout, stderr = finish(proc, JVM_TIMEOUT_S)
    evs = parse(stdout)
    failed = [e for sc in evs.values() for e in sc if e["event"] == "failed"]
    if rc != 0 or failed:
        pytest.fail(f"PopScenarios exited {rc}: {failed}\n{stderr[-4000:]}", pytrace=False)
    return evs


def test_push_consumers_in_pop_mode_more_consumers_than_queues(events: Events) -> None:
    evs = events["push"]
    counts = {e["who"]: e["n"] for e in of(evs, "count")}
    # six consumers on four queues: every one of them received (and acked) messages
    assert sorted(counts) == [f"c{i}" for i in range(6)] and all(n > 0 for n in counts.values())
    sent = [e["body"] for e in of(evs, "sent")]
    assert all(e["status"] == "SEND_OK" for e in of(evs, "sent"))
    recv = of(evs, "recv")
    got = Counter(e["body"] for e in recv)
    assert set(got) == set(sent)
    for e in recv:
        assert e["topic"] == "popPushT" and e["pop_ck"] and len(e["pop_ck"].split(" ")) == 8
    # the message that failed once came back (changeInvisibleTime by the client, revived
    # by the broker into %RETRY%popPushG_popPushT) with one more reconsume time
    fail = [e for e in recv if e["body"] == "fail-once"]
    assert [e["reconsume"] for e in fail][:2] == [0, 1], fail
    assert fail[1]["pop_ck"].split(" ")[4] == "1"  # read from the pop retry topic
    # at least once: nothing but the failed one arrived twice before its ack
    assert [b for b, n in got.items() if n > 1 and b != "fail-once"] == []


def _popped(evs: list[dict[str, Any]], step: str) -> list[dict[str, Any]]:
    return [e for e in of(evs, "msg") if e["step"] == step]


def test_client_pop_ack_change_invisible_and_redelivery(events: Events) -> None:
    evs = events["api"]
    first = _popped(evs, "first")
    assert sorted(e["body"] for e in first) == ["change", "expire", "keep"]
    assert all(e["reconsume"] == 0 and e["pop_ck"].split(" ")[4] == "0" for e in first)
    assert [e["status"] for e in of(evs, "ack") if e["step"] == "first"] == ["OK"]
    assert [e["status"] for e in of(evs, "changed")] == ["OK"]
    again = _popped(evs, "again0") + _popped(evs, "again1")
    # "change" first (visible at once), then "expire" after its invisible time, each from the
    # pop retry topic with one more reconsume time; "keep" (acked) never again
    assert [e["body"] for e in again] == ["change", "expire"]
    for e in again:
        assert e["reconsume"] == 1 and e["topic"] == "popApiT"
        assert e["pop_ck"].split(" ")[4] == "1"
    assert all(e["status"] == "OK" for e in of(evs, "ack"))


def test_client_orderly_pop_blocks_until_acked(events: Events) -> None:
    evs = events["api"]
    assert [e["body"] for e in _popped(evs, "fifo1")] == ["f0", "f1"]
    blocked = [e for e in of(evs, "popped") if e["step"] == "fifo-blocked"]
    assert blocked[0]["status"] != "FOUND" and blocked[0]["n"] == 0
    assert [e["body"] for e in _popped(evs, "fifo2")] == ["f2", "f3"]
    assert all(e["pop_ck"].split(" ")[3] == "999" for e in _popped(evs, "fifo1"))
