"""Apache's RocketMQ C++ client (rocketmq-client-cpp 1.0.1 and 2.1.0, unmodified, as PyPI
packages ship librocketmq.so) producing and consuming through a real rmq-cluster: NameServer
and broker as OS processes, the C++ client in a process of its own (tests/compat/cpp_probe.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import (
    UP_TIMEOUT_S,
    RunningCluster,
    become_subreaper,
    cli,
    kill_leftovers,
    rmq_cluster,
)
from rmq_cluster.deploy.topology import resolve_profile

PROBE = Path(__file__).with_name("cpp_probe.py")
PROBE_TIMEOUT_S = 120
#: How long a DLedger group may take to elect and register a new leader.
FAILOVER_WAIT_S = 30.0

pytestmark = pytest.mark.slow


def run_probe(client: tuple[str, Path], cluster: RunningCluster, topic: str, scenario: str,
              home: Path, *extra: str) -> dict[str, Any]:
    version, client_dir = client
    if version.startswith("2."):
        extra = (*extra, "--skip-consumer-shutdown")  # see cpp_probe.py
    home.mkdir(parents=True, exist_ok=True)  # the C++ client logs under $HOME/logs
    done = subprocess.run(
        [sys.executable, str(PROBE), str(client_dir), cluster.namesrv_addr, topic, scenario,
         *extra],
        capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
        env={**os.environ, "HOME": str(home)}, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """One ``single`` cluster for the scenarios that need nothing else: each client version
    writes topics of its own (``topic_for``), so none reads another's messages."""
    with rmq_cluster("single", directory=tmp_path_factory.mktemp("cpp-single")) as cluster:
        yield cluster


def topic_for(client: tuple[str, Path], name: str) -> str:
    return name + client[0].replace(".", "")


def test_cpp_producer_and_push_consumer_with_tag_filter(
    cpp_client: tuple[str, Path], single: RunningCluster, tmp_path: Path
) -> None:
    out = run_probe(cpp_client, single, topic_for(cpp_client, "CppTopic"), "produce-consume",
                    tmp_path / "home")
    sent, received = out["sent"], out["received"]
    assert len(sent) == 12 and all(s["status"] == "OK" for s in sent.values())
    # exactly the TagA/TagB messages, with the ids the producer was given
    wanted = {mid for mid, s in sent.items() if s["tags"] in ("TagA", "TagB")}
    assert set(received) == wanted
    for mid, r in received.items():
        assert r["body"] == sent[mid]["body"] and r["tags"] == sent[mid]["tags"]
        assert r["keys"] == f"key-{r['idx']}" and r["idx"] == sent[mid]["idx"]
    # queue offsets are dense per queue, as the broker assigned them
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in received.values():
        per_queue[r["queue"]].append(r["offset"])
    assert all(offsets for offsets in per_queue.values())


def test_cpp_async_oneway_orderly_batch_and_pull(
    cpp_client: tuple[str, Path], single: RunningCluster, tmp_path: Path
) -> None:
    out = run_probe(cpp_client, single, topic_for(cpp_client, "CppModes"), "modes",
                    tmp_path / "home")
    assert out["async_acked"] == 12 and out["async_failed"] == []
    assert out["orderly_status"] == ["OK"] * 6
    assert out["batch_status"] == "OK"
    pulled = out["pulled"]
    bodies = sorted(m["body"] for m in pulled)
    assert bodies == sorted(f"cpp-{i}" for i in range(out["expected"]))
    orderly = [m for m in pulled if m["tags"] == "Orderly"]
    assert len({m["queue"] for m in orderly}) == 1  # one key, one queue, in send order
    assert [m["body"] for m in sorted(orderly, key=lambda m: m["offset"])] == [
        f"cpp-{i}" for i in range(16, 22)
    ]


