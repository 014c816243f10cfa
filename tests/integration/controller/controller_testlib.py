"""Three controllers in one Trio loop on ephemeral ports, each stoppable on its own; a
controller-mode group of real brokers (``controller_group``) beside them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import attrs
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.controller import (
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatRequestHeader,
    ControllerRequestCode,
    ElectMasterRequestHeader,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.errors import RemotingError
from rmq_cluster.controller.config import ControllerConfig
from rmq_cluster.controller.node import ControllerNode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.broker.conftest import Cluster, broker_settings, messages
from tests.integration.dledger.dledger_testlib import free_ports

WAIT_S = 10.0
TOPIC = "CtlTopic"
GROUP = "broker-a"


@attrs.define
class Member:
    config: ControllerConfig
    node: ControllerNode | None = None
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.config.listen_port}"


@attrs.define
class Controllers:
    nursery: trio.Nursery
    members: list[Member]

    @property
    def addrs(self) -> list[str]:
        return [m.addr for m in self.members]

    async def start(self, i: int) -> None:
        m = self.members[i]
        m.node = ControllerNode(m.config, fsync=False)
        m.scope, m.done = trio.CancelScope(), trio.Event()

        async def run(*, task_status: trio.TaskStatus[None]) -> None:
            assert m.scope is not None and m.done is not None and m.node is not None
            try:
                with m.scope:
                    await m.node.serve(task_status=task_status)
            finally:
                m.done.set()

        await self.nursery.start(run)

    async def stop(self, i: int) -> None:
        m = self.members[i]
        assert m.scope is not None and m.done is not None
        m.scope.cancel()
        await m.done.wait()
        m.node = None

    def leader(self) -> Member | None:
        for m in self.members:
            if m.node is not None and m.node.is_ready_leader:
                return m
        return None

    async def wait_leader(self, timeout: float = WAIT_S) -> Member:
        return await wait_for(self.leader, timeout)


async def wait_for(probe: Callable[[], object], timeout: float = WAIT_S, step: float = 0.02):  # type: ignore[no-untyped-def]
    """Poll ``probe`` until it returns something truthy (with a deadline)."""
    with trio.fail_after(timeout):
        while True:
            got = probe()
            if got:
                return got
            await trio.sleep(step)


async def until(probe: Callable[[], Awaitable[bool]], timeout: float = WAIT_S) -> None:
    """Poll the async ``probe`` (a network question) until it says yes, with a deadline."""
    with trio.fail_after(timeout):
        while True:
            if await probe():
                return
            await trio.sleep(0.05)


def controller_configs(root: Path, n: int = 3, **overrides: object) -> list[ControllerConfig]:
    ports = free_ports(2 * n)
    peers = ";".join(f"n{i}-127.0.0.1:{ports[2 * i]}" for i in range(n))
    return [
        ControllerConfig(
            group="ctl", peers=peers, self_id=f"n{i}", store_path=str(root / "controller"),
            listen_port=ports[2 * i + 1], **overrides,  # type: ignore[arg-type]
        )
        for i in range(n)
    ]


@asynccontextmanager
async def running_controllers(
    root: Path, n: int = 3, **overrides: object
) -> AsyncIterator[Controllers]:
    async with trio.open_nursery() as nursery:
        ctl = Controllers(nursery, [Member(c) for c in controller_configs(root, n, **overrides)])
        for i in range(n):
            await ctl.start(i)
        try:
            yield ctl
        finally:
            nursery.cancel_scope.cancel()


def register_request(group: str, broker_id: int, addr: str) -> RemotingCommand:
    h = RegisterBrokerToControllerRequestHeader(
        cluster_name="c", broker_name=group, broker_id=broker_id, broker_address=addr
    )
    return RemotingCommand.request(ControllerRequestCode.CONTROLLER_REGISTER_BROKER,
                                   h.to_ext_fields())


def heartbeat_request(group: str, broker_id: int, addr: str, max_offset: int = 0,
                      epoch: int = 0) -> RemotingCommand:
    h = BrokerHeartbeatRequestHeader(
        cluster_name="c", broker_addr=addr, broker_name=group, broker_id=broker_id,
        epoch=epoch, max_offset=max_offset, heartbeat_timeout_mills=600,
    )
    return RemotingCommand.request(ControllerRequestCode.BROKER_HEARTBEAT, h.to_ext_fields())


async def replica_info(
    cc: ControllerClient, group: str
) -> tuple[ReplicaInfoResponseHeader, SyncStateSet]:
    h = GetReplicaInfoRequestHeader(broker_name=group)
    r = await cc.call(RemotingCommand.request(
        ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO, h.to_ext_fields()))
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    return ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields), SyncStateSet.decode(r.body)


# ----------------------------------------------------------------- a group of real brokers


@attrs.define
class Replica:
    settings: object
    store_dir: Path
    broker: BrokerNode | None = None
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
    r.broker = BrokerNode(r.settings)  # type: ignore[arg-type]
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
async def controller_group(
    tmp_path: Path, *, replicas: int = 2, started: int | None = None, secret: str = "",
    heartbeat_timeout_ms: int = 700, **controller_overrides: object,
) -> AsyncIterator[tuple[Controllers, list[Replica], Cluster]]:
    """A NameServer, three controllers and ``replicas`` controller-mode replicas of broker-a
    (SYNC; brokerId 1..n), the first ``started`` (default all) running; ``secret`` is every
    node's clusterSecret ("" = open ports)."""
    async with running_controllers(tmp_path, 3, cluster_secret=secret,
                                   **controller_overrides) as ctl, \
            trio.open_nursery() as nursery:
        ns = NamesrvServer(NamesrvConfig(
            kv_config_path=str(tmp_path / "ns" / "kv.json"),
            config_store_path=str(tmp_path / "ns" / "ns.properties"),
            bind_address="127.0.0.1", listen_port=0,
        ))
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        group = []
        for i in range(1, replicas + 1):
            listen, fast, ha = free_ports(3)
            store_dir = tmp_path / f"b{i}"
            settings = broker_settings(
                store_dir, ns_addr, brokerId=str(i), brokerRole="SYNC_MASTER",
                listenPort=str(listen), fastListenPort=str(fast), haListenPort=str(ha),
                enableControllerMode="true", controllerAddr=";".join(ctl.addrs),
                controllerHeartBeatTimeoutMills=str(heartbeat_timeout_ms),
                haMaxTimeSlaveNotCatchup=str(max(1500, 2 * heartbeat_timeout_ms)),
                mappedFileSizeCommitLog=str(1024 * 1024), clusterSecret=secret,
            )
            group.append(Replica(settings, store_dir))
        async with open_remoting_client(node="ctl-test") as client:
            caller = Cluster(ns, ns_addr, None, "", client, nursery,  # type: ignore[arg-type]
                             trio.CancelScope(), tmp_path)
            for r in group[:started]:
                await start(nursery, r)
            try:
                yield ctl, group, caller
            finally:
                for r in group:
                    if r.scope is not None:
                        r.scope.cancel()
                nursery.cancel_scope.cancel()


