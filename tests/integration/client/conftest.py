"""An in-process cluster (NameServer + Broker(s) in this Trio loop, ephemeral ports, tmp dirs)
and fast client timers for the client's end-to-end tests."""

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
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer

WAIT_S = 10.0


def broker_settings(store_dir: Path, namesrv_addr: str, name: str = "broker-a",
                    **props: str) -> BrokerSettings:
    values = {
        "brokerClusterName": "TestCluster",
        "brokerName": name,
        "brokerId": "0",
        "listenPort": "0",
        "bindAddress": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(store_dir),
        "namesrvAddr": namesrv_addr,
        "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
        "mappedFileSizeConsumeQueue": str(20 * 100_000),
        "flushIntervalConsumeQueue": "200",
        "defaultTopicQueueNums": "4",
        "messageDelayLevel": "1s 1s 1s 1s 1s",
        "transactionCheckInterval": "500",
        "transactionTimeOut": "300",
    }
    values.update(props)
    return load_broker_config(values).settings


@attrs.define
class BrokerHandle:
    controller: BrokerNode
    addr: str
    scope: trio.CancelScope
    done: trio.Event

    async def stop(self) -> None:
        self.scope.cancel()
        with trio.fail_after(WAIT_S):
            await self.done.wait()


@attrs.define
class Cluster:
    ns: NamesrvServer
    ns_addr: str
    nursery: trio.Nursery
    tmp: Path
    brokers: dict[str, BrokerHandle] = attrs.field(factory=dict)

    @property
    def broker(self) -> BrokerNode:
        return self.brokers["broker-a"].controller

    @property
    def addr(self) -> str:
        return self.brokers["broker-a"].addr

    def client_config(self, **kw: Any) -> ClientConfig:
        base: dict[str, Any] = {
            "namesrv_addr": self.ns_addr,
            "client_ip": "127.0.0.1",
            "poll_namesrv_interval_s": 0.5,
            "heartbeat_interval_s": 1.0,
            "persist_offset_interval_s": 0.5,
            "rebalance_interval_s": 1.0,
        }
        base.update(kw)
        return ClientConfig(**base)

    async def start_broker(self, name: str = "broker-a", key: str | None = None,
                           **props: str) -> BrokerHandle:
        key = key or name
        settings = broker_settings(self.tmp / key, self.ns_addr, name, **props)
        controller = BrokerNode(settings)
        done = trio.Event()
        scope = trio.CancelScope()

        async def run(task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
                      ) -> None:
            try:
                with scope:
                    await controller.run(task_status=task_status)
            finally:
                done.set()

        host, port = await self.nursery.start(run)
        handle = BrokerHandle(controller, f"{host}:{port}", scope, done)
        self.brokers[key] = handle

        def registered(state: Any) -> bool:
            return name in getattr(state.routes, "broker_addr_table", {name: 1})

        with trio.fail_after(WAIT_S):
            await self.ns.wait_until(registered)
        return handle


@asynccontextmanager
async def running_cluster(tmp_path: Path, brokers: int = 1, **props: str
                          ) -> AsyncIterator[Cluster]:
    ns_cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "ns" / "kvConfig.json"),
        config_store_path=str(tmp_path / "ns" / "namesrv.properties"),
        bind_address="127.0.0.1",
        listen_port=0,
    )
    async with trio.open_nursery() as nursery:
        ns = NamesrvServer(ns_cfg)
        host, port = await nursery.start(ns.serve)
        cluster = Cluster(ns, f"{host}:{port}", nursery, tmp_path)
        try:
            for i in range(brokers):
                await cluster.start_broker(f"broker-{'abcdefgh'[i]}", **props)
            yield cluster
        finally:
            for b in cluster.brokers.values():
                b.scope.cancel()
            with trio.fail_after(WAIT_S):
                for b in cluster.brokers.values():
                    await b.done.wait()
            nursery.cancel_scope.cancel()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running_cluster(tmp_path) as c:
        yield c
