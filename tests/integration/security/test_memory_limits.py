"""Memory limits of a remoting server on live sockets (issue 19, item 8): the cap on the bytes
all connections hold in partial frames (backpressure, nothing lost), the partial frame timeout,
the connection limit, idle connections without a read buffer of their own, and big legitimate
messages that still go through."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.client import Message, Producer
from rmq_cluster.client.model import MessageQueue
from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode_into
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.input_budget import (
    INPUT_RESERVE_BYTES,
    MIN_MAX_BUFFERED_INPUT_BYTES,
    READ_CHUNK_BYTES,
)
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer
from tests.integration.client.conftest import WAIT_S, running_cluster

ECHO = 7001  # answers with the request's body
SIZE = 7002  # answers with the body's length in the remark (big frames, small answers)
MIB = 1024 * 1024


def _echo(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, body=req.body)


def _size(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    return req.response(ResponseCode.SUCCESS, remark=str(len(req.body)))


def _server(**kw: object) -> RemotingServer:
    return RemotingServer(ProcessorTable({ECHO: _echo, SIZE: _size}), node="mem", **kw)  # type: ignore[arg-type]


def _frame(code: int, body: bytes, opaque: int = 1) -> bytes:
    out = bytearray()
    encode_into(out, RemotingCommand.request(code, body=body), opaque)
    return bytes(out)


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for server state that has no event of its own, with a deadline."""
    with trio.fail_after(WAIT_S):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the state itself
            await trio.sleep(0.002)


