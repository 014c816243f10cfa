"""A NameServer and a Broker in one Trio loop on ephemeral loopback ports; raw-frame helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from rmq_cluster.broker.config import BrokerSettings, load_broker_config
from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.cluster.protocol.message import (
    MessageConst,
    StoredMessage,
    encode_properties,
    iter_records,
)
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer

WAIT_S = 5.0
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_COMMIT = 0x1


def broker_settings(store_dir: Path, namesrv_addr: str, **props: str) -> BrokerSettings:
    values = {
        "brokerClusterName": "TestCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "listenPort": "0",
        "bindAddress": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(store_dir),
        "namesrvAddr": namesrv_addr,
        "mappedFileSizeCommitLog": str(32 * 1024 * 1024),
        "mappedFileSizeConsumeQueue": str(20 * 100_000),
        "flushIntervalConsumeQueue": "200",
        # small IndexFiles: tests (and the Spark tests that copy these stores) stay small on disk
        "maxHashSlotNum": "4096",
        "maxIndexNum": "16384",
    }
    values.update(props)
    return load_broker_config(values).settings


@attrs.define
class Cluster:
    ns: NamesrvServer
    ns_addr: str
    broker: BrokerNode
    addr: str
    client: RemotingClient
    nursery: trio.Nursery
    broker_scope: trio.CancelScope
    store_dir: Path

    async def stop_broker(self) -> None:
        self.broker_scope.cancel()
        with trio.fail_after(WAIT_S):
            await self.broker_done.wait()

    broker_done: trio.Event = attrs.field(factory=trio.Event)

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        timeout: float = WAIT_S,
        version: int = 407,
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext or {}, body, version=version)
        return await self.client.invoke(self.addr, request, timeout)

    async def send(
        self,
        topic: str,
        body: bytes = b"hello",
        *,
        tags: str | None = None,
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        code: int = RequestCode.SEND_MESSAGE_V2,
        extra: dict[str, str] | None = None,
    ) -> RemotingCommand:
        p = dict(props or {})
        if tags is not None:
            p[MessageConst.PROPERTY_TAGS] = tags
        ext = {
            "a": "PG",
            "b": topic,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": "0",
            "g": "1700000000000",
            "h": "0",
            "i": encode_properties(p).decode(),
            "j": "0",
            "k": "false",
            "m": "false",
        }
        ext.update(extra or {})
        return await self.call(code, ext, body)

    async def pull(
        self,
        topic: str,
        offset: int = 0,
        *,
        queue_id: int = 0,
        group: str = "CG",
        sub: str = "*",
        suspend_ms: int = 0,
        sys_flag: int | None = None,
        max_nums: int = 32,
        commit_offset: int = 0,
        timeout: float = WAIT_S,
    ) -> RemotingCommand:
        flag = PULL_SUBSCRIPTION | (PULL_SUSPEND if suspend_ms else 0)
        if sys_flag is not None:
            flag = sys_flag
        ext = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": str(queue_id),
            "queueOffset": str(offset),
            "maxMsgNums": str(max_nums),
            "sysFlag": str(flag),
            "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": sub,
            "subVersion": "0",
        }
        return await self.call(RequestCode.PULL_MESSAGE, ext, timeout=timeout)

    async def start_broker(self, settings: BrokerSettings) -> None:
        self.broker = BrokerNode(settings)
        self.broker_done = trio.Event()
        self.broker_scope = trio.CancelScope()
        host_port = await self.nursery.start(
            _run_broker, self.broker, self.broker_scope, self.broker_done
        )
        self.addr = f"{host_port[0]}:{host_port[1]}"


async def _run_broker(
    broker: BrokerNode,
    scope: trio.CancelScope,
    done: trio.Event,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    try:
        with scope:
            await broker.run(task_status=task_status)
    finally:
        done.set()


def messages(resp: RemotingCommand) -> list[StoredMessage]:
    return list(iter_records(bytes(resp.body)))


@asynccontextmanager
async def running_cluster(tmp_path: Path, **props: str) -> AsyncIterator[Cluster]:
    ns_cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "ns" / "kvConfig.json"),
        config_store_path=str(tmp_path / "ns" / "namesrv.properties"),
        bind_address="127.0.0.1",
        listen_port=0,
    )
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(ns_cfg)
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        store_dir = tmp_path / "store"
        settings = broker_settings(store_dir, ns_addr, **props)
        async with open_remoting_client(node="test-client") as client:
            cluster = Cluster(
                ns,
                ns_addr,
                None,  # type: ignore[arg-type]  # the broker starts below
                "",
                client,
                nursery,
                trio.CancelScope(),
                store_dir,
            )
            await cluster.start_broker(settings)
            try:
                yield cluster
            finally:
                cluster.broker_scope.cancel()
                with trio.fail_after(WAIT_S):
                    await cluster.broker_done.wait()
        nursery.cancel_scope.cancel()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running_cluster(tmp_path) as c:
        yield c


def ok(resp: RemotingCommand) -> RemotingCommand:
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return resp
