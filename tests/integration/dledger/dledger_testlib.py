"""A DLedger group of brokers (+1 NameServer) in one Trio loop on loopback ports."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.route import ClusterInfo
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.dledger.commitlog_adapter import DLedgerCommitLog
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import _run_broker, broker_settings
from tests.ports import free_ports

GROUP = "broker-dl"
WAIT_S = 20.0


@attrs.define
class Member:
    self_id: str
    store_dir: Path
    peers: str
    ns_addr: str
    ctrl: BrokerNode | None = None
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None
    addr: str = ""

    @property
    def store(self) -> DLedgerCommitLog:
        """The DLedger CommitLog of this member's store (role, node, applied index)."""
        assert self.ctrl is not None and self.ctrl.dledger_role is not None
        return self.ctrl.dledger_role.backend

    @property
    def running(self) -> bool:
        return self.done is not None and not self.done.is_set()


@attrs.define
class Group:
    ns_addr: str
    members: list[Member]
    nursery: trio.Nursery
    client: RemotingClient
    #: extra broker properties of every member (clusterSecret, DLedger timings, ...)
    props: dict[str, str] = attrs.field(factory=dict)

    async def start(self, m: Member) -> None:
        settings = broker_settings(
            m.store_dir, m.ns_addr, brokerName=GROUP, enableDLegerCommitLog="true",
            dLegerGroup=GROUP, dLegerPeers=m.peers, dLegerSelfId=m.self_id,
            brokerClusterName="DlCluster", **self.props,
        )
        m.ctrl = BrokerNode(settings, node=m.self_id)
        m.scope = trio.CancelScope()
        m.done = trio.Event()
        host, port = await self.nursery.start(_run_broker, m.ctrl, m.scope, m.done)
        m.addr = f"{host}:{port}"

    async def stop(self, m: Member) -> None:
        assert m.scope is not None and m.done is not None
        m.scope.cancel()
        with trio.fail_after(WAIT_S):
            await m.done.wait()

    async def leader(self, *, exclude: Member | None = None) -> Member:
        """The member that is a ready leader, registered as brokerId 0 on the NameServer."""
        with trio.fail_after(WAIT_S):
            while True:
                for m in self.members:
                    if m is exclude or not m.running or m.ctrl is None:
                        continue
                    if m.store.leader_ready and await self.routed_master() == m.addr:
                        return m
                await trio.sleep(0.05)

    async def routed_master(self) -> str | None:
        req = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        try:
            resp = await self.client.invoke(self.ns_addr, req, 2.0)
        except Exception:
            return None
        if resp.code != ResponseCode.SUCCESS:
            return None
        data = ClusterInfo.decode(resp.body).broker_addr_table.get(GROUP)
        return None if data is None else data.broker_addrs.get(0)


@asynccontextmanager
async def dledger_group(tmp_path: Path, size: int = 3, **props: str) -> AsyncIterator[Group]:
    """``size`` brokers of one DLedger group (+1 NameServer); ``props``: broker properties
    every member gets (``clusterSecret=...`` authenticates the dLegerPeers ports)."""
    ns_cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "ns" / "kvConfig.json"),
        config_store_path=str(tmp_path / "ns" / "namesrv.properties"),
        bind_address="127.0.0.1",
        listen_port=0,
    )
    ports = free_ports(size)
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(ns_cfg)
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        members = [Member(f"n{i}", tmp_path / f"n{i}", peers, ns_addr) for i in range(size)]
        async with open_remoting_client(node="dl-test") as client:
            group = Group(ns_addr, members, nursery, client, dict(props))
            try:
                for m in members:
                    await group.start(m)
                yield group
            finally:
                for m in members:
                    if m.running:
                        await group.stop(m)
        nursery.cancel_scope.cancel()