async def _connect(host: str, port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream(host, port)


async def _read_frames(stream: trio.SocketStream, n: int) -> list[RemotingCommand]:
    decoder, got = FrameDecoder(), list[RemotingCommand]()
    with trio.fail_after(WAIT_S):
        while len(got) < n:
            data = await stream.receive_some(65536)
            assert data, "server closed the connection"
            got += decoder.feed(data)
    return got


async def _closed_by_peer(stream: trio.SocketStream) -> bool:
    """Whether the peer closed (EOF or reset) within the deadline (input is drained)."""
    with trio.fail_after(WAIT_S):
        while True:
            try:
                if not await stream.receive_some(65536):
                    return True
            except trio.BrokenResourceError:
                return True


async def test_partial_big_frames_stay_under_the_cap_and_small_requests_go_on(
    nursery: trio.Nursery,
) -> None:
    srv = _server(max_buffered_input_bytes=1)  # raised to the minimum (warned)
    cap = srv.max_buffered_input_bytes
    assert cap == MIN_MAX_BUFFERED_INPUT_BYTES
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    body = os.urandom(12 * MIB)  # one such frame is admitted at a time under this cap
    frame = _frame(SIZE, body)
    cut = 10 * MIB
    senders = 6  # 6 x 10 MiB sent: far over the cap
    go = trio.Event()
    answers: list[str | None] = []

    async def big_sender() -> None:
        stream = await _connect(host, port)
        async with stream:
            await stream.send_all(frame[:cut])  # blocks while the server holds back
            await go.wait()
            await stream.send_all(frame[cut:])
            (answer,) = await _read_frames(stream, 1)
            answers.append(answer.remark)

    async with trio.open_nursery() as senders_nursery:
        for _ in range(senders):
            senders_nursery.start_soon(big_sender)
        # one frame admitted and 10 MiB of it held; the others wait for room, unread
        await _until(lambda: len(srv.connections) == senders and srv.buffered_input_bytes > cut)
        await _until(lambda: srv.input_pauses >= senders - 1)
        assert srv.buffered_input_bytes <= cap
        holding = [c for c in srv.connections if c._decoder.buffered]
        assert sum(c._decoder.buffered for c in holding) < cut + senders * 2 * READ_CHUNK_BYTES
        # small requests are answered meanwhile, one at a time and many in flight
        async with open_remoting_client() as rc:
            addr = format_address(host, port)
            for i in range(20):
                r = await rc.invoke(addr, RemotingCommand.request(ECHO, body=b"x%d" % i), WAIT_S)
                assert r.code == ResponseCode.SUCCESS and r.body == b"x%d" % i
            got: list[bytes] = []

            async def one(i: int) -> None:
                r = await rc.invoke(addr, RemotingCommand.request(ECHO, body=b"%d" % i * 300))
                got.append(bytes(r.body))

            async with trio.open_nursery() as calls:
                for i in range(300):
                    calls.start_soon(one, i)
            assert sorted(got) == sorted(b"%d" % i * 300 for i in range(300))
        assert srv.buffered_input_peak_bytes <= cap
        go.set()  # the big frames complete one after the other: nothing was lost
    assert answers == [str(len(body))] * senders
    assert srv.buffered_input_peak_bytes <= cap
    await _until(lambda: srv.buffered_input_bytes == 0)
    info = srv.runtime_info()
    assert int(info["remotingBufferedInputPeakBytes"]) <= int(info["remotingMaxBufferedInputBytes"])
    assert int(info["remotingInputPauses"]) >= senders - 1


async def test_small_frames_keep_the_reserve_while_big_ones_fill_the_rest(
    nursery: trio.Nursery,
) -> None:
    """Frames too big for the room left beside the reserve wait whole; the reserve is there
    for small frames (and the first chunk of any frame)."""
    srv = _server(max_buffered_input_bytes=MIN_MAX_BUFFERED_INPUT_BYTES)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    big = _frame(SIZE, bytes(15 * MIB))
    streams = [await _connect(host, port) for _ in range(3)]
    try:
        async with trio.open_nursery() as n:
            for s in streams:
                n.start_soon(s.send_all, big[: 15 * MIB])
            await _until(lambda: srv.input_pauses >= 2 and srv.buffered_input_bytes > 15 * MIB)
            # big frames never reach into the reserve
            assert srv.buffered_input_bytes <= srv.max_buffered_input_bytes - INPUT_RESERVE_BYTES
            async with open_remoting_client() as rc:
                r = await rc.invoke(format_address(host, port),
                                    RemotingCommand.request(ECHO, body=bytes(40_000)), WAIT_S)
                assert r.code == ResponseCode.SUCCESS and len(r.body) == 40_000
            n.cancel_scope.cancel()
    finally:
        for s in streams:
            await s.aclose()
    await _until(lambda: srv.buffered_input_bytes == 0)
    assert srv.buffered_input_peak_bytes <= srv.max_buffered_input_bytes


async def test_a_frame_left_incomplete_closes_its_connection(nursery: trio.Nursery) -> None:
    srv = _server(partial_frame_timeout=0.3)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    small = _frame(ECHO, b"y" * 1000)
    big = _frame(SIZE, bytes(2 * MIB))
    slow_small, slow_big, idle = [await _connect(host, port) for _ in range(3)]
    async with slow_small, slow_big, idle:
        t0 = trio.current_time()  # (the frames start after this)
        await slow_small.send_all(small[:500])
        await slow_big.send_all(big[: MIB])
        await _until(lambda: len(srv._input.partial) == 2)
        assert await _closed_by_peer(slow_small)
        assert await _closed_by_peer(slow_big)
        assert 0.3 <= trio.current_time() - t0 < 0.3 * 1.125 + 2.0  # (a loaded machine)
        assert srv.partial_frame_timeouts == 2
        await _until(lambda: srv.buffered_input_bytes == 0 and not srv._input.partial)
        # a connection with no frame under way stays open and is served
        await idle.send_all(small)
        (answer,) = await _read_frames(idle, 1)
        assert answer.body == b"y" * 1000
        # frames completed in time never time out, however long the connection lives
        async with open_remoting_client() as rc:
            addr = format_address(host, port)
            with trio.fail_after(WAIT_S):
                end = trio.current_time() + 0.5
                while trio.current_time() < end:
                    r = await rc.invoke(addr, RemotingCommand.request(ECHO, body=bytes(200_000)))
                    assert r.code == ResponseCode.SUCCESS
        assert srv.partial_frame_timeouts == 2
        assert srv.runtime_info()["remotingPartialFrameTimeouts"] == "2"


async def test_connection_limit_refuses_the_next_and_counts_it(nursery: trio.Nursery) -> None:
    srv = _server(max_connections=3)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    ping = _frame(ECHO, b"ping")
    kept = [await _connect(host, port) for _ in range(3)]
    try:
        for s in kept:
            await s.send_all(ping)
            (answer,) = await _read_frames(s, 1)
            assert answer.body == b"ping"
        over = await _connect(host, port)  # the kernel accepts; the server closes it at once
        async with over:
            assert await _closed_by_peer(over)
        assert srv.refused_connections == 1
        assert srv.runtime_info()["remotingRefusedConnections"] == "1"
        assert len(srv.connections) == 3
        for s in kept:  # the three keep working
            await s.send_all(ping)
            assert (await _read_frames(s, 1))[0].body == b"ping"
        await kept.pop().aclose()  # one goes: a new one is served
        await _until(lambda: len(srv.connections) == 2)
        async with open_remoting_client() as rc:
            r = await rc.invoke(format_address(host, port), RemotingCommand.request(ECHO), WAIT_S)
            assert r.code == ResponseCode.SUCCESS
        assert srv.refused_connections == 1
    finally:
        for s in kept:
            await s.aclose()


async def test_4_mib_messages_round_trip_and_buffers_shrink_back(nursery: trio.Nursery) -> None:
    srv = _server(max_buffered_input_bytes=MIN_MAX_BUFFERED_INPUT_BYTES)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    addr = format_address(host, port)
    bodies = [os.urandom(4 * MIB) for _ in range(4)]
    clients_done = []

    async def client(body: bytes) -> None:
        async with open_remoting_client() as rc:  # a connection each
            for _ in range(2):
                r = await rc.invoke(addr, RemotingCommand.request(ECHO, body=body), WAIT_S)
                assert r.code == ResponseCode.SUCCESS and r.body == body
            conn = await rc.connection(addr)
            # the client's decoder, too, holds nothing once the answer is complete
            assert conn._decoder.buffered == 0
            assert sys.getsizeof(conn._decoder._buf) < 1024
            clients_done.append(conn)
            await _until(lambda: srv.buffered_input_bytes == 0 or len(clients_done) < 4)
            if len(clients_done) == 4:  # all served: every server-side buffer is back to empty
                for c in srv.connections:
                    assert c._decoder.buffered == 0
                    assert sys.getsizeof(c._decoder._buf) < 1024

    async with trio.open_nursery() as n:
        for body in bodies:
            n.start_soon(client, body)
    assert srv.buffered_input_peak_bytes <= srv.max_buffered_input_bytes
    assert srv.buffered_input_bytes == 0


async def test_frame_length_word_split_across_reads_is_admitted(nursery: trio.Nursery) -> None:
    """The budget learns a big frame's size even when its 4-byte length word arrives in pieces
    (the decoder then admits the frame whole before reading on)."""
    srv = _server()
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    frame = _frame(SIZE, bytes(3 * MIB))
    async with await _connect(host, port) as s:
        await s.send_all(frame[:2])
        await _until(lambda: srv.buffered_input_bytes == 2 * 2 + 64)  # two bytes, unadmitted
        await s.send_all(frame[2:3])
        await _until(lambda: srv.buffered_input_bytes == 2 * 3 + 64)
        await s.send_all(frame[3:5])
        # the length word is complete: the frame's grant is reserved at once
        await _until(lambda: srv.buffered_input_bytes >= len(frame))
        await s.send_all(frame[5:])
        (answer,) = await _read_frames(s, 1)
        assert answer.remark == str(3 * MIB)
    await _until(lambda: srv.buffered_input_bytes == 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.sampled_from([0, 10, 5000, 70_000, 300_000]), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=1, max_value=200_000), max_size=12),
)
def test_any_split_of_any_frames_is_answered_and_fully_released(
    sizes: list[int], cuts: list[int]
) -> None:
    frames = b"".join(_frame(SIZE, bytes(size), opaque=i + 1) for i, size in enumerate(sizes))
    points = sorted({c % len(frames) for c in cuts} - {0})
    pieces = [frames[a:b] for a, b in zip([0, *points], [*points, len(frames)], strict=True)]

    async def main() -> None:
        srv = _server(max_buffered_input_bytes=MIN_MAX_BUFFERED_INPUT_BYTES)
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
            async with await _connect(host, port) as s:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for piece in pieces:
                    await s.send_all(piece)
                    await trio.testing.wait_all_tasks_blocked()  # the server reads this piece
                answers = await _read_frames(s, len(sizes))
                assert [a.remark for a in answers] == [str(size) for size in sizes]
                assert [a.opaque for a in answers] == list(range(1, len(sizes) + 1))
                assert srv.buffered_input_bytes == 0
            assert srv.buffered_input_peak_bytes <= srv.max_buffered_input_bytes
            nursery.cancel_scope.cancel()

    trio.run(main)


