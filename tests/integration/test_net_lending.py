"""Lone calls read their own responses (``Lending.call``, lending.py) over real loopback sockets:
every way a call can end, and the peer's requests before, during and after such calls."""

from __future__ import annotations

import contextlib
import functools
import math
import socket
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing

from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.connection_state import LEND_QUIET_S
from rmq_cluster.cluster.remoting.errors import (
    RemotingClosedError,
    RemotingTimeoutError,
    RemotingUnsentError,
)
from rmq_cluster.cluster.remoting.processors import LATER, Later, ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

ECHO, HOLD, CALL_BACK, NOTIFY = 1, 2, 3, 40


class Peer:
    """The server side: echo, a held request, and a request that calls the client back."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.conns: list[Connection] = []

    async def echo(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields=req.ext_fields)

    async def hold(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        await self.release.wait()
        return req.response(0, remark="released")

    async def call_back(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        answer = await conn.invoke(RemotingCommand.request(NOTIFY, {"g": "G"}), timeout=5)
        return req.response(0, remark=f"client said {answer.remark}")


@pytest.fixture
async def peer(nursery: trio.Nursery) -> AsyncIterator[tuple[str, Peer]]:
    p = Peer()
    srv = RemotingServer(
        ProcessorTable({ECHO: p.echo, HOLD: p.hold, CALL_BACK: p.call_back}),
        node="peer",
        on_connect=p.conns.append,
    )
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    yield format_address(host, port), p


def _notify(conn: Connection, req: RemotingCommand) -> RemotingCommand:
    return req.response(0, remark=f"notified {req.ext_fields['g']}")


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for a connection's internal state (it has no event to wait on), with a deadline."""
    with trio.fail_after(5):
        while not condition():  # noqa: ASYNC110 - nothing to wait on but the state itself
            await trio.sleep(0.001)


async def _lending(conn: Connection) -> None:
    """Wait until the reader has parked, lending its reading to the next lone call."""
    await _until(lambda: conn._lending.lender is not None)


@contextlib.asynccontextmanager
async def _lending_connection(
    addr: str, processors: dict[int, Any] | None = None
) -> AsyncIterator[tuple[RemotingClient, Connection]]:
    """A client pool and its connection to ``addr`` after one answered call: lending."""
    async with open_remoting_client(processors) as client:
        conn = await client.connection(addr)
        await _echo(conn, 0)  # the reader reads this one, then lends
        await _lending(conn)
        yield client, conn


async def _echo(conn: Connection, i: int, timeout: float = 5) -> None:
    r = await conn.invoke(RemotingCommand.request(ECHO, {"i": i}), timeout)
    assert r.ext_fields == {"i": str(i)}


async def test_sequential_calls_read_their_own_responses(peer: tuple[str, Peer]) -> None:
    addr, _ = peer
    async with _lending_connection(addr) as (_client, conn):
        for i in range(1, 301):
            await _echo(conn, i)
        assert conn.lone_calls >= 290  # (a lend may lapse for one call after LEND_IDLE_S)


async def test_a_peer_request_between_lone_calls_is_answered(peer: tuple[str, Peer]) -> None:
    addr, p = peer
    async with _lending_connection(addr, {NOTIFY: _notify}) as (_client, conn):
        # nobody calls: the reader looks within LEND_IDLE_S (50 ms); the alternative is a hang,
        # so the bound only needs room for a loaded machine
        with trio.fail_after(5):
            answer = await p.conns[0].invoke(RemotingCommand.request(NOTIFY, {"g": "A"}))
        assert answer.remark == "notified A"
        await _echo(conn, 1)
        # the peer spoke lately: the reader stays on the socket for a while
        assert conn._lending.lender is None
        assert conn._state.last_read - conn._state.peer_request_read <= LEND_QUIET_S


async def test_a_peer_request_during_a_lone_call_is_answered(peer: tuple[str, Peer]) -> None:
    addr, _ = peer
    async with _lending_connection(addr, {NOTIFY: _notify}) as (_client, conn):
        lone = conn.lone_calls
        with trio.fail_after(5):  # the peer calls us before it answers our call
            r = await conn.invoke(RemotingCommand.request(CALL_BACK), timeout=5)
        assert r.remark == "client said notified G"
        assert conn.lone_calls == lone + 1
        await _echo(conn, 1)


async def test_other_calls_during_a_lone_call_are_matched(peer: tuple[str, Peer]) -> None:
    addr, p = peer
    async with _lending_connection(addr) as (_client, conn):
        held: list[RemotingCommand] = []

        async def hold() -> None:
            held.append(await conn.invoke(RemotingCommand.request(HOLD), timeout=10))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)  # a lone call: it reads while held
            await _until(lambda: conn._lending.reading_call is not None)
            with trio.fail_after(5):
                for i in range(1, 51):  # these are not alone: the holder reads their answers
                    await _echo(conn, i)
            assert held == []
            p.release.set()
        assert held[0].remark == "released"
        for i in range(51, 61):  # and the reader is back to normal afterwards
            await _echo(conn, i)


