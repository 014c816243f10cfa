"""The Trio remoting shell over real loopback sockets."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import AsyncIterator

import pytest
import trio

from rmq_cluster.cluster.remoting.address import format_address
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.cluster.remoting.connection import MAX_FRAMES_PER_READ_STEP, Connection
from rmq_cluster.cluster.remoting.errors import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from rmq_cluster.cluster.remoting.processors import LATER, Later, ProcessorTable
from rmq_cluster.cluster.remoting.server import RemotingServer

ECHO, HOLD, BOOM, ONEWAY_SINK, NOTHING, JITTER, CALL_BACK = 1, 2, 3, 4, 5, 6, 7
SYNC_ECHO, SYNC_BOOM, SYNC_NOTHING, SYNC_SINK = 11, 12, 13, 14


class Harness:
    def __init__(self) -> None:
        self.release_hold = trio.Event()
        self.oneway_seen: list[RemotingCommand] = []
        self.oneway_event = trio.Event()
        self.client_conns: list[Connection] = []
        self.closed_conns: list[Connection] = []
        self.connected = trio.Event()
        self.closed = trio.Event()

    def on_connect(self, conn: Connection) -> None:
        self.client_conns.append(conn)
        self.connected.set()

    def on_close(self, conn: Connection) -> None:
        self.closed_conns.append(conn)
        self.closed.set()

    async def echo(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields=req.ext_fields, body=req.body)

    async def hold(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        await self.release_hold.wait()
        return req.response(0, remark="released")

    async def boom(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        raise ValueError("processor blew up")

    async def sink(self, conn: Connection, req: RemotingCommand) -> None:
        self.oneway_seen.append(req)
        self.oneway_event.set()

    async def nothing(self, conn: Connection, req: RemotingCommand) -> None:
        return None

    async def jitter(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        # answer out of order: later requests may overtake earlier ones
        for _ in range(int(req.ext_fields["n"]) % 7):
            await trio.lowlevel.checkpoint()
        return req.response(0, ext_fields={"n": req.ext_fields["n"]})

    async def call_back(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        # the server calls the connected client, then answers
        answer = await conn.invoke(RemotingCommand.request(40, {"consumerGroup": "G"}), timeout=5)
        return req.response(0, remark=f"client said {answer.remark}")

    def table(self) -> ProcessorTable:
        return ProcessorTable(
            {
                ECHO: self.echo,
                HOLD: self.hold,
                BOOM: self.boom,
                ONEWAY_SINK: self.sink,
                NOTHING: self.nothing,
                JITTER: self.jitter,
                CALL_BACK: self.call_back,
                SYNC_ECHO: self.sync_echo,
                SYNC_BOOM: self.sync_boom,
                SYNC_NOTHING: self.sync_nothing,
                SYNC_SINK: self.sync_sink,
            }
        )

    # plain ``def`` processors run inline in the reader
    def sync_echo(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, ext_fields=req.ext_fields, body=req.body)

    def sync_boom(self, conn: Connection, req: RemotingCommand) -> RemotingCommand:
        raise KeyError("inline bug")

    def sync_nothing(self, conn: Connection, req: RemotingCommand) -> None:
        return None

    def sync_sink(self, conn: Connection, req: RemotingCommand) -> None:
        self.oneway_seen.append(req)


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[tuple[str, Harness, RemotingServer]]:
    harness = Harness()
    srv = RemotingServer(
        harness.table(),
        node="test-server",
        on_connect=harness.on_connect,
        on_close=harness.on_close,
    )
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    assert host == "127.0.0.1" and port > 0
    yield format_address(host, port), harness, srv


async def test_echo_and_error_responses(server: tuple[str, Harness, RemotingServer]) -> None:
    addr, _, _ = server
    async with open_remoting_client() as client:
        r = await client.invoke(addr, RemotingCommand.request(ECHO, {"k": 1}, b"payload"))
        assert (r.code, r.ext_fields, r.body, r.is_response) == (0, {"k": "1"}, b"payload", True)

        r = await client.invoke(addr, RemotingCommand.request(999))
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert r.remark == " request type 999 not supported"

        r = await client.invoke(addr, RemotingCommand.request(BOOM))
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert r.remark == "ValueError: processor blew up"

        r = await client.invoke(addr, RemotingCommand.request(NOTHING))
        assert r.code == ResponseCode.SYSTEM_ERROR  # a non-oneway request always gets an answer


async def test_ten_thousand_concurrent_requests_out_of_order_all_matched(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, _ = server
    results: dict[int, str] = {}
    async with open_remoting_client() as client:
        conn = await client.connection(addr)

        async def call(n: int) -> None:
            r = await conn.invoke(RemotingCommand.request(JITTER, {"n": n}), timeout=60)
            results[n] = r.ext_fields["n"]

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for n in range(10_000):
                    nursery.start_soon(call, n)
    assert results == {n: str(n) for n in range(10_000)}
    assert len(harness.client_conns) == 1  # all of it went over one connection


async def test_held_request_does_not_delay_others(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, _ = server
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        held: list[RemotingCommand] = []

        async def hold() -> None:
            held.append(await conn.invoke(RemotingCommand.request(HOLD), timeout=30))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            with trio.fail_after(5):
                for i in range(50):
                    r = await conn.invoke(RemotingCommand.request(ECHO, {"i": i}))
                    assert r.ext_fields == {"i": str(i)}
            assert held == []  # still parked while 50 others were answered
            harness.release_hold.set()
        assert held[0].remark == "released"


async def test_garbage_on_one_connection_leaves_others_served(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, srv = server
    host, port = addr.rsplit(":", 1)
    async with open_remoting_client() as client:
        await client.invoke(addr, RemotingCommand.request(ECHO))
        raw = await trio.open_tcp_stream(host, int(port))
        try:
            # a frame whose header is not JSON, then more bytes
            await raw.send_all(struct.pack(">II", 12, 8) + b"not json" + b"tail")
            with trio.fail_after(5):
                while await raw.receive_some(1024):
                    pass  # the server must close this connection
        finally:
            await raw.aclose()
        with trio.fail_after(5):
            await harness.closed.wait()
        assert "malformed frame" in (harness.closed_conns[0].close_reason or "")
        r = await client.invoke(addr, RemotingCommand.request(ECHO, {"still": "here"}))
        assert r.ext_fields == {"still": "here"}
        assert len(srv.connections) == 1


async def test_oversized_frame_closes_only_that_connection(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, _, _ = server
    host, port = addr.rsplit(":", 1)
    raw = await trio.open_tcp_stream(host, int(port))
    try:
        await raw.send_all(struct.pack(">I", 64 * 1024 * 1024))
        with trio.fail_after(5):
            assert await raw.receive_some(10) == b""
    finally:
        await raw.aclose()
    async with open_remoting_client() as client:
        assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0


async def test_client_timeout_then_connection_still_usable(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, _ = server
    async with open_remoting_client() as client:
        with pytest.raises(RemotingTimeoutError, match="no response to request code 2"):
            await client.invoke(addr, RemotingCommand.request(HOLD), timeout=0.2)
        r = await client.invoke(addr, RemotingCommand.request(ECHO, {"after": "timeout"}))
        assert r.ext_fields == {"after": "timeout"}
        harness.release_hold.set()  # the late answer is dropped, not mismatched
        r = await client.invoke(addr, RemotingCommand.request(ECHO, {"x": "y"}))
        assert r.ext_fields == {"x": "y"}


async def test_oneway_gets_no_response(server: tuple[str, Harness, RemotingServer]) -> None:
    addr, harness, _ = server
    host, port = addr.rsplit(":", 1)
    raw = await trio.open_tcp_stream(host, int(port))
    try:
        # oneway to a processor, oneway to an unknown code, oneway that raises: no bytes back
        for code in (ONEWAY_SINK, 999, BOOM):
            await raw.send_all(encode(RemotingCommand.request(code, {"c": code}, oneway=True), 1))
        await raw.send_all(encode(RemotingCommand.request(ECHO, {"marker": "1"}), opaque=2))
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        with trio.fail_after(5):
            while not got:
                got += decoder.feed(await raw.receive_some(65536))
        assert [(c.opaque, c.ext_fields) for c in got] == [(2, {"marker": "1"})]
    finally:
        await raw.aclose()
    assert [c.ext_fields for c in harness.oneway_seen] == [{"c": str(ONEWAY_SINK)}]


async def test_server_calls_the_client(server: tuple[str, Harness, RemotingServer]) -> None:
    addr, _, _ = server

    async def notify(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, remark=f"rebalanced {req.ext_fields['consumerGroup']}")

    async with open_remoting_client({40: notify}) as client:
        r = await client.invoke(addr, RemotingCommand.request(CALL_BACK), timeout=10)
        assert r.remark == "client said rebalanced G"


@pytest.mark.parametrize("seen", ["closed", "read"])
async def test_reconnect_on_next_call_after_drop(
    server: tuple[str, Harness, RemotingServer], seen: str
) -> None:
    """The next call after the server drops us goes on a new connection: once the old one
    closed, and already while it winds down ("read": its reader saw the close, its tasks may
    still be ending). Then it must refuse calls unsent, so the pool sends them anew instead of
    writing them to a peer that is gone (they failed "peer closed": a CI flake's cause)."""
    addr, _harness, srv = server
    async with open_remoting_client() as client:
        first = await client.connection(addr)
        await client.invoke(addr, RemotingCommand.request(ECHO))
        for conn in srv.connections:  # the server drops us
            await conn.aclose()
        with trio.fail_after(5):
            if seen == "closed":
                await first.closed.wait()
            while first.close_reason is None:
                await trio.lowlevel.checkpoint()
        assert first.is_closed
        r = await client.invoke(addr, RemotingCommand.request(ECHO, {"again": 1}))
        assert r.ext_fields == {"again": "1"}
        assert (await client.connection(addr)) is not first


async def test_pending_calls_fail_when_the_connection_drops(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, srv = server
    async with open_remoting_client() as client:
        conn = await client.connection(addr)

        async def drop_soon() -> None:
            with trio.fail_after(5):
                await harness.connected.wait()
            for c in srv.connections:
                await c.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drop_soon)
            with pytest.raises(RemotingClosedError):
                await conn.invoke(RemotingCommand.request(HOLD), timeout=30)


async def test_connect_refused_is_a_clear_error() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    async with open_remoting_client() as client:
        with pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"):
            await client.invoke(f"127.0.0.1:{port}", RemotingCommand.request(ECHO))


async def test_idle_server_connection_is_closed(nursery: trio.Nursery) -> None:
    harness = Harness()
    srv = RemotingServer(harness.table(), idle_timeout=0.2, on_close=harness.on_close)
    host, port = await nursery.start(srv.serve)
    async with open_remoting_client() as client:
        conn = await client.connection(format_address(host, port))
        with trio.fail_after(5):
            await conn.closed.wait()
    assert "idle" in (harness.closed_conns[0].close_reason or "")


async def test_binary_header_request_is_answered_in_kind(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, _, _ = server
    host, port = addr.rsplit(":", 1)
    raw = await trio.open_tcp_stream(host, int(port))
    try:
        req = RemotingCommand(code=ECHO, ext_fields={"k": "v"}, body=b"b", serialize_type=1)
        await raw.send_all(encode(req, opaque=77))
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        with trio.fail_after(5):
            while not got:
                got += decoder.feed(await raw.receive_some(65536))
        assert got[0].serialize_type == 1
        assert (got[0].opaque, got[0].ext_fields, got[0].body) == (77, {"k": "v"}, b"b")
    finally:
        await raw.aclose()


async def test_many_connections_in_parallel(server: tuple[str, Harness, RemotingServer]) -> None:
    addr, _, _ = server

    async def one_client(i: int) -> None:
        async with open_remoting_client() as client:
            for j in range(20):
                body = random.randbytes(random.randint(0, 3000))
                r = await client.invoke(addr, RemotingCommand.request(ECHO, {"i": i, "j": j}, body))
                assert (r.ext_fields, r.body) == ({"i": str(i), "j": str(j)}, body)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(one_client, i)


async def test_a_failing_close_callback_does_not_stop_the_server(nursery: trio.Nursery) -> None:
    harness = Harness()

    def bad_on_close(conn: Connection) -> None:
        raise RuntimeError("callback bug")

    srv = RemotingServer(harness.table(), on_close=bad_on_close)
    host, port = await nursery.start(srv.serve)
    addr = format_address(host, port)
    for _ in range(3):
        async with open_remoting_client() as client:
            assert (await client.invoke(addr, RemotingCommand.request(ECHO))).code == 0


async def test_busy_port_is_a_clear_error(server: tuple[str, Harness, RemotingServer]) -> None:
    addr, harness, _ = server
    host, port = addr.rsplit(":", 1)
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
        await RemotingServer(harness.table()).serve(host, int(port))


async def test_large_bodies_cross_partial_sends(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, _, _ = server
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        big = random.randbytes(12 * 1024 * 1024)
        r = await conn.invoke(RemotingCommand.request(ECHO, body=big), timeout=30)
        assert r.body == big

        bodies = [random.randbytes(512 * 1024) for _ in range(24)]
        got: dict[int, bytes] = {}

        async def call(i: int) -> None:
            resp = await conn.invoke(RemotingCommand.request(ECHO, {"i": i}, bodies[i]), timeout=30)
            got[int(resp.ext_fields["i"])] = bytes(resp.body)

        async with trio.open_nursery() as nursery:
            for i in range(len(bodies)):
                nursery.start_soon(call, i)
        assert got == dict(enumerate(bodies))


async def test_sync_processors_answer_inline_with_the_same_rules(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, _ = server
    async with open_remoting_client() as client:
        r = await client.invoke(addr, RemotingCommand.request(SYNC_ECHO, {"k": "v"}, b"b"))
        assert (r.code, r.ext_fields, r.body) == (0, {"k": "v"}, b"b")
        r = await client.invoke(addr, RemotingCommand.request(SYNC_BOOM))
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "KeyError: 'inline bug'")
        r = await client.invoke(addr, RemotingCommand.request(SYNC_NOTHING))
        assert r.code == ResponseCode.SYSTEM_ERROR
        await client.invoke_oneway(addr, RemotingCommand.request(SYNC_SINK, {"o": 1}))
        await client.invoke_oneway(addr, RemotingCommand.request(SYNC_BOOM))
        r = await client.invoke(addr, RemotingCommand.request(SYNC_ECHO, {"after": "oneway"}))
        assert r.ext_fields == {"after": "oneway"}  # nothing came back for the oneways
    assert [c.ext_fields for c in harness.oneway_seen] == [{"o": "1"}]


async def test_inline_and_task_processors_interleave_on_one_connection(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, harness, _ = server
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        got: dict[tuple[int, int], str] = {}
        all_answered = trio.Event()

        async def call(code: int, i: int) -> None:
            r = await conn.invoke(RemotingCommand.request(code, {"n": i}), timeout=30)
            got[code, i] = r.ext_fields["n"]
            if len(got) == 2000:
                all_answered.set()

        held: list[RemotingCommand] = []

        async def hold() -> None:
            held.append(await conn.invoke(RemotingCommand.request(HOLD), timeout=30))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            for i in range(2000):
                nursery.start_soon(call, SYNC_ECHO if i % 2 else JITTER, i)
            with trio.fail_after(30):
                await all_answered.wait()  # every call answered while HOLD is still parked
            assert held == []
            harness.release_hold.set()
        assert got == {(SYNC_ECHO if i % 2 else JITTER, i): str(i) for i in range(2000)}
        assert held[0].remark == "released"


async def test_a_failing_on_connect_closes_that_connection(nursery: trio.Nursery) -> None:
    harness = Harness()

    def bad_on_connect(conn: Connection) -> None:
        raise RuntimeError("on_connect bug")

    srv = RemotingServer(harness.table(), on_connect=bad_on_connect)
    host, port = await nursery.start(srv.serve)
    raw = await trio.open_tcp_stream(host, port)
    try:
        with trio.fail_after(5):
            assert await raw.receive_some(10) == b""  # closed, not left hanging
    finally:
        await raw.aclose()


async def test_unencodable_response_fails_that_call_only(nursery: trio.Nursery) -> None:
    harness = Harness()

    def bad_remark(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        return req.response(0, remark=ValueError("not a str"))  # type: ignore[arg-type]

    srv = RemotingServer(ProcessorTable({**harness.table().processors, 99: bad_remark}))
    host, port = await nursery.start(srv.serve)
    addr = format_address(host, port)
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        held: list[RemotingCommand] = []

        async def hold() -> None:
            held.append(await conn.invoke(RemotingCommand.request(HOLD), timeout=30))

        async with trio.open_nursery() as inner:
            inner.start_soon(hold)
            r = await conn.invoke(RemotingCommand.request(99))
            assert r.code == ResponseCode.SYSTEM_ERROR
            assert "not sendable" in (r.remark or "")
            harness.release_hold.set()
        assert held[0].remark == "released"  # the connection survived


async def test_good_frame_before_garbage_is_still_answered(
    server: tuple[str, Harness, RemotingServer],
) -> None:
    addr, _, _ = server
    host, port = addr.rsplit(":", 1)
    raw = await trio.open_tcp_stream(host, int(port))
    try:
        good = encode(RemotingCommand.request(SYNC_ECHO, {"first": "1"}), opaque=41)
        await raw.send_all(good + struct.pack(">II", 12, 8) + b"not json" + b"tail")
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        with trio.fail_after(5):
            while data := await raw.receive_some(65536):
                got += decoder.feed(data)
        assert [(c.opaque, c.ext_fields) for c in got] == [(41, {"first": "1"})]
    finally:
        await raw.aclose()


async def test_outbound_limit_applies_backpressure_without_hanging(
    server: tuple[str, Harness, RemotingServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rmq_cluster.cluster.remoting import connection

    monkeypatch.setattr(connection, "MAX_OUTBOUND_BUFFER_BYTES", 8 * 1024)
    addr, _, _ = server
    body = random.randbytes(64 * 1024)
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        done = 0

        async def call(i: int) -> None:
            nonlocal done
            r = await conn.invoke(RemotingCommand.request(ECHO, {"i": i}, body), timeout=30)
            assert r.body == body
            done += 1

        with trio.fail_after(30):
            async with trio.open_nursery() as inner:
                for i in range(60):
                    inner.start_soon(call, i)
        assert done == 60


async def test_a_plain_processor_may_defer_its_answer(nursery: trio.Nursery) -> None:
    ready = trio.Event()

    def maybe_wait(conn: Connection, req: RemotingCommand) -> object:
        if req.ext_fields.get("now") == "1":
            return req.response(0, remark="at once")

        async def later() -> RemotingCommand:
            await ready.wait()
            return req.response(0, remark="later")

        return Later(later())

    def boom_later(conn: Connection, req: RemotingCommand) -> object:
        async def later() -> RemotingCommand:
            raise OSError("deferred failure")

        return Later(later())

    srv = RemotingServer(ProcessorTable({1: maybe_wait, 2: boom_later}))  # type: ignore[dict-item]
    host, port = await nursery.start(srv.serve)
    addr = format_address(host, port)
    async with open_remoting_client() as client:
        conn = await client.connection(addr)
        got: list[str | None] = []

        async def deferred_call() -> None:
            got.append((await conn.invoke(RemotingCommand.request(1), timeout=10)).remark)

        async with trio.open_nursery() as inner:
            inner.start_soon(deferred_call)
            r = await conn.invoke(RemotingCommand.request(1, {"now": "1"}))
            assert r.remark == "at once"  # not held up by the deferred one
            assert got == []
            ready.set()
        assert got == ["later"]
        r = await conn.invoke(RemotingCommand.request(2))
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "OSError: deferred failure")


async def test_a_plain_processor_may_answer_later_through_its_connection(
    nursery: trio.Nursery,
) -> None:
    """No task per request: a processor replies LATER and another task gives the answers,
    in any order, through ``conn.answer_later``: they reach the right callers; one never given
    holds only its own caller; an answer given after the peer left goes nowhere."""
    parked: list[tuple[RemotingCommand, Connection]] = []
    parked_changed = trio.Event()

    def park(conn: Connection, req: RemotingCommand) -> object:
        if req.ext_fields.get("now") == "1":  # given before the processor returns
            conn.answer_later(req, req.response(0, remark="resolved before return"))
            return LATER
        parked.append((req, conn))
        parked_changed.set()
        return LATER

    srv = RemotingServer(ProcessorTable({1: park}))  # type: ignore[dict-item]
    host, port = await nursery.start(srv.serve)
    async with open_remoting_client() as client:
        conn = await client.connection(format_address(host, port))
        got: dict[str, str | None] = {}

        async def call(i: int) -> None:
            resp = await conn.invoke(RemotingCommand.request(1, {"i": str(i)}), timeout=10)
            got[str(i)] = resp.remark

        async with trio.open_nursery() as inner:
            for i in range(50):
                inner.start_soon(call, i)
            with trio.fail_after(10):
                while len(parked) < 50:
                    await parked_changed.wait()
                    parked_changed = trio.Event()
            r = await conn.invoke(RemotingCommand.request(1, {"now": "1"}))
            assert r.remark == "resolved before return"
            assert got == {}
            for req, c in reversed(parked):  # answered in reverse order, by this task
                c.answer_later(req, req.response(0, remark=f"done {req.ext_fields['i']}"))
        assert got == {str(i): f"done {i}" for i in range(50)}
        # one never resolved: its caller times out, the connection keeps serving
        with pytest.raises(RemotingTimeoutError):
            await conn.invoke(RemotingCommand.request(1, {"i": "stuck"}), timeout=0.2)
        r = await conn.invoke(RemotingCommand.request(1, {"now": "1"}))
        assert r.remark == "resolved before return"
        req, c = parked[-1]
        await conn.aclose()
        with trio.fail_after(10):
            await c.closed.wait()
    c.answer_later(req, req.response(0, remark="after the peer left"))  # must not raise


async def _read_answers(sock: socket.socket, n: int) -> list[RemotingCommand]:
    """``n`` frames from a non-blocking stdlib socket (10 s at most)."""
    decoder, got = FrameDecoder(), []
    with trio.fail_after(10):
        while len(got) < n:
            await trio.lowlevel.wait_readable(sock)
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            got += decoder.feed(data)
    return got


async def test_a_connection_flooding_frames_does_not_hold_the_loop(nursery: trio.Nursery) -> None:
    """One read holding many frames is served MAX_FRAMES_PER_READ_STEP at a time: a request of
    another connection that arrives while it is served waits for at most two steps of it, not
    for the whole read (a producer's sends in flight against a consumer's offset query)."""
    FLOOD, QUICK, flood_frames = 1, 2, 4 * MAX_FRAMES_PER_READ_STEP
    served: list[str] = []
    quick_sock: list[socket.socket] = []

    def flood(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        if served == ["warm", "warm"]:  # the flood's first frame: the other request comes now
            quick_sock[0].send(encode(RemotingCommand.request(QUICK), 2))
        served.append("flood")
        return req.response(0)

    def quick(conn: Connection, req: RemotingCommand) -> RemotingCommand:
        served.append("quick" if len(served) > 1 else "warm")
        return req.response(0)

    srv = RemotingServer(ProcessorTable({FLOOD: flood, QUICK: quick}), node="test-server")
    host, port = await nursery.start(srv.serve, "127.0.0.1", 0)
    a, b = (socket.create_connection((host, port)) for _ in range(2))
    try:
        quick_sock.append(b)
        for sock in (a, b):  # both connections accepted, their readers parked
            sock.setblocking(False)
            sock.send(encode(RemotingCommand.request(QUICK), 1))
            await _read_answers(sock, 1)
        served[:] = ["warm", "warm"]
        burst = b"".join(encode(RemotingCommand.request(FLOOD), i) for i in range(flood_frames))
        assert len(burst) < 64 * 1024 and a.send(burst) == len(burst)  # one read holds them all
        answers = await _read_answers(a, flood_frames)
        assert [r.opaque for r in answers] == list(range(flood_frames))
        assert [r.opaque for r in await _read_answers(b, 1)] == [2]
    finally:
        a.close()
        b.close()
    floods_before_quick = served.index("quick") - 2
    assert served.count("flood") == flood_frames
    # its reader woke after the flood's first step; the next batch runs both in either order
    assert floods_before_quick <= 2 * MAX_FRAMES_PER_READ_STEP, served
