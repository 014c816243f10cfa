"""Three controllers in one Trio loop on ephemeral ports, each stoppable on its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from rmq_cluster.cluster.protocol.controller import (
    BrokerHeartbeatRequestHeader,
    ControllerRequestCode,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
)
from rmq_cluster.cluster.protocol.controller_client import ControllerClient
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.controller.config import ControllerConfig
from rmq_cluster.controller.node import ControllerNode
from tests.integration.dledger.dledger_testlib import free_ports

WAIT_S = 10.0


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
