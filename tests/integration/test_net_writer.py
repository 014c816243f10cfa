"""The coalescing writer (``Writer``, writer.py) on its own, over a real loopback TCP socket whose
peer reads (or does not) as each test needs: order, the flusher, backpressure, close."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator

import pytest
import trio
import trio.testing

from rmq_cluster.cluster.remoting import writer as writer_module
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand
from rmq_cluster.cluster.remoting.connection_state import (
    MAX_SEND_BUFFERS,
    SCATTER_MIN_BODY_BYTES,
    ConnectionState,
)
from rmq_cluster.cluster.remoting.errors import RemotingClosedError
from rmq_cluster.cluster.remoting.processors import ProcessorTable
from rmq_cluster.cluster.remoting.sockets import Socket
from rmq_cluster.cluster.remoting.writer import Writer

BODY = bytes(range(256)) * 256  # 64 KiB
BODY_LEN = len(BODY)


class Side:
    """A writer with what a connection gives it: state, socket, and a close that records why."""

    def __init__(self, sock: socket.socket, limit: int) -> None:
        self.state = ConnectionState(self, ProcessorTable({}), peer="peer")
        self.sock = Socket(sock)
        self.aborted: list[str] = []
        self.writer = Writer(self.state, self.sock, self.abort, limit=limit)

    async def abort(self, reason: str) -> None:
        self.aborted.append(reason)
        if self.state.close(reason):
            self.writer.release()
            self.sock.close()
        await trio.lowlevel.checkpoint()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback pair (writer end, peer end) with small kernel buffers, so a few
    64 KiB frames fill them."""
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)
        a = socket.socket()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
        a.connect(lst.getsockname())
        b, _ = lst.accept()
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def _read_frames(peer: socket.socket, n: int) -> list[RemotingCommand]:
    tsock = trio.socket.from_stdlib_socket(peer)
    decoder, got = FrameDecoder(), list[RemotingCommand]()
    with trio.fail_after(10):
        while len(got) < n:
            data = await tsock.recv(1 << 20)
            assert data, "the writer's side closed"
            got += decoder.feed(memoryview(data))
    return got


async def _until(condition: Callable[[], bool]) -> None:
    with trio.fail_after(5):
        while not condition():  # noqa: ASYNC110 - the writer's state has no event to wait on
            await trio.sleep(0.001)


def _frame(i: int) -> RemotingCommand:
    return RemotingCommand.request(7, {"i": str(i)}, BODY)