def test_cpp_consumer_reads_acked_messages_from_the_slave_after_the_master_dies(
    cpp_client: tuple[str, Path], tmp_path: Path
) -> None:
    """2m-2s-sync: the C++ producer's acked messages are all read by a C++ consumer after
    ``kill -9`` of broker-a's master (its slave serves them; the route keeps the slave)."""
    with rmq_cluster("2m-2s-sync", directory=tmp_path / "cluster") as cluster:
        sent = run_probe(cpp_client, cluster, "CppHa", "produce", tmp_path / "home",
                         "--count", "40")["sent"]
        assert len(sent) == 40 and {s["status"] for s in sent.values()} == {"OK"}
        killed = cluster.cli("kill", "broker-a", "--wait")
        assert killed.returncode == 0, killed.stderr
        got = run_probe(cpp_client, cluster, "CppHa", "consume", tmp_path / "home",
                        "--count", "40")["received"]
    assert set(got) == set(sent)
    assert {r["body"] for r in got.values()} == {s["body"] for s in sent.values()}


def _masters(cluster: RunningCluster) -> set[str]:
    status = cluster.cli("status", "--json")
    assert status.returncode in (0, 1), status.stderr  # 1: a node is down
    nodes = json.loads(status.stdout)["nodes"]
    return {n["name"] for n in nodes if n.get("alive") and str(n.get("role")).endswith("MASTER")}


def test_cpp_client_through_a_dledger_leader_failover(
    cpp_client: tuple[str, Path], tmp_path: Path
) -> None:
    """dledger (a Raft group of 3): C++ sends acked by the group, ``kill -9`` of the leader,
    a new leader is elected and registered, the C++ producer writes through it, and a C++
    consumer reads every acked message."""
    with rmq_cluster("dledger", directory=tmp_path / "cluster") as cluster:
        home = tmp_path / "home"
        sent = run_probe(cpp_client, cluster, "CppDl", "produce", home, "--count", "30")["sent"]
        assert len(sent) == 30 and {s["status"] for s in sent.values()} == {"OK"}
        (leader,) = _masters(cluster)
        killed = cluster.cli("kill", leader, "--wait")
        assert killed.returncode == 0, killed.stderr
        deadline = time.monotonic() + FAILOVER_WAIT_S
        while not (_masters(cluster) - {leader}):
            assert time.monotonic() < deadline, "no new leader registered"
            time.sleep(0.2)  # another process elects: poll its status with a deadline
        more = run_probe(cpp_client, cluster, "CppDl", "produce", home, "--count", "10")["sent"]
        assert len(more) == 10 and {s["status"] for s in more.values()} == {"OK"}
        got = run_probe(cpp_client, cluster, "CppDl", "consume", home, "--count", "40")
    assert set(got["received"]) == set(sent) | set(more)


CRED_LINE = re.compile(r"^accessKey=(\S+) secretKey=(\S+)$", re.M)


def test_cpp_client_signs_requests_for_plain_acl(
    cpp_client: tuple[str, Path], tmp_path: Path
) -> None:
    """``rmq-cluster up --acl``: the C++ client's own request signing (its ClientRPCHook)
    passes our ACL with the printed credentials; with a wrong secret every send fails."""
    become_subreaper()
    cluster_dir = tmp_path / "acl"
    port = supervisor.free_base_port(resolve_profile("single"))
    pids: dict[str, int] = {}
    try:
        up = cli("up", "single", "--acl", "--dir", str(cluster_dir), "--base-port", str(port),
                 "--timeout", str(UP_TIMEOUT_S))
        assert up.returncode == 0, up.stderr
        ak, sk = CRED_LINE.findall(up.stdout)[0]
        state = supervisor.load_state(cluster_dir)
        pids = {r.name: r.pid for r in state.records() if r.pid is not None}
        cluster = RunningCluster(
            name="acl", profile="single", dir=cluster_dir, base_port=port,
            namesrv_addr=state.topology.namesrv_addr, nodes=[], ready_s=0.0,
        )
        out = run_probe(cpp_client, cluster, "CppAcl", "produce-consume", tmp_path / "home",
                        "--access-key", ak, "--secret-key", sk)
        assert len(out["received"]) == 8  # TagA + TagB of 12
        _version, client_dir = cpp_client
        refused = subprocess.run(
            [sys.executable, str(PROBE), str(client_dir), cluster.namesrv_addr, "CppAclBad",
             "produce-consume", "--access-key", ak, "--secret-key", "not-" + sk],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
            env={**os.environ, "HOME": str(tmp_path / "home")}, stdin=subprocess.DEVNULL,
        )
        assert refused.returncode != 0 and "ProducerSendSyncFailed" in refused.stderr
    finally:
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
