"""NameServers over real loopback sockets: two independent nodes, brokers registering with both
through real REGISTER_BROKER frames, expiry of a silent broker, removal on connection close, and
one real ``mqnamesrv`` process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from rmq_cluster.cluster.protocol.route import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.processor import NamesrvState
from rmq_cluster.namesrv.server import NamesrvServer
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[3]
#: Generous bounds for conditions that normally hold within milliseconds.
WAIT_S = 5.0


def ns_config(tmp_path: Path, name: str, **overrides: Any) -> NamesrvConfig:
    return NamesrvConfig(
        kv_config_path=str(tmp_path / name / "kvConfig.json"),
        config_store_path=str(tmp_path / name / "namesrv.properties"),
        bind_address="127.0.0.1",
        listen_port=0,
        **overrides,
    )


@asynccontextmanager
async def running(*configs: NamesrvConfig) -> AsyncIterator[list[tuple[NamesrvServer, str]]]:
    async with trio.open_nursery() as nursery:
        nodes = []
        for config in configs:
            node = NamesrvServer(config)
            host, port = await nursery.start(node.serve)
            nodes.append((node, f"{host}:{port}"))
        yield nodes
        nursery.cancel_scope.cancel()


class FakeBroker:
    """A broker test double with its own connection to every NameServer, as a real broker has."""

    def __init__(self, name: str, addr: str, broker_id: int, topics: list[str]) -> None:
        self.name = name
        self.addr = addr
        self.broker_id = broker_id
        self.body = RegisterBrokerBody(
            TopicConfigSerializeWrapper(
                {t: TopicConfig(t, 4, 4) for t in topics}, DataVersion(1700000000000, 1)
            )
        ).encode(compress=True)
        self._stack = AsyncExitStack()
        self.client: RemotingClient | None = None

    async def __aenter__(self) -> FakeBroker:
        self.client = await self._stack.enter_async_context(open_remoting_client(node=self.name))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._stack.aclose()

    async def register(self, ns_addr: str) -> RemotingCommand:
        assert self.client is not None
        header = {
            "brokerName": self.name,
            "brokerAddr": self.addr,
            "clusterName": "DefaultCluster",
            "haServerAddr": self.addr.replace("10911", "10912"),
            "brokerId": str(self.broker_id),
            "compressed": "true",
            "bodyCrc32": "0",
        }
        req = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, self.body)
        # generous: under a mock clock a stray jump must not time the call out
        resp = await self.client.invoke(ns_addr, req, timeout=WAIT_S * 100)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return resp


async def route(
    client: RemotingClient, ns_addr: str, topic: str, version: int = 407
) -> RemotingCommand:
    req = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, version=version
    )
    return await client.invoke(ns_addr, req, timeout=WAIT_S)


async def cluster_info(client: RemotingClient, ns_addr: str) -> ClusterInfo:
    req = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
    resp = await client.invoke(ns_addr, req, timeout=WAIT_S)
    assert resp.code == ResponseCode.SUCCESS
    return ClusterInfo.decode(resp.body)


def gone(addr: str) -> Callable[[NamesrvState], bool]:
    return lambda state: addr not in state.routes.live_brokers


async def test_two_nameservers_agree(tmp_path: Path) -> None:
    async with running(ns_config(tmp_path, "ns1"), ns_config(tmp_path, "ns2")) as nodes:
        ns_addrs = [a for _, a in nodes]
        async with (
            FakeBroker("broker-a", "127.0.0.1:10911", 0, ["T", "U"]) as a0,
            FakeBroker("broker-a", "127.0.0.2:10911", 1, ["T", "U"]) as a1,
            FakeBroker("broker-b", "127.0.0.3:10911", 0, ["T"]) as b0,
            open_remoting_client() as client,
        ):
            for ns in ns_addrs:
                await a0.register(ns)
                slave = await a1.register(ns)
                assert slave.ext_fields == {
                    "masterAddr": "127.0.0.1:10911",
                    "haServerAddr": "127.0.0.1:10912",
                }
                await b0.register(ns)
            for version in (407, 333, 317):
                bodies = [bytes((await route(client, ns, "T", version)).body) for ns in ns_addrs]
                assert bodies[0] == bodies[1]
            parsed = TopicRouteData.decode((await route(client, ns_addrs[0], "T")).body)
            assert {b.broker_name: dict(b.broker_addrs) for b in parsed.broker_datas} == {
                "broker-a": {0: "127.0.0.1:10911", 1: "127.0.0.2:10911"},
                "broker-b": {0: "127.0.0.3:10911"},
            }
            infos = [await cluster_info(client, ns) for ns in ns_addrs]
            assert infos[0] == infos[1]
            assert infos[0].cluster_addr_table == {
                "DefaultCluster": frozenset({"broker-a", "broker-b"})
            }
            for node, _ in nodes:
                assert node.state is not None and node.state.routes.consistency_errors() == []


async def test_silent_broker_expires(tmp_path: Path) -> None:
    short = {"broker_channel_expired_time_ms": 1000, "scan_not_active_broker_interval_ms": 100}
    configs = [ns_config(tmp_path, "ns1", **short), ns_config(tmp_path, "ns2", **short)]
    async with running(*configs) as nodes, trio.open_nursery() as nursery:
        ns_addrs = [a for _, a in nodes]
        async with (
            FakeBroker("broker-a", "127.0.0.1:10911", 0, ["T"]) as alive,
            FakeBroker("broker-b", "127.0.0.2:10911", 0, ["T"]) as silent,
            open_remoting_client() as client,
        ):
            for ns in ns_addrs:
                await alive.register(ns)
                await silent.register(ns)
            assert silent.client is not None
            silent_conns = [await silent.client.connection(ns) for ns in ns_addrs]

            async def keep_registering() -> None:  # the broker's periodic registration
                while True:
                    for ns in ns_addrs:
                        await alive.register(ns)
                    await trio.sleep(0.05)

            nursery.start_soon(keep_registering)
            with trio.fail_after(WAIT_S):
                for node, _ in nodes:
                    await node.wait_until(gone("127.0.0.2:10911"))
                for conn in silent_conns:  # as RocketMQ does, the expired channel is closed
                    await conn.closed.wait()
            for node, ns in nodes:
                assert node.state is not None
                assert set(node.state.routes.live_brokers) == {"127.0.0.1:10911"}
                info = await cluster_info(client, ns)
                assert set(info.broker_addr_table) == {"broker-a"}
                parsed = TopicRouteData.decode((await route(client, ns, "T")).body)
                assert [q.broker_name for q in parsed.queue_datas] == ["broker-a"]
            nursery.cancel_scope.cancel()


async def test_closed_connection_removes_broker_at_once(tmp_path: Path) -> None:
    # default 120 s expiry: only the connection closing can remove the broker within WAIT_S
    async with running(ns_config(tmp_path, "ns1"), ns_config(tmp_path, "ns2")) as nodes:
        ns_addrs = [a for _, a in nodes]
        async with (
            FakeBroker("broker-a", "127.0.0.1:10911", 0, ["T"]) as stays,
            open_remoting_client() as client,
        ):
            leaving = FakeBroker("broker-b", "127.0.0.2:10911", 0, ["V"])
            async with leaving:
                for ns in ns_addrs:
                    await stays.register(ns)
                    await leaving.register(ns)
                    assert (await route(client, ns, "V")).code == ResponseCode.SUCCESS
            with trio.fail_after(WAIT_S):
                for node, _ in nodes:
                    await node.wait_until(gone("127.0.0.2:10911"))
            for node, ns in nodes:
                missing = await route(client, ns, "V")
                assert missing.code == ResponseCode.TOPIC_NOT_EXIST
                assert (await route(client, ns, "T")).code == ResponseCode.SUCCESS
                assert node.state is not None
                assert set(node.state.routes.live_brokers) == {"127.0.0.1:10911"}


async def test_kv_config_persists_across_restart(tmp_path: Path) -> None:
    config = ns_config(tmp_path, "ns1")
    put = RemotingCommand.request(
        RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}
    )
    get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
    async with running(config) as [(_, ns)], open_remoting_client() as client:
        assert (await client.invoke(ns, put, timeout=WAIT_S)).code == 0
    written = await trio.Path(config.kv_config_path).read_bytes()
    assert written == b'{"configTable":{"ns":{"k":"v"}}}'
    async with running(config) as [(_, ns)], open_remoting_client() as client:
        resp = await client.invoke(ns, get, timeout=WAIT_S)
        assert resp.ext_fields == {"value": "v"}


async def test_unknown_code_and_bad_header_over_the_wire(tmp_path: Path) -> None:
    async with running(ns_config(tmp_path, "ns1")) as [(_, ns)], open_remoting_client() as client:
        resp = await client.invoke(ns, RemotingCommand.request(RequestCode.PULL_MESSAGE))
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        resp = await client.invoke(ns, RemotingCommand.request(RequestCode.REGISTER_BROKER, {}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "is null" in (resp.remark or "")


async def test_real_process(tmp_path: Path) -> None:
    port = free_port()
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        f"listenPort={port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path}/kvConfig.json\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rmq_cluster.namesrv", "-c", str(conf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=str(REPO),
        env=env,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(20):
            while b"The Name Server boot success. serializeType=JSON" not in seen:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"namesrv exited early: {seen!r}"
                seen += chunk
        async with open_remoting_client() as client:
            info = await cluster_info(client, f"127.0.0.1:{port}")
            assert info == ClusterInfo()
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.move_on_after(5):
                await proc.wait()


def test_real_process_reports_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = tmp_path / "namesrv.properties"
        conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path}/kv\n")
        done = subprocess.run(
            [sys.executable, "-m", "rmq_cluster.namesrv", "-c", str(conf)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert done.returncode == 1
    assert "mqnamesrv: cannot start" in done.stderr and "in use" in done.stderr


async def test_default_expiry_in_virtual_time(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """RocketMQ's defaults (120 s expiry, 10 s scan) on a mock clock: the silent broker goes
    at the first scan after 120 s, not before. The idle-connection close is pushed out of the
    way so that only the scan can remove it."""
    mock_clock.autojump_threshold = 0.1  # jump only when the loop is truly idle
    config = ns_config(tmp_path, "ns1", server_channel_max_idle_time_seconds=100_000)
    addr = "127.0.0.1:10911"
    async with running(config) as [(node, ns)], FakeBroker("broker-a", addr, 0, ["T"]) as b:
        await b.register(ns)
        assert node.state is not None
        last_update = node.state.routes.live_brokers[addr].last_update
        with trio.fail_after(1000):
            await node.wait_until(gone(addr))
        removed_at = trio.current_time()
        assert last_update + 120 < removed_at <= last_update + 130 + 1e-6