async def test_frames_written_at_once_by_many_tasks_arrive_whole(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    side = Side(pair[0], limit=64 << 20)
    side.writer.nursery = nursery
    async with trio.open_nursery() as writers:
        for i in range(1, 41):
            writers.start_soon(side.writer.write, _frame(i), i, True)
        got = await _read_frames(pair[1], 40)
    assert sorted(c.opaque for c in got) == list(range(1, 41))
    assert all(c.body == BODY and c.ext_fields == {"i": str(c.opaque)} for c in got)
    await _until(lambda: not side.state.flushing)
    assert not side.state.out and not side.aborted


async def test_what_the_kernel_does_not_take_goes_out_by_one_flusher_in_queue_order(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    side = Side(pair[0], limit=64 << 20)
    side.writer.nursery = nursery
    for i in range(1, 33):  # 2 MiB: far more than the kernel buffers while nobody reads
        await side.writer.write(_frame(i), i)
    assert side.state.flushing and side.state.out  # a flusher owns the send side; the rest queued
    got = await _read_frames(pair[1], 32)
    assert [c.opaque for c in got] == list(range(1, 33))
    await _until(lambda: not side.state.flushing)
    assert not side.state.out and not side.aborted


async def test_a_writer_past_the_limit_waits_for_the_peer_to_read(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    side = Side(pair[0], limit=256 * 1024)
    side.writer.nursery = nursery
    written = 0

    async def write_all() -> None:
        nonlocal written
        for i in range(1, 25):
            await side.writer.write(_frame(i), i)
            written = i

    async with trio.open_nursery() as writers:
        writers.start_soon(write_all)
        await trio.testing.wait_all_tasks_blocked()
        assert written < 24 and len(side.state.out) > side.writer.limit  # waiting for room
        got = await _read_frames(pair[1], 24)  # the peer reads: the writer goes on
    assert [c.opaque for c in got] == list(range(1, 25)) and written == 24


async def test_close_wakes_a_writer_waiting_for_room_and_refuses_more(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    side = Side(pair[0], limit=256 * 1024)
    side.writer.nursery = nursery
    with trio.fail_after(5):
        async with trio.open_nursery() as writers:

            async def write_until_closed() -> None:
                with pytest.raises(RemotingClosedError):
                    for i in range(1, 1000):
                        await side.writer.write(_frame(i), i)

            writers.start_soon(write_until_closed)
            await trio.testing.wait_all_tasks_blocked()
            await side.abort("closed by the test")
    assert side.aborted[0] == "closed by the test"  # (the flusher's wait ends with it too)


async def test_a_failed_send_closes_the_connection_not_the_writing_task(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    writer_end, peer = pair
    side = Side(writer_end, limit=64 << 20)
    side.writer.nursery = nursery
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    peer.close()  # a reset: the next sends fail
    with trio.fail_after(5):
        i = 0
        while not side.state.closed:
            i += 1
            await side.writer.write(RemotingCommand.request(7, {"i": str(i)}), i)
            await trio.sleep(0.001)
    assert side.aborted and side.aborted[0].startswith("send failed")


async def test_a_peer_that_takes_nothing_for_the_write_timeout_is_closed(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer_module, "WRITE_TIMEOUT_S", 0.2)
    side = Side(pair[0], limit=64 << 20)
    side.writer.nursery = nursery
    for i in range(1, 17):  # the peer never reads
        await side.writer.write(_frame(i), i)
    assert side.state.flushing
    with trio.fail_after(5):
        await _until(lambda: side.state.closed)
    assert side.aborted == ["peer took nothing for 0.2s"]
    assert side.state.close_reason == "peer took nothing for 0.2s"


def _answer(opaque: int, body: bytes) -> RemotingCommand:
    return RemotingCommand(code=0, opaque=opaque, flag=1, ext_fields={"i": str(opaque)},
                           body=body)


async def test_answer_bodies_go_out_from_their_own_buffers_in_one_scatter_gather_send(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery
) -> None:
    """A pull's records are not copied behind their header into the send buffer: the answer's
    body is queued as a buffer of its own and sent with the headers by ``sendmsg``; the peer
    gets every frame whole and in order, through the flusher too (the kernel buffers are
    small: most of 2 MiB waits for the peer to read)."""
    side = Side(pair[0], limit=64 << 20)
    side.writer.nursery = nursery
    st = side.state
    small = b"x" * 100  # under SCATTER_MIN_BODY_BYTES: copied as before
    assert BODY_LEN >= SCATTER_MIN_BODY_BYTES
    bodies = [bytes([i]) * (BODY_LEN if i % 3 else 100) for i in range(1, 33)]
    for i, body in enumerate(bodies, 1):
        st.queue_answer(i, 11, _answer(i, body if i % 3 else small))
    big = [b for b in bodies if len(b) == BODY_LEN]
    assert all(any(p is b for p in st.parts) for b in big)  # the very bodies, not copies
    assert len(st.out) + sum(len(p) for p in st.parts if len(p) != BODY_LEN) < 32 * 1024
    assert st.queued_bytes == sum(len(p) for p in st.parts) + len(st.out)
    side.writer.send_queued()
    got = await _read_frames(pair[1], 32)
    assert [c.opaque for c in got] == list(range(1, 33))
    assert [bytes(c.body) for c in got] == [b if i % 3 else small
                                            for i, b in enumerate(bodies, 1)]
    await _until(lambda: not st.flushing)
    assert not st.queued_bytes and not side.aborted


async def test_more_answer_bodies_than_one_sendmsg_takes_are_joined_not_lost(
    pair: tuple[socket.socket, socket.socket], nursery: trio.Nursery,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    side = Side(pair[0], limit=64 << 20)
    side.writer.nursery = nursery
    st = side.state
    n = MAX_SEND_BUFFERS // 2 + 2  # 2 buffers each (header, body): more than one send takes
    reps = SCATTER_MIN_BODY_BYTES // 4
    for i in range(1, n + 1):
        st.queue_answer(i, 11, _answer(i, i.to_bytes(4, "big") * reps))
    handed: list[int] = []
    sendmsg = Socket.try_sendmsg

    def counting(sock: Socket, buffers: list[bytes | bytearray | memoryview]) -> int:
        handed.append(len(buffers))
        return sendmsg(sock, buffers)

    monkeypatch.setattr(Socket, "try_sendmsg", counting)
    side.writer.send_queued()
    assert handed == [MAX_SEND_BUFFERS]  # the rest joined into the last buffer
    got = await _read_frames(pair[1], n)
    assert [c.opaque for c in got] == list(range(1, n + 1))
    assert all(bytes(c.body) == c.opaque.to_bytes(4, "big") * reps for c in got)
    await _until(lambda: not st.flushing)
    assert not st.queued_bytes and not side.aborted