async def test_broker_reads_the_limits_from_its_config_and_reports_them(tmp_path: Path) -> None:
    async with running_cluster(
        tmp_path, serverMaxConnections="50", serverMaxBufferedInputBytes=str(64 * MIB),
        serverPartialFrameTimeoutSeconds="7.5",
    ) as cluster:
        server = cluster.broker.server
        assert server is not None
        assert server.max_connections == 50
        assert server.max_buffered_input_bytes == 64 * MIB
        assert server.partial_frame_timeout == 7.5
        # a message as big as the broker takes (4 MiB with its stored headers) goes through
        async with Producer("MemPG", client_config=cluster.client_config()) as p:
            body = os.urandom(4 * MIB - 4096)
            sent = await p.send(Message("MemT", body), queue=MessageQueue("MemT", "broker-a", 0))
            assert sent.status.name == "SEND_OK"
        async with open_remoting_client() as rc:
            r = await rc.invoke(cluster.addr,
                                RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = KVTable.decode(bytes(r.body)).table
        assert table["remotingMaxConnections"] == "50"
        assert table["remotingRefusedConnections"] == "0"
        assert int(table["remotingBufferedInputPeakBytes"]) >= 4 * MIB
        assert int(table["remotingBufferedInputPeakBytes"]) <= 64 * MIB
        assert cluster.ns.server is not None
        assert cluster.ns.server.max_connections == 10_000
