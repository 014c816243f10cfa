"""Apache's RocketMQ Java client (4.9.8 and 5.3.1, unmodified) through a failover of a real
rmq-cluster: one JVM streams numbered sync sends (``Scenarios stream``) while the test
``kill -9``s a master (``2m-2s-sync``) or the DLedger leader (``dledger``); a second JVM
(``Scenarios drain``, a push consumer of a fresh group) then reads the topic. Every SEND_OK the
client was given must be read back at the queue and offset its SendResult named, with the same
unique id and body."""

from __future__ import annotations

import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

from .conftest import JAVA_CLIENTS, JVM_OPTS, build_java_probes
from .failover_testlib import EventStream, masters

pytestmark = pytest.mark.slow

#: SEND_OKs before the kill, and SEND_OKs from a surviving master after it.
BEFORE_KILL = 40
AFTER_KILL = 30
#: Deadlines: the stream's whole run, a new DLedger leader registered, the drain.
STREAM_WAIT_S = 90.0
FAILOVER_WAIT_S = 30.0
JVM_EXIT_S = 60.0
DRAIN_DEADLINE_MS = 40000


@pytest.fixture(scope="module", params=JAVA_CLIENTS)
def classpath(request: pytest.FixtureRequest) -> str:
    """Class path of the Scenarios runner against rocketmq-client ``request.param``."""
    return build_java_probes(request.param)


def store_addr(offset_msg_id: str) -> str:
    """The store host an (IPv4) offset message id names: 4 bytes IP, 4 bytes port, 8 offset."""
    raw = bytes.fromhex(offset_msg_id)
    assert len(raw) == 16, offset_msg_id
    return f"{'.'.join(str(b) for b in raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"


class Jvm(EventStream):
    """``Scenarios`` in a JVM of its own; a thread collects its JSON lines as they come."""

    def __init__(self, classpath: str, namesrv: str, prefix: str, scenario: str, home: Path,
                 props: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        java = shutil.which("java")
        assert java, "java is needed (see conftest)"
        super().__init__(
            [java, *JVM_OPTS, f"-Duser.home={home}", *(f"-D{k}={v}" for k, v in props.items()),
             "-cp", classpath, "Scenarios", namesrv, prefix, scenario],
            home / f"{scenario}.stderr",
        )


def oks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == "sent" and e.get("status") == "SEND_OK"]


