"""``HeldAnswers`` over real loopback connections: answers held until a watermark reaches their
key go out when it does (each connection's in one send, in order), expire into their expired
form after their deadline, hold a request's place in the connection's in-flight limit, and are
dropped with a connection that closed; plus a model check of the bookkeeping."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import given, settings

from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.connection import Connection
from rmq_cluster.cluster.remoting.held import HeldAnswers
from rmq_cluster.cluster.remoting.processors import LATER, Later, ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

HOLD = 7
EXPIRED = 17  # the code the expired form answers with


def _expired(ok: RemotingCommand, key: int) -> RemotingCommand:
    return ok.response(EXPIRED, f"expired after {ok.remark}", ok.ext_fields)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def _server(
    nursery: trio.Nursery, held: HeldAnswers, max_in_flight: int = 1024
) -> AsyncIterator[tuple[str, RemotingServer]]:
    def hold(conn: Connection, req: RemotingCommand) -> Later:
        k = req.ext_fields["k"]
        return held.hold(conn, req.opaque, req.response(0, f"ok {k}", {"k": k}), int(k))

    srv = RemotingServer(ProcessorTable({HOLD: hold}), node="held", max_in_flight=max_in_flight)
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    yield format_address(host, port), srv


async def _call(conn: Connection, key: int, out: dict[int, RemotingCommand]) -> None:
    out[key] = await conn.invoke(RemotingCommand.request(HOLD, {"k": key}), timeout=10)


async def _quiet() -> None:
    """Until every task is blocked (the answers sent have been read)."""
    with trio.fail_after(5):
        await trio.testing.wait_all_tasks_blocked(0.05)


async def test_answers_go_out_when_the_watermark_reaches_their_keys(
    nursery: trio.Nursery,
) -> None:
    held = HeldAnswers(_expired, timeout_s=60)
    got: dict[int, RemotingCommand] = {}
    async with _server(nursery, held) as (addr, srv), open_remoting_client() as c1, \
            open_remoting_client() as c2:
        conn1, conn2 = await c1.connection(addr), await c2.connection(addr)
        async with trio.open_nursery() as calls:
            for key, conn in ((10, conn1), (15, conn2), (20, conn1), (25, conn2), (30, conn1)):
                calls.start_soon(_call, conn, key, got)
                await _quiet()  # in this order: keys rise per connection
            assert held.waiting == 5 and not got
            assert sorted(c._running for c in srv.connections) == [2, 3]

            assert held.advance(20) == 3  # a key equal to the mark is covered
            await _quiet()
            assert sorted(got) == [10, 15, 20]
            assert held.waiting == 2 and held.advance(24) == 0

            assert held.advance(10**9) == 2
        assert sorted(got) == [10, 15, 20, 25, 30]
        for key, resp in got.items():
            assert (resp.code, resp.remark, resp.ext_fields) == (0, f"ok {key}", {"k": str(key)})
        assert [c._running for c in srv.connections] == [0, 0]
        assert (held.waiting, held.held_total, held.released_total) == (0, 5, 5)
        assert held.next_deadline() is None and not held._queues


async def test_expired_answers_get_their_expired_form(nursery: trio.Nursery) -> None:
    clock = _Clock()
    held = HeldAnswers(_expired, timeout_s=10, clock=clock)
    got: dict[int, RemotingCommand] = {}
    async with _server(nursery, held) as (addr, srv), open_remoting_client() as client:
        conn = await client.connection(addr)
        async with trio.open_nursery() as calls:
            for key in (1, 2):
                calls.start_soon(_call, conn, key, got)
            await _quiet()
            clock.now = 5.0
            calls.start_soon(_call, conn, 3, got)
            await _quiet()
            assert held.next_deadline() == 10.0
            assert held.expire(9.99) == 0
            assert held.expire(10.0) == 2
            await _quiet()
            assert sorted(got) == [1, 2] and held.next_deadline() == 15.0
            assert held.advance(3) == 1
        for key in (1, 2):  # the held answer's fields under the expired form's code
            assert (got[key].code, got[key].remark, got[key].ext_fields) == (
                EXPIRED, f"expired after ok {key}", {"k": str(key)},
            )
        assert got[3].code == 0
        assert [c._running for c in srv.connections] == [0]
        assert held.expired_total == 2 and held.expire_all() == 0


async def test_a_held_answer_keeps_its_place_in_the_in_flight_limit(
    nursery: trio.Nursery,
) -> None:
    """max_in_flight 2: the third request is taken (its answer held) and then the reader waits
    for room; the fourth waits unread until an answer is released."""
    held = HeldAnswers(_expired, timeout_s=60)
    got: dict[int, RemotingCommand] = {}
    async with _server(nursery, held, max_in_flight=2) as (addr, srv), \
            open_remoting_client() as client:
        conn = await client.connection(addr)
        async with trio.open_nursery() as calls:
            for key in (1, 2, 3, 4):
                calls.start_soon(_call, conn, key, got)
                await _quiet()
            (server_conn,) = srv.connections
            assert held.waiting == 3 and server_conn._running == 3
            held.advance(1)
            await _quiet()
            assert sorted(got) == [1] and held.waiting == 3  # 2, 3 and now 4
            held.advance(4)
        assert sorted(got) == [1, 2, 3, 4]
        assert server_conn.busy_refusals == 0 and server_conn._running == 0


async def test_answers_of_a_closed_connection_are_dropped(nursery: trio.Nursery) -> None:
    held = HeldAnswers(_expired, timeout_s=60)
    async with _server(nursery, held) as (addr, srv):
        async with open_remoting_client() as client:
            conn = await client.connection(addr)
            async with trio.open_nursery() as calls:
                calls.start_soon(_call, conn, 5, {})
                await _quiet()
                assert held.waiting == 1
                calls.cancel_scope.cancel()
        with trio.fail_after(5):
            while srv.connections:  # noqa: ASYNC110 - the server notices the close
                await trio.sleep(0.01)
        assert held.advance(5) == 1  # nothing to send it to: dropped, no error
        assert held.waiting == 0 and not held._queues


async def test_a_lone_call_hands_back_held_requests_over_the_limit(nursery: trio.Nursery) -> None:
    """On a connection this end opened (lending its reading), the peer's requests whose answers
    are held count against max_in_flight too: past it, the lone call hands the rest of its read
    back to the reader, which takes it once answers are released."""
    held = HeldAnswers(_expired, timeout_s=60)
    ping, calls_sent = 8, trio.Event()

    def hold(conn: Connection, req: RemotingCommand) -> Later:
        k = req.ext_fields["k"]
        return held.hold(conn, req.opaque, req.response(0, f"ok {k}", {"k": k}), int(k))

    async def call_back(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        assert conn._nursery is not None
        for k in range(int(req.ext_fields["n"])):  # requests to the client, one write each
            conn._nursery.start_soon(conn.invoke, RemotingCommand.request(HOLD, {"k": k}), 30)
            await trio.testing.wait_all_tasks_blocked()
        calls_sent.set()
        return req.response(0, "pong")

    srv = RemotingServer(ProcessorTable({ping: call_back}), node="srv")
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    async with open_remoting_client({HOLD: hold}, node="cli") as client:
        conn = await client.connection(format_address(host, port))
        conn._max_in_flight = 2
        await conn.invoke(RemotingCommand.request(ping, {"n": 0}), timeout=5)
        with trio.fail_after(5):
            while conn._lender is None:  # noqa: ASYNC110 - the reader parks (lends)
                await trio.sleep(0.001)
        got: dict[int, RemotingCommand] = {}
        async with trio.open_nursery() as calls:
            calls.start_soon(_call_ping, conn, ping, got)
            await calls_sent.wait()
            await _quiet()
            assert conn.lone_calls == 1  # the second call read (lent) until it handed back
            # one over the limit: the reader waits for room before reading on
            assert held.waiting == 3 and conn._running == 3 and not got
            for mark in range(6):
                held.advance(mark)
                await _quiet()
                assert conn._running <= 3
        assert got[0].remark == "pong"
        assert held.released_total == 6 and conn._running == 0 and conn.busy_refusals == 0


async def _call_ping(conn: Connection, code: int, out: dict[int, RemotingCommand]) -> None:
    out[0] = await conn.invoke(RemotingCommand.request(code, {"n": 6}), timeout=10)


async def test_a_held_request_before_a_malformed_frame_is_counted(
    nursery: trio.Nursery,
) -> None:
    held = HeldAnswers(_expired, timeout_s=60)
    async with _server(nursery, held) as (addr, srv):
        host, port = addr.rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        garbage = (8).to_bytes(4, "big") + (0xFF000004).to_bytes(4, "big") + bytes(8)
        await stream.send_all(encode(RemotingCommand.request(HOLD, {"k": 5}), 1) + garbage)
        with trio.fail_after(5):
            while held.waiting == 0 or srv.connections:  # noqa: ASYNC110 - held, then closed
                await trio.sleep(0.01)
        (conn,) = held._queues
        assert conn._running == 1
        held.advance(5)
        assert conn._running == 0 and not held._queues
        await stream.aclose()


def test_an_answer_that_cannot_be_encoded_leaves_nothing_held() -> None:
    """The hold fails as a processor's error would; the queues stay well formed (an empty one
    would break the next release or deadline, in the HA read side or sweeper)."""
    held = HeldAnswers(_expired, timeout_s=5, clock=_Clock())
    a, b = _FakeConn(), _FakeConn()
    held.hold(a, 1, RemotingCommand(code=0, flag=1), 10)  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - the codec's own error
        held.hold(b, 2**31, RemotingCommand(code=0, flag=1), 20)  # type: ignore[arg-type]
    assert (held.waiting, len(held._queues), held.next_deadline()) == (1, 1, 5.0)
    assert held.advance(9) == 0 and held.advance(100) == 1
    assert [r.opaque for r in a.answers] == [1] and not b.answers


def test_an_ack_below_every_held_key_looks_at_no_connection() -> None:
    held = HeldAnswers(_expired, timeout_s=5, clock=_Clock())
    conns = [_FakeConn() for _ in range(3)]
    for i, conn in enumerate(conns):
        held.hold(conn, i, RemotingCommand(code=0, flag=1), 100 + i)  # type: ignore[arg-type]
    held._queues = _NoScan(held._queues)  # type: ignore[assignment]
    assert held.advance(99) == 0  # the smallest key answers it: no scan
    held._queues = dict(held._queues)
    assert held.advance(101) == 2 and held._min_key == 102
    assert held.advance(101) == 0 and held.advance(102) == 1
    assert held._min_key == float("inf")


class _NoScan(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise AssertionError("scanned")


# ------------------------------------------------------------------ the bookkeeping, as a model


class _FakeConn:
    """What ``HeldAnswers`` uses of a connection: ``_held_released``."""

    def __init__(self) -> None:
        self.answers: list[RemotingCommand] = []
        self.sends = 0

    def _held_released(self, frames: bytearray, n: int) -> None:
        got = FrameDecoder().feed(bytes(frames))
        assert len(got) == n
        self.answers.extend(got)
        self.sends += 1


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("hold"), st.integers(0, 2), st.integers(0, 3)),  # conn, key step
        st.tuples(st.just("release"), st.integers(0, 6), st.just(0)),  # mark step
        st.tuples(st.just("tick"), st.integers(0, 4), st.just(0)),  # seconds
        st.tuples(st.just("expire"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_every_held_answer_goes_out_once_in_order_by_its_own_fate(ops: list[Any]) -> None:
    """Each answer is sent exactly once, per connection in hold order, as released when the
    mark reached its key before its deadline passed, else in its expired form."""
    clock = _Clock()
    held = HeldAnswers(_expired, timeout_s=5, clock=clock)
    conns = [_FakeConn() for _ in range(3)]
    key = 0  # keys rise overall, as end offsets do
    mark = 0
    fate: dict[int, int] = {}  # opaque -> expected code
    deadline: dict[int, float] = {}
    keys: dict[int, int] = {}
    order: list[list[int]] = [[], [], []]
    opaque = 0
    for op, a, b in ops:
        if op == "hold":
            key = max(key + b, mark + 1)  # (a key the mark passed is answered inline)
            opaque += 1
            conn = conns[a]
            req = RemotingCommand.request(HOLD, {"k": key})
            assert held.hold(conn, opaque, req.response(0, "ok", {"k": key}), key) is LATER  # type: ignore[arg-type]
            keys[opaque], deadline[opaque] = key, clock.now + 5
            order[a].append(opaque)
        elif op == "release":
            mark += a
            held.advance(mark)
            for o, k in keys.items():
                if k <= mark:
                    fate.setdefault(o, 0)
        elif op == "tick":
            clock.now += a
        else:
            held.expire(clock.now)
            for o, d in deadline.items():
                if d <= clock.now and o not in fate:
                    fate[o] = EXPIRED
    pending = {o for o in keys if o not in fate}
    assert held.waiting == len(pending)
    for conn, expected in zip(conns, order, strict=True):
        sent = [r.opaque for r in conn.answers]
        assert sent == [o for o in expected if o in fate]  # in hold order, each once
        for r in conn.answers:
            assert r.code == fate[r.opaque]
    assert held.expire_all() == len(pending)
    for conn, expected in zip(conns, order, strict=True):
        assert [r.opaque for r in conn.answers] == expected
