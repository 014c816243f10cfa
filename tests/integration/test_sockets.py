"""The one socket layer (cluster/remoting/sockets.py) over real loopback sockets: the reader, the
sends, interrupt and close, listen/accept/connect, and what HA's socket (ha/net.py) sets
differently from remoting's."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from rmq_cluster.cluster.remoting.input_budget import READ_CHUNK_BYTES
from rmq_cluster.cluster.remoting.sockets import (
    InputShare,
    Socket,
    StreamSocket,
    accept,
    connect_socket,
    listen_socket,
    try_accept,
)
from rmq_cluster.ha import net
from rmq_cluster.ha.net import HA_READ_CHUNK_BYTES, HA_SOCKET_BUFFER_BYTES, HASocket


@pytest.fixture
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair of TCP sockets on 127.0.0.1 (ours, the peer's), both closed after."""
    lsock = listen_socket(socket.AF_INET, ("127.0.0.1", 0), 8)
    client = socket.create_connection(lsock.getsockname(), timeout=5)
    lsock.setblocking(True)
    lsock.settimeout(5)
    server, _ = lsock.accept()
    lsock.close()
    try:
        yield server, client
    finally:
        server.close()
        client.close()


def test_remoting_reads_without_a_call_layer() -> None:
    """The hot path: ``Socket.receive`` is the shared reader itself, not a wrapper of it."""
    assert Socket.receive is StreamSocket.read