async def test_a_lone_call_times_out_and_the_connection_stays_usable(
    peer: tuple[str, Peer],
) -> None:
    addr, p = peer
    async with _lending_connection(addr) as (_client, conn):
        lone = conn.lone_calls
        started = trio.current_time()
        with (
            trio.fail_after(5),
            pytest.raises(RemotingTimeoutError, match="response to request code 2"),
        ):
            await conn.invoke(RemotingCommand.request(HOLD), timeout=0.3)
        assert 0.3 <= trio.current_time() - started < 2.0
        assert conn.lone_calls == lone + 1
        await _echo(conn, 1)
        p.release.set()  # the late answer is dropped, not matched to a later call
        for i in range(2, 12):
            await _echo(conn, i)
        assert not conn.is_closed


async def test_a_cancelled_lone_call_leaves_the_connection_usable(peer: tuple[str, Peer]) -> None:
    addr, p = peer
    async with _lending_connection(addr) as (_client, conn):
        with trio.move_on_after(0.2) as scope:
            await conn.invoke(RemotingCommand.request(HOLD), timeout=30)
        assert scope.cancelled_caught
        assert conn.pending_calls == 0
        await _echo(conn, 1)
        p.release.set()
        await _echo(conn, 2)


async def test_the_peer_closing_fails_a_lone_call(peer: tuple[str, Peer]) -> None:
    addr, p = peer
    async with _lending_connection(addr) as (client, conn):

        async def drop() -> None:
            await _until(lambda: conn._lending.reading_call is not None)
            await p.conns[0].aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drop)
            with trio.fail_after(5), pytest.raises(RemotingClosedError):
                await conn.invoke(RemotingCommand.request(HOLD), timeout=30)
        assert conn.is_closed  # "peer closed", or a reset: the peer closed with a call held
        assert conn.close_reason == "peer closed" or "reset" in (conn.close_reason or "")
        await _echo(await client.connection(addr), 1)  # the pool connects again


async def test_the_peer_closing_an_idle_lending_connection_is_noticed(
    peer: tuple[str, Peer],
) -> None:
    addr, p = peer
    async with _lending_connection(addr) as (_client, conn):
        await p.conns[0].aclose()
        with trio.fail_after(5):  # within LEND_IDLE_S; else never (room for a loaded machine)
            await conn.closed.wait()
        assert conn.close_reason == "peer closed"


async def test_a_malformed_answer_to_a_lone_call_closes_the_connection(
    nursery: trio.Nursery,
) -> None:
    async def serve(stream: trio.SocketStream) -> None:
        decoder, answered = FrameDecoder(), 0
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            for req in decoder.feed(data):
                if answered == 0:
                    await stream.send_all(encode(req.response(0), req.opaque))
                else:  # a frame whose header is not JSON
                    await stream.send_all(struct.pack(">II", 12, 8) + b"not json" + b"tail")
                answered += 1

    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), serve, 0)
    port = listeners[0].socket.getsockname()[1]
    async with open_remoting_client() as client:
        conn = await client.connection(f"127.0.0.1:{port}")
        assert (await conn.invoke(RemotingCommand.request(ECHO))).code == 0
        await _lending(conn)
        with trio.fail_after(5), pytest.raises(RemotingClosedError, match="malformed frame"):
            await conn.invoke(RemotingCommand.request(ECHO))
        assert conn.lone_calls == 1 and conn.is_closed


async def test_a_lone_call_timing_out_mid_send_keeps_the_rest_of_the_send(
    nursery: trio.Nursery,
) -> None:
    """The deadline wakes the caller through the socket: a flusher still sending the call's
    big frame is woken too and must go on sending, not close the connection."""
    reading = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        decoder, answered = FrameDecoder(), 0
        while True:
            if answered == 1:
                await reading.wait()  # a peer that stops reading for a while
            data = await stream.receive_some(1 << 20)
            if not data:
                return
            for req in decoder.feed(data):
                await stream.send_all(
                    encode(req.response(0, ext_fields=req.ext_fields), req.opaque)
                )
                answered += 1

    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), serve, 0)
    port = listeners[0].socket.getsockname()[1]
    async with _lending_connection(f"127.0.0.1:{port}") as (_client, conn):
        big = RemotingCommand.request(ECHO, {"i": "big"}, b"x" * (8 << 20))
        with trio.fail_after(5), pytest.raises(RemotingTimeoutError):
            await conn.invoke(big, timeout=0.3)
        assert conn._state.flushing and not conn.is_closed  # the rest of the frame goes out
        reading.set()
        with trio.fail_after(10):
            await _echo(conn, 1, timeout=10)  # behind the big frame: the stream stayed intact
        assert not conn.is_closed


