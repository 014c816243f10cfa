"""Real processes: ``rmq-cluster up 2m-2s-controller`` (1 NameServer, 3 controllers, two
master/slave groups, SYNC), a producer sending with acks recorded, ``kill -9`` of broker-a's
master: the controller elects the slave within 5 s and routes follow it; every acknowledged
message is readable; the old master restarted comes back as a slave (epoch file: any tail past
the new epoch's start is cut) and ends with a CommitLog identical to the new master's."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest
import trio

from rmq_cluster.client.config import ClientConfig
from rmq_cluster.client.model import Message
from rmq_cluster.client.producer import Producer
from rmq_cluster.cluster.protocol.controller import (
    ControllerRequestCode,
    GetReplicaInfoRequestHeader,
    ReplicaInfoResponseHeader,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.protocol.message import iter_records
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingError
from rmq_cluster.cluster.remoting.peer_auth import peer_handshake
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import RunningCluster, cli, rmq_cluster

TOPIC = "CtlProcTopic"
GROUP = "broker-a"
IN_FLIGHT = 16
AFTER_KILL = 200
WAIT_S = 30.0
ELECTION_LIMIT_S = 5.0


def group_nodes(cluster: RunningCluster, group: str = GROUP) -> dict[str, dict]:
    return {n["name"]: n for n in cluster.status()["nodes"]
            if n["kind"] == "broker" and n["group"] == group}


def master_of(cluster: RunningCluster, group: str = GROUP) -> dict | None:
    for n in group_nodes(cluster, group).values():
        if n.get("alive") and n.get("role") == "MASTER":
            return n
    return None


def commitlog(cluster: RunningCluster, name: str) -> bytes:
    d = cluster.dir / "store" / name / "commitlog"
    return b"".join(p.read_bytes() for p in sorted(Path(d).iterdir())).rstrip(b"\0")


async def produce(producer: Producer, prefix: str, acked: list[bytes], stop: trio.Event,
                  count: int | None = None) -> None:
    counter = iter(range(count if count is not None else 10**9))

    async def worker() -> None:
        for i in counter:
            if stop.is_set():
                return
            body = f"{prefix}-{i:06d}".encode()
            try:
                await producer.send(Message(TOPIC, body), timeout=10.0)
            except Exception:
                continue
            acked.append(body)

    async with trio.open_nursery() as n:
        for _ in range(IN_FLIGHT):
            n.start_soon(worker)


async def read_queue(client: RemotingClient, addr: str, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        ext = {
            "consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id),
            "queueOffset": str(offset), "maxMsgNums": "1000", "sysFlag": "4",
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0",
        }
        resp = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext))
        if resp.code != ResponseCode.SUCCESS:
            return out
        out += [r.body for r in iter_records(bytes(resp.body))]
        offset = int(resp.ext_fields["nextBeginOffset"])


async def until_new_master(controllers: list[str], old_id: int, secret: str) -> None:
    """Ask the controller leader every 20 ms until broker-a's master is not ``old_id``."""
    request = RemotingCommand.request(
        ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
        GetReplicaInfoRequestHeader(broker_name=GROUP).to_ext_fields(),
    )
    async with open_remoting_client(node="ctl-watch", handshake=peer_handshake(secret)) as client:
        cc = ControllerClient(client, controllers)
        while True:
            with contextlib.suppress(RemotingError):
                r = await cc.call(request, 0.5)
                if r.code == ResponseCode.SUCCESS:
                    master = ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields)
                    if master.master_broker_id not in (None, -1, old_id):
                        return
            await trio.sleep(0.02)