async def test_read_returns_what_is_there_and_whether_it_waited(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = tcp_pair
    sock = Socket(ours)
    assert ours.getblocking() is False
    assert ours.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert not sock.readable_now()
    peer.sendall(b"hello")
    with trio.fail_after(5):
        await trio.lowlevel.wait_readable(ours)
    assert sock.readable_now()
    data, waited = await sock.receive()
    assert (bytes(data), waited) == (b"hello", False)

    async def later() -> None:
        await trio.testing.wait_all_tasks_blocked()  # the reader is parked
        peer.sendall(b"more")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        with trio.fail_after(5):
            data, waited = await sock.receive(wait_first=True)
    assert (bytes(data), waited) == (b"more", True)
    peer.shutdown(socket.SHUT_WR)
    with trio.fail_after(5):
        data, _ = await sock.receive(wait_first=True)
    assert bytes(data) == b""  # EOF
    sock.close()
    sock.close()  # once only
    assert ours.fileno() == -1


async def test_remoting_sockets_share_one_buffer_and_read_a_chunk(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = tcp_pair
    share = InputShare()
    a, b = Socket(ours, share), Socket(socket.socket(), share)
    try:
        assert a._buf is b._buf is share.buf and len(share.buf) == READ_CHUNK_BYTES
        peer.sendall(b"x" * (READ_CHUNK_BYTES + 100))
        got = 0
        with trio.fail_after(5):
            while got < READ_CHUNK_BYTES + 100:
                data, _ = await a.receive(wait_first=True)
                assert 0 < len(data) <= READ_CHUNK_BYTES
                got += len(data)
    finally:
        b.close()


async def test_a_tight_budget_bounds_the_read(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    """Past ``tight_above`` a read takes what the budget has room for, never the whole chunk."""
    ours, peer = tcp_pair
    share = InputShare(cap=10_000)
    sock = Socket(ours, share)
    peer.sendall(b"y" * 20_000)
    with trio.fail_after(5):
        data, waited = await sock.receive(wait_first=True)
    assert len(data) == (10_000 - 64) // 2
    assert waited


async def test_interrupt_wakes_a_reader_and_leaves_the_socket_usable(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = tcp_pair
    sock = Socket(ours)
    failed: list[type[BaseException]] = []

    async def reader() -> None:
        try:
            await sock.receive(wait_first=True)
        except trio.ClosedResourceError as exc:
            failed.append(type(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        sock.interrupt()
    assert failed == [trio.ClosedResourceError]
    assert sock.try_send(b"ping") == 4
    assert peer.recv(4) == b"ping"
    peer.sendall(b"pong")
    with trio.fail_after(5):
        data, _ = await sock.receive(wait_first=True)
    assert bytes(data) == b"pong"


async def test_close_wakes_a_reader(tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _peer = tcp_pair
    sock = Socket(ours)
    failed: list[type[BaseException]] = []

    async def reader() -> None:
        try:
            await sock.receive(wait_first=True)
        except trio.ClosedResourceError as exc:
            failed.append(type(exc))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            sock.close()
    assert failed == [trio.ClosedResourceError]
    with pytest.raises(trio.BrokenResourceError):
        await sock.receive()  # reading a closed socket
    with pytest.raises(trio.BrokenResourceError):
        sock.try_send(b"x")


async def test_send_all_gives_up_when_the_peer_takes_nothing(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, _peer = tcp_pair

    class Impatient(StreamSocket):
        __slots__ = ()
        write_timeout_s = 0.05

    sock = Impatient(ours)
    with trio.fail_after(10), pytest.raises(trio.TooSlowError):
        await sock.send_all(b"z" * (64 * 1024 * 1024))


async def test_send_all_waits_for_a_slow_reader(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = tcp_pair
    sock = Socket(ours)
    payload = bytes(range(256)) * 40_000  # ~10 MiB: more than the kernel buffers hold
    received = bytearray()

    def drain() -> None:
        peer.settimeout(10)
        while len(received) < len(payload):
            chunk = peer.recv(1 << 20)
            if not chunk:
                break
            received.extend(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, drain)
        with trio.fail_after(10):
            await sock.send_all(payload)
    assert bytes(received) == payload


async def test_ha_socket_settings(tcp_pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = tcp_pair
    sock = HASocket(ours)
    assert sock.write_timeout_s == net.HA_WRITE_TIMEOUT_S
    assert sock.peer == "{}:{}".format(*peer.getsockname())
    assert len(sock.share.buf) == HA_READ_CHUNK_BYTES
    other = HASocket(socket.socket())
    assert sock.share.buf is not other.share.buf  # a buffer of its own
    assert other.peer == "?"  # not connected
    other.close()
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # Linux reports twice what was set
        assert ours.getsockopt(socket.SOL_SOCKET, opt) >= HA_SOCKET_BUFFER_BYTES
    # no budget: a read takes as much as the buffer holds
    peer.sendall(b"h" * (HA_READ_CHUNK_BYTES + 1000))
    got = 0
    with trio.fail_after(5):
        while got < HA_READ_CHUNK_BYTES:
            got = max(got, len(await sock.receive()))
    assert got == HA_READ_CHUNK_BYTES
    sock.close()


async def test_ha_receive_is_always_a_checkpoint(
    tcp_pair: tuple[socket.socket, socket.socket],
) -> None:
    """A read that did not wait still lets the other tasks run (fairness for the HA streams)."""
    ours, peer = tcp_pair
    sock = HASocket(ours, read_chunk=2)
    peer.sendall(b"ready")
    with trio.fail_after(5):
        await trio.lowlevel.wait_readable(ours)
    with trio.CancelScope() as scope:
        scope.cancel()
        await sock.receive()  # bytes are there: only a checkpoint sees the cancellation
    assert scope.cancelled_caught
    ran = trio.Event()

    async def other_task() -> None:
        ran.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        assert bytes(await sock.receive()) == b"ad"
        assert bytes(await sock.receive()) == b"y"  # a second batch: every task ran before
        assert ran.is_set()


async def test_listen_accept_connect() -> None:
    lsock = net.listen("127.0.0.1", 0)
    try:
        assert lsock.getblocking() is False
        assert lsock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        assert try_accept(lsock) is None  # nobody waiting
        host, port = lsock.getsockname()
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                accepted: list[socket.socket] = []

                async def take() -> None:
                    accepted.append(await accept(lsock))

                nursery.start_soon(take)
                await trio.testing.wait_all_tasks_blocked()
                ha = await net.connect(host, port)
        try:
            assert ha.peer == f"{host}:{port}"
            await ha.send_all(b"abc")
            server = StreamSocket(accepted[0])
            with trio.fail_after(5):
                data, _ = await server.read(wait_first=True)
            assert bytes(data) == b"abc"
            server.close()
        finally:
            ha.close()
    finally:
        lsock.close()


async def test_connect_fails_where_nothing_listens() -> None:
    bound = socket.socket()
    try:
        bound.bind(("127.0.0.1", 0))  # the port stays ours, nobody listens on it
        with trio.fail_after(5), pytest.raises(ConnectionRefusedError):
            await connect_socket(*bound.getsockname())
    finally:
        bound.close()


def test_listen_socket_closes_what_it_cannot_bind() -> None:
    taken = listen_socket(socket.AF_INET, ("127.0.0.1", 0), 8)
    try:
        fds = len(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError):
            listen_socket(socket.AF_INET, taken.getsockname(), 8)  # in use
        with pytest.raises(OSError):
            listen_socket(socket.AF_INET, ("256.0.0.1", 0), 8)
        assert len(os.listdir("/proc/self/fd")) == fds  # nothing left open
    finally:
        taken.close()
