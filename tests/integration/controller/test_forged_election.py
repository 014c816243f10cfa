"""Issue 31 item 1, through real sockets against a live controller-mode group (three
controllers, a NameServer, two SYNC replicas of broker-a): a stranger forges REGISTER +
HEARTBEAT + ALTER_SYNC_STATE_SET + ELECT_MASTER to make "replica 3" -- a fake broker whose log
is empty -- the master.

* With ``clusterSecret`` set (what ``rmq-cluster up`` renders): every forged frame is refused at
  the gate (the connection closed, counted), a client with a wrong secret cannot even connect;
  the group keeps its master, epoch and SyncStateSet, takes sends, and every acked message reads
  back.
* With open ports (no secret, Apache-compatible) the stranger can lie in heartbeats and the
  controller elects the fake; the real replicas then refuse to follow it, because following
  would cut data they know was acknowledged: nothing is truncated, every acked message stays in
  both CommitLogs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from rmq_cluster.cluster.protocol.controller import (
    ControllerRequestCode,
    EpochEntry,
    EpochEntryCache,
)
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingConnectError
from rmq_cluster.cluster.remoting.peer_auth import peer_handshake
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer
from rmq_cluster.deploy.testing import cli
from tests.integration.controller.controller_testlib import (
    CALL_S,
    FAKE_ID,
    Controllers,
    Replica,
    controller_group,
    forge_election,
    master_and_slave,
    read_all,
    register_request,
    send_every,
    until,
    wait_for,
)

G = "broker-a"
SECRET = "test-cluster-secret-0123456789abcdef"
OPEN_PORTS_WARNING = "controller ports are open"
# nothing here kills a replica: a patient heartbeat timeout (and so master lease) keeps a
# loaded 2-core machine from fencing the master or electing anew mid-test (a 500 ms lease did)
STEADY_HEARTBEAT_MS = 3000


def commitlog_raw(store_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((store_dir / "commitlog").iterdir()))


async def fake_broker(nursery: trio.Nursery) -> str:
    """A "broker" whose log is empty at a newer epoch: what a replica that never held the data
    answers to GET_BROKER_EPOCH_CACHE once it is master."""

    def epoch_cache(conn: Any, request: RemotingCommand) -> RemotingCommand:
        cache = EpochEntryCache("c", G, FAKE_ID, (EpochEntry(1000, 0, 0),), 0)
        return request.response(ResponseCode.SUCCESS, None, {}, cache.encode())

    server = RemotingServer(ProcessorTable(
        {ControllerRequestCode.GET_BROKER_EPOCH_CACHE: epoch_cache}), node="fake-broker")
    host, port = await nursery.start(server.serve, "127.0.0.1", 0)
    return f"{host}:{port}"


def refused_or_cut(r: Replica) -> bool:
    """``r`` refused a master, or (a build without the guard) cut its log to follow it."""
    return bool(getattr(r.manager, "refused_masters", 0) >= 1 or r.manager.truncated_bytes)


def group_view(ctl: Controllers) -> tuple[int, int, frozenset[int], tuple[int, ...]]:
    leader = ctl.leader()
    assert leader is not None and leader.node is not None
    g = leader.node.state.group(G)
    assert g is not None
    return g.master_id, g.master_epoch, g.sync_state_set, tuple(i for i, _a in g.members)


@pytest.mark.slow
async def test_forged_election_is_refused_at_the_gate_and_the_group_keeps_its_master(
    tmp_path: Path, capfd: pytest.CaptureFixture[str],
) -> None:
    async with controller_group(tmp_path, secret=SECRET, heartbeat_timeout_ms=STEADY_HEARTBEAT_MS
                                ) as (ctl, replicas, caller), \
            trio.open_nursery() as nursery:
        master, _slave = await master_and_slave(replicas)
        assert OPEN_PORTS_WARNING not in capfd.readouterr().err
        acked = await send_every(caller, master.addr, 40, 0, "acked")
        before = group_view(ctl)
        leader = ctl.leader()
        assert leader is not None and leader.node is not None
        fake = await fake_broker(nursery)
        async with open_remoting_client(node="stranger") as stranger:
            outcomes = await forge_election(stranger, leader.addr, fake)
        assert all(o.startswith("refused") for o in outcomes), outcomes
        async with open_remoting_client(
                node="wrong-secret", handshake=peer_handshake("not-the-cluster-secret-42")
        ) as impostor:
            with pytest.raises(RemotingConnectError):
                await impostor.invoke(leader.addr, register_request(G, FAKE_ID, fake), CALL_S)
            for m in ctl.members:
                assert m.node is not None and m.node.peer_address is not None
                host, port = m.node.peer_address
                with pytest.raises(RemotingConnectError):
                    await impostor.invoke(f"{host}:{port}", register_request(G, 9, fake), CALL_S)
        assert leader.node.listen_gate is not None and leader.node.listen_gate.refused >= 6
        # nothing changed; the group works on
        assert group_view(ctl) == before
        assert master.serving_as(True) and master.manager.epoch == before[1]
        more = await send_every(caller, master.addr, 10, 100, "acked")
        got = await read_all(caller, master.addr)
        assert set(acked + more) <= set(got)
        # the admin path proves the secret too (and gets nothing without it)
        args = ["getSyncStateSet", "-n", caller.ns_addr, "-a", ";".join(ctl.addrs), "-b", G,
                "--json"]
        done = await trio.to_thread.run_sync(lambda: cli(*args, "--cluster-secret", SECRET))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)[G]["masterEpoch"] == before[1]
        done = await trio.to_thread.run_sync(lambda: cli(*args))
        assert done.returncode != 0
        nursery.cancel_scope.cancel()


@pytest.mark.slow
async def test_replicas_refuse_a_forged_master_that_lacks_acked_data(
    tmp_path: Path, capfd: pytest.CaptureFixture[str],
) -> None:
    async with controller_group(tmp_path, heartbeat_timeout_ms=STEADY_HEARTBEAT_MS
                                ) as (ctl, replicas, caller), \
            trio.open_nursery() as nursery:
        master, slave = await master_and_slave(replicas)
        assert capfd.readouterr().err.count(OPEN_PORTS_WARNING) == 3  # one per controller
        acked = await send_every(caller, master.addr, 40, 0, "acked")
        leader = ctl.leader()
        assert leader is not None and leader.node is not None
        fake = await fake_broker(nursery)
        async with open_remoting_client(node="stranger") as stranger:
            # open ports: the stranger's lies are believed and the fake is elected ...
            async def fake_elected() -> bool:
                await forge_election(stranger, leader.addr, fake)
                return group_view(ctl)[0] == FAKE_ID

            await until(fake_elected, 15)
            # ... but neither real replica follows it: that would cut acked data (a build
            # without the guard cuts its log to the fake's empty one instead)
            for r in (master, slave):
                await wait_for(functools.partial(refused_or_cut, r), 15)
        for r in (master, slave):
            assert r.manager.truncated_bytes == 0
            raw = commitlog_raw(r.store_dir)
            missing = [b for b in acked if b not in raw]
            assert not missing, (r.addr, missing[:3])
        nursery.cancel_scope.cancel()
