"""Controller mode end to end in one Trio loop, real sockets and stores: a NameServer, three
controllers and one master/slave group (SYNC).  The master stops; the slave is elected (from
the SyncStateSet), keeps its log, serves every acknowledged message and takes brokerId 0 in the
routes.  The old master comes back with a tail the new master never had: it cuts it at the
new epoch's start (epoch file) and rejoins as a slave with an identical CommitLog prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

from rmq_cluster.broker.controller import BrokerController
from rmq_cluster.cluster.protocol.route import TopicRouteData
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from rmq_cluster.store.message_store import MessageStore
from tests.integration.broker.conftest import Cluster, broker_settings, messages
from tests.integration.controller.controller_testlib import (
    running_controllers,
    until,
    wait_for,
)
from tests.integration.dledger.dledger_testlib import free_ports
from tests.integration.ha.ha_testlib import append_many

TOPIC = "CtlTopic"
GROUP = "broker-a"


@attrs.define
class Replica:
    settings: object
    store_dir: Path
    broker: BrokerController | None = None
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None

    @property
    def manager(self):  # type: ignore[no-untyped-def]
        assert self.broker is not None and self.broker.replicas is not None
        return self.broker.replicas

    @property
    def addr(self) -> str:
        b = self.settings.broker  # type: ignore[attr-defined]
        return f"127.0.0.1:{b.listen_port}"

    def serving_as(self, master: bool) -> bool:
        if self.broker is None or self.broker.replicas is None:
            return False
        m = self.broker.replicas
        return m.inner is not None and m.running is not None and m.is_master == master


async def start(nursery: trio.Nursery, r: Replica) -> None:
    r.broker = BrokerController(r.settings)  # type: ignore[arg-type]
    r.scope, r.done = trio.CancelScope(), trio.Event()

    async def run() -> None:
        assert r.scope is not None and r.done is not None and r.broker is not None
        try:
            with r.scope:
                await r.broker.run()
        finally:
            r.done.set()

    nursery.start_soon(run)


async def stop(r: Replica) -> None:
    assert r.scope is not None and r.done is not None
    r.scope.cancel()
    with trio.fail_after(10):
        await r.done.wait()


@asynccontextmanager
async def group_of_two(tmp_path: Path) -> AsyncIterator[tuple[object, list[Replica], Cluster]]:
    async with running_controllers(tmp_path) as ctl, trio.open_nursery() as nursery:
        ns = NamesrvServer(NamesrvConfig(
            kv_config_path=str(tmp_path / "ns" / "kv.json"),
            config_store_path=str(tmp_path / "ns" / "ns.properties"),
            bind_address="127.0.0.1", listen_port=0,
        ))
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        replicas = []
        for i in (1, 2):
            listen, fast, ha = free_ports(3)
            store_dir = tmp_path / f"b{i}"
            settings = broker_settings(
                store_dir, ns_addr, brokerId=str(i), brokerRole="SYNC_MASTER",
                listenPort=str(listen), fastListenPort=str(fast), haListenPort=str(ha),
                enableControllerMode="true", controllerAddr=";".join(ctl.addrs),
                controllerHeartBeatTimeoutMills="700", haMaxTimeSlaveNotCatchup="1500",
                mappedFileSizeCommitLog=str(1024 * 1024),
            )
            replicas.append(Replica(settings, store_dir))
        async with open_remoting_client(node="ctl-test") as client:
            caller = Cluster(ns, ns_addr, None, "", client, nursery,  # type: ignore[arg-type]
                             trio.CancelScope(), tmp_path)
            for r in replicas:
                await start(nursery, r)
            try:
                yield ctl, replicas, caller
            finally:
                for r in replicas:
                    if r.scope is not None:
                        r.scope.cancel()
                nursery.cancel_scope.cancel()


async def send_some(caller: Cluster, addr: str, n: int, start: int) -> list[bytes]:
    caller.addr = addr
    acked = []
    for i in range(start, start + n):
        body = f"msg-{i}".encode()
        r = await caller.send(TOPIC, body, queue_id=i % 4)
        if r.code == ResponseCode.SUCCESS:
            acked.append(body)
    return acked


async def read_all(caller: Cluster, addr: str) -> list[bytes]:
    caller.addr = addr
    out = []
    for q in range(4):
        offset = 0
        while True:
            r = await caller.pull(TOPIC, offset, queue_id=q, max_nums=64)
            if r.code != ResponseCode.SUCCESS:
                break
            got = messages(r)
            if not got:
                break
            out.extend(m.body for m in got)
            offset += len(got)
    return out


def commitlog_bytes(store_dir: Path) -> bytes:
    d = store_dir / "commitlog"
    return b"".join(p.read_bytes() for p in sorted(d.iterdir())).rstrip(b"\0")


@pytest.mark.slow
async def test_master_loss_election_and_old_master_rejoins_with_identical_prefix(
    tmp_path: Path,
) -> None:
    async with group_of_two(tmp_path) as (_ctl, replicas, caller):
        master = await wait_for(
            lambda: next((r for r in replicas if r.serving_as(True)), None), 15)
        slave = next(r for r in replicas if r is not master)
        await wait_for(lambda: slave.serving_as(False), 15)
        # SYNC: sends are acked once the slave replicates (and joins the SyncStateSet)
        await wait_for(lambda: master.manager.sync_state_set.broker_ids == {1, 2}, 15)
        acked = await send_some(caller, master.addr, 40, 0)
        assert len(acked) >= 30, len(acked)
        old_epoch = master.manager.epoch
        # the master goes away
        t0 = trio.current_time()
        await stop(master)
        await wait_for(lambda: slave.serving_as(True), 10)
        assert trio.current_time() - t0 < 5
        assert slave.manager.epoch == old_epoch + 1
        # every acknowledged message is on the new master
        got = await read_all(caller, slave.addr)
        assert set(acked) <= set(got)
        # routes name the new master as brokerId 0
        async def routed_to_new_master() -> bool:
            r = await caller.client.invoke(caller.ns_addr, RemotingCommand.request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}), 5)
            route = TopicRouteData.decode(bytes(r.body))
            addrs = {bd.broker_name: bd.broker_addrs for bd in route.broker_datas}
            return addrs[GROUP].get(0) == slave.addr

        await until(routed_to_new_master)
        # the old master wrote a tail nobody else has (as a master that lost its role would)
        store = MessageStore.open(master.settings.store)  # type: ignore[attr-defined]
        try:
            append_many(store, 1000, 25, topic="Stray")
        finally:
            store.close()
        new_master_prefix = commitlog_bytes(slave.store_dir)
        # it comes back: truncated at the new epoch's start, a slave, identical prefix
        await start(caller.nursery, master)
        await wait_for(lambda: master.serving_as(False), 15)
        assert master.manager.truncated_bytes > 0
        mine = commitlog_bytes(master.store_dir)
        assert new_master_prefix.startswith(mine) or mine.startswith(new_master_prefix)
        # it catches up and rejoins the SyncStateSet; SYNC sends are acked again
        await wait_for(lambda: slave.manager.sync_state_set.broker_ids == {1, 2}, 15)
        more = await send_some(caller, slave.addr, 10, 100)
        assert len(more) == 10
        await wait_for(lambda: commitlog_bytes(master.store_dir)
                       == commitlog_bytes(slave.store_dir), 10)