async def test_only_connections_this_end_opened_lend_their_reading(peer: tuple[str, Peer]) -> None:
    """A server's connection answers its clients' requests without delay: it never parks its
    reader, even after its own call to a quiet client was answered."""
    addr, p = peer
    async with open_remoting_client({NOTIFY: _notify}) as client:
        conn = await client.connection(addr)
        await _echo(conn, 1)
        await _lending(conn)  # the client's own connection lends
        served = p.conns[0]
        served._state.peer_request_read = -math.inf  # as if the client had been quiet for long
        answer = await served.invoke(RemotingCommand.request(NOTIFY, {"g": "S"}))
        assert answer.remark == "notified S"
        await trio.testing.wait_all_tasks_blocked()
        assert served._lending.lender is None and served.lone_calls == 0


async def test_oneway_requests_do_not_keep_the_reader_parked(peer: tuple[str, Peer]) -> None:
    """Oneways never read: a stream of them must not count as lone calls, or nobody would read
    the peer's requests (or notice its close) while they go out."""
    addr, p = peer
    async with _lending_connection(addr, {NOTIFY: _notify}) as (_client, conn):

        async def oneways() -> None:
            for i in range(1000):  # for 10 s unless cancelled
                await conn.invoke_oneway(RemotingCommand.request(ECHO, {"i": i}))
                await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(oneways)
            await trio.sleep(0.1)
            # ~LEND_IDLE_S; never while oneways counted as calls (the stream runs >= 10 s, so
            # 5 s tells the two apart with room for a loaded machine)
            with trio.fail_after(5):
                answer = await p.conns[0].invoke(RemotingCommand.request(NOTIFY, {"g": "O"}))
            assert answer.remark == "notified O"
            nursery.cancel_scope.cancel()


async def test_a_peer_close_between_lone_calls_is_seen_before_the_next_send(
    peer: tuple[str, Peer],
) -> None:
    """Nobody read the close: the next call finds it before sending (RemotingUnsentError) and
    the pool sends it again on a new connection, as it does when the reader saw the close."""
    addr, p = peer
    async with _lending_connection(addr) as (client, conn):
        await p.conns[0].aclose()
        with trio.fail_after(5):
            r = await client.invoke(addr, RemotingCommand.request(ECHO, {"i": "again"}))
        assert r.ext_fields == {"i": "again"}
        assert conn.is_closed and conn.close_reason == "peer closed"
        assert len(p.conns) == 2
        with pytest.raises(RemotingUnsentError):  # straight on the old one: never sent
            await conn.invoke(RemotingCommand.request(ECHO))


async def test_a_lone_call_hands_over_what_it_must_not_wait_for(nursery: trio.Nursery) -> None:
    """The peer's requests take room that only frees later (max_in_flight with LATER answers):
    a lone call does not wait for it in its own task (its deadline and cancel would strike
    mid-batch) but hands the reading back; the reader waits, and loses nothing behind it."""
    kept: list[RemotingCommand] = []

    def defer(conn: Connection, req: RemotingCommand) -> Later:
        kept.append(req)
        return LATER

    async def serve(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder()
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            for req in decoder.feed(data):
                if req.code == ECHO:
                    answer = req.response(0, ext_fields=req.ext_fields)
                    await stream.send_all(encode(answer, req.opaque))
                elif req.code == HOLD:  # two requests for the client, then the answer
                    await stream.send_all(
                        encode(RemotingCommand.request(NOTIFY), 1001)
                        + encode(RemotingCommand.request(NOTIFY), 1002)
                        + encode(req.response(0, remark="held"), req.opaque)
                    )

    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), serve, 0)
    port = listeners[0].socket.getsockname()[1]
    sock = socket.create_connection(("127.0.0.1", port))
    conn = Connection(
        sock, ProcessorTable({NOTIFY: defer}), node="c", max_in_flight=1, lend_reading=True
    )
    await nursery.start(conn.run)
    await _echo(conn, 0)
    await _lending(conn)
    started = trio.current_time()
    with trio.fail_after(5), pytest.raises(RemotingTimeoutError):
        # the second request waits for room (the first is unresolved): the call's deadline
        # still ends it on time, though its answer came behind that request
        await conn.invoke(RemotingCommand.request(HOLD), timeout=0.3)
    assert trio.current_time() - started < 2.0  # its 0.3 s, not fail_after's 5 (a loaded run)
    assert conn.lone_calls == 1 and len(kept) == 2
    conn.answer_later(kept[0], RemotingCommand(code=0, flag=1))  # room: the reader goes on
    await _until(lambda: conn._running == 1 and conn._lending.stash is None)
    conn.answer_later(kept[1], RemotingCommand(code=0, flag=1))
    await _until(lambda: conn._running == 0)
    await _echo(conn, 1)
    await conn.aclose()
