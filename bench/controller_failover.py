"""Controller-mode failover benchmark: time from ``kill -9`` of a master to a new master.

    python3 bench/controller_failover.py [--kills 10] [--group broker-a]

Starts ``rmq-cluster up 2m-2s-controller`` (real processes, a free base port, a temporary
directory); then ``--kills`` times: wait until the group's SyncStateSet holds both replicas,
``kill -9`` its master (by pid), and measure

* ``elected_s``: kill -> the controller leader names another master (GET_REPLICA_INFO every
  10 ms; what the issue's target is about);
* ``routed_s``: kill -> the NameServer routes the group's brokerId 0 to the new master (the new
  broker restarted in its role and registered: when clients can send again);

then restarts the killed node (``rmq-cluster restart``: it rejoins as a slave) before the next
kill.  Prints JSON: p50/p95/max of both, every sample, and the baseline measured in the same
run: the controller's answer latency (p50 of GET_REPLICA_INFO) and the configured detection
floor (controllerHeartBeatTimeoutMills), which bound any election from below.

Target (issue 25): p50 elected_s <= 2 s over 10 kills.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import checkout  # noqa: F401  (bench/checkout.py: this tree's rmq_cluster first)
import trio

from rmq_cluster.broker.controller_mode import DEFAULT_CONTROLLER_HEARTBEAT_TIMEOUT_MS
from rmq_cluster.cluster.protocol.controller import (
    ControllerRequestCode,
    GetReplicaInfoRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.protocol.route import ClusterInfo
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingError
from rmq_cluster.cluster.remoting.peer_auth import Handshake
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster

TARGET_P50_S = 2.0
POLL_S = 0.01
WAIT_S = 30.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def replica(cc: ControllerClient, group: str) -> tuple[int, int, frozenset[int]] | None:
    request = RemotingCommand.request(
        ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
        GetReplicaInfoRequestHeader(broker_name=group).to_ext_fields(),
    )
    try:
        r = await cc.call(request, 0.5)
    except RemotingError:
        return None
    if r.code != ResponseCode.SUCCESS:
        return None
    h = ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields)
    return (h.master_broker_id or -1, h.master_epoch or 0, SyncStateSet.decode(r.body).broker_ids)


async def routed_master(client: Any, ns_addr: str, group: str) -> str | None:
    try:
        r = await client.invoke(ns_addr, RemotingCommand.request(
            RequestCode.GET_BROKER_CLUSTER_INFO), 0.5)
    except RemotingError:
        return None
    data = ClusterInfo.decode(r.body).broker_addr_table.get(group)
    return data.broker_addrs.get(0) if data is not None else None


async def one_kill(cluster: RunningCluster, group: str, controllers: list[str]) -> dict[str, Any]:
    members = {n.broker_id: n for n in supervisor.load_state(cluster.dir).topology.brokers
               if n.group == group}
    state = supervisor.load_state(cluster.dir)
    async with open_remoting_client(node="bench-ctl") as client, open_remoting_client(
        node="bench-ctl-controllers", handshake=supervisor.controller_handshake(state)
    ) as ctl:
        cc = ControllerClient(ctl, controllers)
        with trio.fail_after(WAIT_S):
            while True:
                info = await replica(cc, group)
                if info is not None and info[0] in members and info[2] == frozenset(members):
                    break
                await trio.sleep(0.05)
        master_id, epoch, _sss = info
        victim = members[master_id]
        pid = supervisor.load_state(cluster.dir).node(victim.name).pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # a node this run started (its pid from the state file)
        killed = time.monotonic()
        elected = routed = None
        new_addr = None
        with trio.fail_after(WAIT_S):
            while elected is None or routed is None:
                if elected is None:
                    info = await replica(cc, group)
                    if info is not None and info[0] not in (-1, master_id):
                        elected = time.monotonic() - killed
                        new_addr = members[info[0]].addr
                if new_addr is not None and routed is None and (
                    await routed_master(client, cluster.namesrv_addr, group) == new_addr
                ):
                    routed = time.monotonic() - killed
                await trio.sleep(POLL_S)
    return {"killed": victim.name, "epoch_before": epoch, "elected_s": round(elected, 3),
            "routed_s": round(routed, 3)}


async def controller_latency(
    controllers: list[str], group: str, handshake: Handshake | None, n: int = 50
) -> float:
    samples = []
    async with open_remoting_client(node="bench-ctl-rtt", handshake=handshake) as client:
        cc = ControllerClient(client, controllers)
        for _ in range(n):
            t0 = time.monotonic()
            await replica(cc, group)
            samples.append(time.monotonic() - t0)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--group", default="broker-a")
    args = parser.parse_args()
    samples = []
    with rmq_cluster("2m-2s-controller") as cluster:
        state = supervisor.load_state(cluster.dir)
        controllers = [n.addr for n in state.topology.controllers]
        rtt = trio.run(controller_latency, controllers, args.group,
                       supervisor.controller_handshake(state))
        for _ in range(args.kills):
            sample = trio.run(one_kill, cluster, args.group, controllers)
            samples.append(sample)
            done = cluster.cli("restart", sample["killed"])
            if done.returncode != 0:
                raise SystemExit(f"restart failed: {done.stderr}")
    elected = [s["elected_s"] for s in samples]
    routed = [s["routed_s"] for s in samples]
    report = {
        "bench": "controller_failover",
        "profile": "2m-2s-controller",
        "kills": len(samples),
        "elected_s": {"p50": statistics.median(elected), "p95": pct(elected, 0.95),
                      "max": max(elected)},
        "routed_s": {"p50": statistics.median(routed), "p95": pct(routed, 0.95),
                     "max": max(routed)},
        "target_p50_elected_s": TARGET_P50_S,
        "target_met": statistics.median(elected) <= TARGET_P50_S,
        "baseline": {
            "controller_answer_p50_s": round(rtt, 6),
            "detection_floor_s": DEFAULT_CONTROLLER_HEARTBEAT_TIMEOUT_MS / 1000,
        },
        "samples": samples,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