def drain(classpath: str, cluster: RunningCluster, prefix: str, home: Path,
          acked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    ids = home / "acked-ids.txt"
    home.mkdir(parents=True, exist_ok=True)
    ids.write_text("".join(f"{s['uniq_id']}\n" for s in acked))
    jvm = Jvm(classpath, cluster.namesrv_addr, prefix, "drain", home / "drain",
              {"drain.ids": str(ids), "deadline.ms": str(DRAIN_DEADLINE_MS)})
    try:
        rc = jvm.finish(DRAIN_DEADLINE_MS / 1000 + JVM_EXIT_S)
    finally:
        jvm.stop()
    missing = [e for e in jvm.events if e["event"] in ("missing", "failed")]
    assert rc == 0 and not missing, (rc, missing, jvm.tail())
    return [e for e in jvm.events if e["event"] == "recv"]


def assert_every_ack_read_back(acked: list[dict[str, Any]], sent: list[dict[str, Any]],
                               received: list[dict[str, Any]]) -> None:
    at: dict[tuple[str, int, int], dict[str, Any]] = {}
    for r in received:  # a redelivery must be the same record
        key = (r["broker"], r["queue_id"], r["queue_offset"])
        first = at.setdefault(key, r)
        assert (first["uniq_id"], first["body_sha"]) == (r["uniq_id"], r["body_sha"]), (first, r)
    for s in acked:
        back = at.get((s["broker"], s["queue_id"], s["queue_offset"]))
        assert back is not None, ("SEND_OK not read back", s)
        for field in ("topic", "tags", "keys", "uniq_id", "body_sha", "body_len"):
            assert back[field] == s[field], (field, back, s)
        assert back["props"]["idx"] == str(s["idx"])
        assert back["body"] == f"body-{s['idx']}-\u00e9\u4e2d"
    # nothing read that the stream never sent (a send whose answer was lost may be there too)
    attempted = {e["uniq_id"] for e in sent}
    assert {r["uniq_id"] for r in received} <= attempted
    # each queue reads dense from offset 0
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for broker, qid, off in at:
        per_queue[(broker, qid)].append(off)
    for q, offs in per_queue.items():
        assert sorted(offs) == list(range(len(offs))), (q, sorted(offs))


Kill = Callable[[], tuple[str, float]]


def stream_through_a_kill(classpath: str, cluster: RunningCluster, home: Path, prefix: str,
                          kill: Kill) -> tuple[list[dict[str, Any]], str, float]:
    """Stream; after BEFORE_KILL SEND_OKs ``kill()`` (-> the killed store address, wall-clock
    ms of the kill); go on until AFTER_KILL sends begun after it were acked by another store;
    stop. -> (send events, killed address, kill time in ms)."""
    stop = home / "stop-stream"
    jvm = Jvm(classpath, cluster.namesrv_addr, prefix, "stream", home / "stream",
              {"stream.stop": str(stop), "deadline.ms": str(int(STREAM_WAIT_S * 1000))})
    try:
        deadline = time.monotonic() + STREAM_WAIT_S
        jvm.wait_for(f"{BEFORE_KILL} SEND_OKs", lambda ev: len(oks(ev)) >= BEFORE_KILL, deadline)
        killed, killed_ms = kill()
        jvm.wait_for(
            f"{AFTER_KILL} SEND_OKs after the kill",
            lambda ev: sum(store_addr(e["offset_msg_id"]) != killed and e["start_ms"] > killed_ms
                           for e in oks(ev)) >= AFTER_KILL,
            deadline,
        )
        stop.touch()
        rc = jvm.finish()
    finally:
        jvm.stop()
    assert rc == 0 and any(e["event"] == "done" for e in jvm.events), (rc, jvm.events[-3:],
                                                                       jvm.tail())
    return [e for e in jvm.events if e["event"] in ("sent", "send_failed")], killed, killed_ms


def node_addr(cluster: RunningCluster, name: str) -> str:
    addr: str = cluster.node(name)["addr"]
    return addr


def test_java_stream_through_a_master_kill_reads_every_ack_from_the_slave(
    classpath: str, tmp_path: Path
) -> None:
    with rmq_cluster("2m-2s-sync", directory=tmp_path / "cluster") as cluster:
        def kill() -> tuple[str, float]:
            addr = node_addr(cluster, "broker-a")
            done = cluster.cli("kill", "broker-a", "--wait")
            assert done.returncode == 0, done.stderr
            return addr, time.time() * 1000

        sent, killed, killed_ms = stream_through_a_kill(classpath, cluster, tmp_path, "jfo", kill)
        acked = oks(sent)
        on_a = [s for s in acked if s["broker"] == "broker-a"]
        assert on_a and all(store_addr(s["offset_msg_id"]) == killed for s in on_a)
        # after the kill nothing is acked by the dead master
        assert not [s for s in on_a if s["start_ms"] > killed_ms]
        received = drain(classpath, cluster, "jfo", tmp_path, acked)
    assert_every_ack_read_back(acked, sent, received)
    assert {r["broker"] for r in received} == {"broker-a", "broker-b"}


def test_java_stream_through_a_dledger_leader_kill_reads_every_ack(
    classpath: str, tmp_path: Path
) -> None:
    with rmq_cluster("dledger", directory=tmp_path / "cluster") as cluster:
        def kill() -> tuple[str, float]:
            (leader,) = masters(cluster)
            addr = node_addr(cluster, leader)
            done = cluster.cli("kill", leader, "--wait")
            assert done.returncode == 0, done.stderr
            killed_ms = time.time() * 1000
            deadline = time.monotonic() + FAILOVER_WAIT_S
            while not (masters(cluster) - {leader}):
                assert time.monotonic() < deadline, "no new leader registered"
                time.sleep(0.2)  # another process elects: poll its status with a deadline
            return addr, killed_ms

        sent, killed, killed_ms = stream_through_a_kill(classpath, cluster, tmp_path, "jdl", kill)
        acked = oks(sent)
        before = [s for s in acked if store_addr(s["offset_msg_id"]) == killed]
        assert before and not [s for s in before if s["start_ms"] > killed_ms]
        received = drain(classpath, cluster, "jdl", tmp_path, acked)
    assert_every_ack_read_back(acked, sent, received)