def group_of_two(tmp_path: Path) -> AbstractAsyncContextManager[
        tuple[Controllers, list[Replica], Cluster]]:
    return controller_group(tmp_path)


async def master_and_slave(replicas: list[Replica]) -> tuple[Replica, Replica]:
    """Once one of the first two replicas serves as master, the other as its slave, and both
    are in the SyncStateSet (SYNC sends are acked)."""
    pair = replicas[:2]
    master = await wait_for(lambda: next((r for r in pair if r.serving_as(True)), None), 15)
    slave = next(r for r in pair if r is not master)
    await wait_for(lambda: slave.serving_as(False), 15)
    await wait_for(lambda: master.manager.sync_state_set.broker_ids == {1, 2}, 15)
    return master, slave


async def send_some(caller: Cluster, addr: str, n: int, start: int,
                    prefix: str = "msg") -> list[bytes]:
    caller.addr = addr
    acked = []
    for i in range(start, start + n):
        body = f"{prefix}-{i}".encode()
        r = await caller.send(TOPIC, body, queue_id=i % 4)
        if r.code == ResponseCode.SUCCESS:
            acked.append(body)
    return acked


async def send_every(caller: Cluster, addr: str, n: int, start: int, prefix: str = "msg",
                     timeout: float = WAIT_S) -> list[bytes]:
    """Send ``n`` messages, each again until it is acked (a master briefly fenced on a loaded
    machine refuses a send; that is not what the callers test), within one deadline."""
    caller.addr = addr
    bodies = []
    with trio.fail_after(timeout):
        for i in range(start, start + n):
            body = f"{prefix}-{i}".encode()
            while True:
                r = await caller.send(TOPIC, body, queue_id=i % 4)
                if r.code == ResponseCode.SUCCESS:
                    break
                await trio.sleep(0.05)  # a refused send; try it again
            bodies.append(body)
    return bodies


async def read_all(caller: Cluster, addr: str) -> list[bytes]:
    caller.addr = addr
    out: list[bytes] = []
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


# ----------------------------------------------------------------- the forged election (issue 31)

#: The replica id a stranger makes up; how long each of its calls may take.
FAKE_ID = 3
CALL_S = 2.0


async def attempt(client: RemotingClient, addr: str, request: RemotingCommand) -> str:
    try:
        r = await client.invoke(addr, request, CALL_S)
    except (RemotingError, OSError) as exc:
        return f"refused: {type(exc).__name__}"
    return f"answered {r.code}"


async def forge_election(client: RemotingClient, addr: str, fake: str) -> list[str]:
    """The forged sequence against the controller at ``addr``; what happened to each frame."""
    master, epoch, sse = 1, 1, 2  # guesses, unless the port answers a stranger
    with contextlib.suppress(RemotingError, OSError, ValueError):
        r = await client.invoke(addr, RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
            GetReplicaInfoRequestHeader(broker_name=GROUP).to_ext_fields()), CALL_S)
        h = ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields)
        master, epoch = h.master_broker_id or master, h.master_epoch or epoch
        sse = SyncStateSet.decode(r.body).epoch
    lie = heartbeat_request(GROUP, FAKE_ID, fake, max_offset=10**12, epoch=epoch)
    alter = RemotingCommand.request(
        ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
        AlterSyncStateSetRequestHeader(broker_name=GROUP, master_broker_id=master,
                                       master_epoch=epoch).to_ext_fields(),
        SyncStateSet(frozenset({1, 2, FAKE_ID}), sse).encode())
    elect = RemotingCommand.request(
        ControllerRequestCode.CONTROLLER_ELECT_MASTER,
        ElectMasterRequestHeader(cluster_name="c", broker_name=GROUP, broker_id=FAKE_ID,
                                 designate_elect=True).to_ext_fields())
    out: list[str] = []
    for request in (register_request(GROUP, FAKE_ID, fake), lie, alter, lie, elect):
        out.append(await attempt(client, addr, request))
    return out
