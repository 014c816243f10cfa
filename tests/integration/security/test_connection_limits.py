"""Connections per peer address (issue 31, item 7): one address holding all the connections it
may keep does not starve the others. Live sockets; other addresses are other 127.x.y.z source
addresses (Linux routes all of 127.0.0.0/8 to loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.config import load_broker_config
from rmq_cluster.cluster.config import ConfigError, load_config
from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.cluster.remoting.server import DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
from rmq_cluster.namesrv.config import NamesrvConfig
from tests.integration.broker.test_broker_process import _start_broker, _stop
from tests.integration.client.conftest import running_cluster
from tests.integration.security.test_memory_limits import (
    ECHO,
    _closed_by_peer,
    _frame,
    _read_frames,
    _server,
    _until,
)

HOG = "127.0.0.1"  # the address that holds all it may
OTHERS = ("127.0.0.2", "127.0.0.3")


async def _connect(host: str, port: int, source: str) -> trio.SocketStream:
    return await trio.open_tcp_stream(host, port, local_address=source)


async def _echoes(stream: trio.SocketStream, body: bytes) -> bool:
    await stream.send_all(_frame(ECHO, body))
    return (await _read_frames(stream, 1))[0].body == body


async def test_one_address_at_its_limit_leaves_room_for_the_others(nursery: trio.Nursery) -> None:
    srv = _server(max_connections_per_address=3)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    streams = [await _connect(host, port, HOG) for _ in range(3)]
    try:
        for s in streams:
            assert await _echoes(s, b"hog")
        for _ in range(2):  # more from the same address: closed at once, counted
            async with await _connect(host, port, HOG) as over:
                assert await _closed_by_peer(over)
        assert srv.refused_connections_per_address == 2 and srv.refused_connections == 0
        for source in OTHERS:  # other addresses are served meanwhile
            other = await _connect(host, port, source)
            streams.append(other)
            assert await _echoes(other, source.encode())
        for s in streams[:3]:  # and the hog's own connections go on
            assert await _echoes(s, b"still")
        info = srv.runtime_info()
        assert info["remotingMaxConnectionsPerAddress"] == "3"
        assert info["remotingRefusedConnectionsPerAddress"] == "2"
        await streams.pop(0).aclose()  # the hog lets one go: it may connect once more
        await _until(lambda: len(srv.connections) == 4)
        streams.append(await _connect(host, port, HOG))
        assert await _echoes(streams[-1], b"again")
    finally:
        for s in streams:
            await s.aclose()


async def test_a_full_node_lets_newcomers_in_at_the_cost_of_the_biggest_holder(
    nursery: trio.Nursery,
) -> None:
    """At serverMaxConnections, a connection from an address holding fewer replaces the
    connection idle longest of the address holding the most, until every address holds about
    the same; then newcomers are refused."""
    srv = _server(max_connections=4, max_connections_per_address=3)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    hog = [await _connect(host, port, HOG) for _ in range(3)]
    first = await _connect(host, port, "127.0.0.2")
    streams = [*hog, first]
    try:
        for s in streams:  # hog[0] is the one idle longest
            assert await _echoes(s, b"x")
        await _until(lambda: len(srv.connections) == 4)
        newcomer = await _connect(host, port, "127.0.0.3")  # the node is full: hog[0] goes
        streams.append(newcomer)
        assert await _echoes(newcomer, b"in")
        assert await _closed_by_peer(hog[0])
        assert srv.evicted_connections == 1 and srv.refused_connections == 0
        for s in hog[1:]:
            assert await _echoes(s, b"kept")
        await _until(lambda: len(srv.connections) == 4)
        # 127.0.0.1 holds 2, the others 1: a newcomer holding none takes one more from it
        streams.append(await _connect(host, port, "127.0.0.4"))
        assert await _echoes(streams[-1], b"in too")
        assert srv.evicted_connections == 2
        await _until(lambda: len(srv.connections) == 4)
        # every address holds 1 now: a newcomer is refused, and nobody else is closed
        async with await _connect(host, port, "127.0.0.5") as over:
            assert await _closed_by_peer(over)
        assert srv.refused_connections == 1 and srv.evicted_connections == 2
        assert srv.runtime_info()["remotingEvictedConnections"] == "2"
        assert len(srv.connections) == 4
    finally:
        for s in streams:
            await s.aclose()


async def _runtime_info(stream: trio.SocketStream) -> dict[str, str]:
    await stream.send_all(_frame(RequestCode.GET_BROKER_RUNTIME_INFO, b""))
    (answer,) = await _read_frames(stream, 1)
    return KVTable.decode(bytes(answer.body)).table


async def test_a_broker_process_with_one_address_holding_its_default_share_serves_others(
    tmp_path: Path,
) -> None:
    """The issue's scenario on a real broker with the default limits: one address opens
    idle connections until it is refused; other addresses still connect and are answered."""
    conf = tmp_path / "broker.properties"

    def text(port: int) -> str:
        return (
            f"brokerName=broker-conn\nlistenPort={port}\nhaListenPort=0\nbindAddress=127.0.0.1\n"
            f"brokerIP1=127.0.0.1\nstorePathRootDir={tmp_path}/store\n"
            "mappedFileSizeCommitLog=1048576\n"
        )

    proc = None
    idle: list[trio.SocketStream] = []
    try:
        proc, port = await _start_broker(
            conf, text, ["-m", "rmq_cluster.broker", "-c", str(conf)], tmp_path / "broker.log",
            b"boot success",
        )
        for _ in range(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS):
            idle.append(await _connect("127.0.0.1", port, HOG))
        refused = 0
        for _ in range(3):  # more from the same address: closed at once
            async with await _connect("127.0.0.1", port, HOG) as over:
                refused += await _closed_by_peer(over)
        assert refused == 3
        for source in OTHERS:
            async with await _connect("127.0.0.1", port, source) as other:
                info = await _runtime_info(other)
                assert info["remotingRefusedConnectionsPerAddress"] == "3"
                assert info["remotingMaxConnectionsPerAddress"] == str(
                    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)
                assert info["remotingRefusedConnections"] == "0"
        assert await _runtime_info(idle[0])  # the hog's own connections are served too
    finally:
        for s in idle:
            await s.aclose()
        await _stop(proc)


async def test_the_setting_is_read_checked_and_reported(tmp_path: Path) -> None:
    for bad in ("0", "-1"):
        with pytest.raises(ConfigError, match="serverMaxConnectionsPerAddress"):
            load_broker_config({"serverMaxConnectionsPerAddress": bad})
        with pytest.raises(ConfigError, match="serverMaxConnectionsPerAddress"):
            load_config(NamesrvConfig, {"serverMaxConnectionsPerAddress": bad})
    ns = load_config(NamesrvConfig, {"serverMaxConnectionsPerAddress": "5"}).config
    assert ns.server_max_connections_per_address == 5
    async with running_cluster(tmp_path, serverMaxConnectionsPerAddress="7") as cluster:
        server = cluster.broker.server
        assert server is not None and server.max_connections_per_address == 7
        assert cluster.ns.server is not None
        assert cluster.ns.server.max_connections_per_address == DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