@pytest.mark.slow
def test_kill_master_elects_slave_no_acked_loss_old_master_rejoins() -> None:
    with rmq_cluster("2m-2s-controller") as cluster:
        deadline = time.monotonic() + WAIT_S
        while (old := master_of(cluster)) is None or any(
            n.get("sync_state_set") != [1, 2] for n in group_nodes(cluster).values()
        ):
            assert time.monotonic() < deadline, group_nodes(cluster)
            time.sleep(0.2)
        old_name = old["name"]
        controllers = [n["addr"] for n in cluster.status()["nodes"] if n["kind"] == "controller"]
        secret = supervisor.load_state(cluster.dir).topology.cluster_secret
        cc = ClientConfig(namesrv_addr=cluster.namesrv_addr, poll_namesrv_interval_s=0.2)
        acked: list[bytes] = []
        timeline: dict[str, float] = {}

        async def phase1() -> None:
            async with Producer("PG", client_config=cc, send_timeout_s=10.0) as p:
                await produce(p, "a", acked, trio.Event(), 300)
                stop = trio.Event()

                async def killer() -> None:
                    await trio.sleep(0.2)  # kill with sends in flight
                    os.kill(old["pid"], signal.SIGKILL)  # the node's pid (status): kill -9
                    timeline["killed"] = time.monotonic()
                    with trio.fail_after(WAIT_S):
                        await until_new_master(controllers, old["broker_id"], secret)
                    timeline["elected"] = time.monotonic()
                    mark = len(acked)
                    with trio.fail_after(WAIT_S):
                        while True:
                            if len(acked) >= mark + AFTER_KILL:
                                break
                            await trio.sleep(0.05)
                    stop.set()

                async with trio.open_nursery() as n:
                    n.start_soon(killer)
                    n.start_soon(produce, p, "b", acked, stop)

        trio.run(phase1)
        deadline = time.monotonic() + WAIT_S
        while (new := master_of(cluster)) is None or new["name"] == old_name:
            assert time.monotonic() < deadline, group_nodes(cluster)
            time.sleep(0.05)
        elected_s = timeline["elected"] - timeline["killed"]
        log = (cluster.dir / "logs" / "controller-0.log").read_text()
        assert '"master elected"' in log
        assert new["epoch"] == old["epoch"] + 1
        assert elected_s < ELECTION_LIMIT_S
        new_name = new["name"]

        async def verify(names: list[str]) -> None:
            addrs = {n["name"]: n["addr"] for n in cluster.status()["nodes"]
                     if n["kind"] == "broker" and n["role"] == "MASTER"}
            async with open_remoting_client(node="ctl-verify") as client:
                bodies: list[bytes] = []
                for name in names:
                    for q in range(8):
                        bodies += await read_queue(client, addrs[name], q)
            missing = set(acked) - set(bodies)
            assert not missing, (len(missing), sorted(missing)[:5])

        other = master_of(cluster, "broker-b")
        assert other is not None
        trio.run(verify, [new_name, other["name"]])
        # mqadmin names
        addrs = ";".join(n["addr"] for n in cluster.status()["nodes"]
                         if n["kind"] == "controller")
        done = cli("getSyncStateSet", "-n", cluster.namesrv_addr, "--cluster-secret", secret,
                   "-a", addrs, "-b", GROUP, "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)[GROUP]["masterEpoch"] == new["epoch"]
        # the old master comes back as a slave with an identical prefix
        done = cluster.cli("restart", old_name)
        assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + WAIT_S
        while True:
            nodes = group_nodes(cluster)
            if (nodes[old_name].get("role") == "SLAVE" and nodes[old_name].get("in_sync")
                    and commitlog(cluster, old_name) == commitlog(cluster, new_name)):
                break
            assert time.monotonic() < deadline, nodes
            time.sleep(0.2)
        done = cli("getBrokerEpoch", "-n", cluster.namesrv_addr, "-b", GROUP, "--json")
        assert done.returncode == 0, done.stderr
        epochs = json.loads(done.stdout)
        assert {e["epochList"][-1]["epoch"] for e in epochs} == {new["epoch"]}
        print(f"acked={len(acked)} elected_after_s={elected_s:.2f} old={old_name} "
              f"new={new_name} epoch={new['epoch']}")
