"""The chaos proxy through real loopback sockets: pass, cut (reset and black hole), delay,
emulated loss, and cuts by the owner of the connecting socket (found through /proc)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from rmq_cluster.chaos.proxy import (
    CLIENT,
    PASS,
    RETRANSMIT_BASE_S,
    Policy,
    Proxy,
    ProxySet,
    Route,
    socket_owner,
)
from tests.ports import free_port

IO_TIMEOUT_S = 5.0


class Upstream:
    """An echo server counting every byte it receives."""

    def __init__(self) -> None:
        self.received = 0
        self.connections = 0
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._echo, listeners)

    async def _echo(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        try:
            async for chunk in stream:
                self.received += len(chunk)
                await stream.send_all(chunk)
        except trio.BrokenResourceError:
            pass


@asynccontextmanager
async def proxied(**kwargs: object) -> AsyncIterator[tuple[Proxy, Upstream]]:
    up = Upstream()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(up.serve)
        proxy = Proxy("test", node="n", listen=("127.0.0.1", 0), upstream=("127.0.0.1", port),
                      **kwargs)  # type: ignore[arg-type]
        await nursery.start(proxy.serve)
        yield proxy, up
        nursery.cancel_scope.cancel()


async def _connect(proxy: Proxy) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", proxy.listen[1])


async def _roundtrip(stream: trio.SocketStream, data: bytes) -> bytes:
    await stream.send_all(data)
    got = b""
    with trio.fail_after(IO_TIMEOUT_S):
        while len(got) < len(data):
            chunk = await stream.receive_some()
            if not chunk:
                break
            got += chunk
    return got


async def test_pass_forwards_both_ways() -> None:
    async with proxied() as (proxy, up):
        stream = await _connect(proxy)
        assert await _roundtrip(stream, b"hello" * 1000) == b"hello" * 1000
        assert up.received == 5000
        await stream.aclose()


async def test_cut_resets_live_connections_and_refuses_new_ones() -> None:
    async with proxied() as (proxy, up):
        stream = await _connect(proxy)
        assert await _roundtrip(stream, b"before") == b"before"
        proxy.set_policy(Policy(block_all=True))
        with trio.fail_after(IO_TIMEOUT_S):
            with pytest.raises(trio.BrokenResourceError):
                # the reset arrives: reads end or fail, writes fail
                while True:
                    await stream.send_all(b"after")
                    if not await stream.receive_some():
                        raise trio.BrokenResourceError
        before = up.received
        # a new connection is reset at once; not one byte reaches the node
        new = await _connect(proxy)
        with trio.fail_after(IO_TIMEOUT_S):
            try:
                await new.send_all(b"x" * 100)
                assert await new.receive_some() == b""
            except trio.BrokenResourceError:
                pass
        assert up.received == before == len(b"before")
        assert proxy.refused >= 1 and proxy.cut == 1
        # heal: traffic flows again
        proxy.set_policy(PASS)
        again = await _connect(proxy)
        assert await _roundtrip(again, b"healed") == b"healed"


async def test_black_hole_holds_new_connections_silently_until_heal() -> None:
    async with proxied() as (proxy, up):
        proxy.set_policy(Policy(block_all=True, blackhole=True))
        stream = await _connect(proxy)  # the TCP handshake completes (the kernel accepts)
        await stream.send_all(b"held")
        with trio.move_on_after(0.5) as waited:
            await stream.receive_some()
        assert waited.cancelled_caught  # no answer, no reset
        assert up.connections == 0 and up.received == 0
        proxy.set_policy(PASS)
        # the held connection goes through now, with the bytes sent meanwhile
        with trio.fail_after(IO_TIMEOUT_S):
            assert await stream.receive_some() == b"held"


async def test_delay_applies_to_every_chunk() -> None:
    async with proxied() as (proxy, _up):
        stream = await _connect(proxy)
        assert await _roundtrip(stream, b"warm") == b"warm"
        proxy.set_policy(Policy(delay_s=0.2))
        start = trio.current_time()
        assert await _roundtrip(stream, b"slow") == b"slow"
        # both directions cross the proxy: at least two delays
        assert trio.current_time() - start >= 0.4


async def test_emulated_loss_holds_chunks_for_a_retransmission_wait() -> None:
    async with proxied(seed=3) as (proxy, _up):
        stream = await _connect(proxy)
        proxy.set_policy(Policy(drop_p=1.0))
        start = trio.current_time()
        assert await _roundtrip(stream, b"lossy") == b"lossy"
        assert trio.current_time() - start >= 2 * RETRANSMIT_BASE_S


async def test_socket_owner_finds_the_process_holding_the_connection() -> None:
    me = {os.getpid(): "me"}
    async with proxied(owner_of=lambda peer, port: socket_owner(peer, port, me)) as (proxy, up):
        stream = await _connect(proxy)
        assert await _roundtrip(stream, b"mine") == b"mine"
        assert [c.owner for c in proxy.conns] == ["me"]
        # cutting someone else leaves this connection alone ...
        proxy.set_policy(Policy(blocked=frozenset({"other", CLIENT})))
        assert await _roundtrip(stream, b"still") == b"still"
        # ... cutting its owner resets it
        proxy.set_policy(Policy(blocked=frozenset({"me"})))
        with trio.fail_after(IO_TIMEOUT_S):
            try:
                await stream.send_all(b"x")
                assert await stream.receive_some() == b""
            except trio.BrokenResourceError:
                pass
        assert up.received == len(b"mine") + len(b"still")


def test_socket_owner_of_an_unknown_port_is_a_client() -> None:
    port = free_port()  # (nobody holds it)
    assert socket_owner(port, 1, {os.getpid(): "me"}) == CLIENT


async def test_proxyset_partition_cuts_both_ways_and_heals() -> None:
    """Node a isolated: a's proxy refuses everyone (a client too), b's proxy refuses
    connections a opens (a is this process here), c's too; heal restores all."""
    ups = {name: Upstream() for name in "abc"}
    async with trio.open_nursery() as nursery:
        routes = []
        for name, up in ups.items():
            internal = await nursery.start(up.serve)
            public = free_port()  # the proxy's port: ProxySet binds it
            routes.append(Route(name, "listenPort", public, internal))
        pset = ProxySet(routes, node_pids=lambda: {os.getpid(): "a"})
        await nursery.start(pset.run)
        by = {p.node: p for p in pset.proxies}
        pset.partition(["a"])
        assert by["a"].policy.block_all
        assert by["b"].policy.blocked == frozenset({"a"})
        assert pset.describe()["a listenPort"].startswith("cut all")
        for name in "abc":
            cut = await _connect(by[name])
            with trio.fail_after(IO_TIMEOUT_S):
                try:
                    await cut.send_all(b"x")
                    assert await cut.receive_some() == b""
                except trio.BrokenResourceError:
                    pass
        assert all(up.received == 0 for up in ups.values())
        pset.heal()
        assert pset.describe() == {}
        for name in "abc":
            ok = await _connect(by[name])
            assert await _roundtrip(ok, b"ok") == b"ok"
        # peers-only partition: a's proxy refuses b and c but not clients
        pset.partition(["a"], peers=["b"])
        assert by["a"].policy.blocked == frozenset({"b"})
        assert by["b"].policy.blocked == frozenset({"a"})
        assert by["c"].policy.is_pass
        nursery.cancel_scope.cancel()
