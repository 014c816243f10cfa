"""Hostile input on mqproxy's gRPC port, against a live proxy process, in plain text and over
TLS: garbage instead of HTTP/2, frames over the frame limit, a header block over the header
limit, gRPC messages declared over the message limit, bad protobuf, unknown methods, streams
that never end, seeded random frames, and a connection that tries to make the proxy buffer more
than its input budget; over TLS also garbage before and inside the handshake, a handshake that
stalls (closed at the handshake deadline), and a client that does not offer ALPN h2. After each
the node still answers a Heartbeat with Code OK, and its memory stays within what its named
limits allow."""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import struct
import time
from pathlib import Path

import h2.errors
import h2.events
import pytest

from rmq_cluster.proxy.config import ProxyConfig
from rmq_cluster.proxy.grpc_wire import PREFIX, GrpcStatus
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import IO_TIMEOUT_S, LiveProxy, client_context, live_proxy

LIMITS = ProxyConfig()
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: RSS growth allowed over the whole run: one connection's input budget, twice, plus slack
RSS_GROWTH_BOUND = 2 * LIMITS.max_connection_input_bytes + 32 * 1024 * 1024
RANDOM_ROUNDS = 60
#: the proxy's TLS handshake deadline in these tests (``--handshake-timeout``)
HANDSHAKE_S = 1.0


def _heartbeat_ok(proxy: LiveProxy) -> None:
    assert proxy.alive
    client = proxy.client()
    try:
        req = spb.HeartbeatRequest(client_type=pb.PRODUCER).SerializeToString()
        [answer], trailers = client.call("Heartbeat", req)
        assert trailers["grpc-status"] == "0"
        assert spb.HeartbeatResponse.FromString(answer).status.code == pb.OK
    finally:
        client.close()


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(IO_TIMEOUT_S)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    return True


def _frame(kind: int, flags: int, sid: int, payload: bytes, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_the_grpc_port_survives_hostile_input(tmp_path: Path, tls: bool) -> None:
    with live_proxy(tmp_path, tls=tls,
                    extra=["--handshake-timeout", str(HANDSHAKE_S)]) as proxy:
        _heartbeat_ok(proxy)
        base_rss = proxy.rss()
        if tls:
            _tls_handshake_attacks(proxy)
            _heartbeat_ok(proxy)

        # not HTTP/2 at all
        with proxy.connect() as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)) * 64)
            assert _closed_by_peer(s)

        # a DATA frame over the frame limit (16 MiB declared, a little sent)
        with proxy.connect() as s:
            s.sendall(PREFACE + _frame(4, 0, 0, b"")
                      + _frame(0, 0, 1, b"x" * 1024, length=(1 << 24) - 1))
            assert _closed_by_peer(s)

        # a header block over the header list limit: HEADERS + CONTINUATIONs of 16 KiB each,
        # never ending it (h2 alone would hold 64 of them)
        with proxy.connect() as s:
            block = _frame(1, 0, 1, b"\x00" * LIMITS.max_frame_bytes)
            block += _frame(9, 0, 1, b"\x00" * LIMITS.max_frame_bytes)
            with contextlib.suppress(OSError):  # closed while still sending: as wanted
                s.sendall(PREFACE + _frame(4, 0, 0, b"") + block)
            assert _closed_by_peer(s)

        client = proxy.client()
        try:
            # bad protobuf, then a gRPC message declared over the limit, then an unknown method
            _, trailers = client.call("SendMessage", b"\xff\xff\xff\xff\x0f garbage")
            assert trailers["grpc-status"] == str(int(GrpcStatus.INVALID_ARGUMENT))
            over = PREFIX.pack(0, LIMITS.max_grpc_message_bytes + 1) + b"x" * 100
            _, trailers = client.call("SendMessage", b"", raw=over)
            assert trailers["grpc-status"] == str(int(GrpcStatus.RESOURCE_EXHAUSTED))
            _, trailers = client.call("NoSuchMethod", b"")
            assert trailers["grpc-status"] == str(int(GrpcStatus.UNIMPLEMENTED))
            _, trailers = client.call("SendMessage", b"", raw=PREFIX.pack(1, 3) + b"abc")
            assert trailers["grpc-status"] == str(int(GrpcStatus.UNIMPLEMENTED))  # compressed
            # a valid request refused with a v2 Code: an empty message body
            msg = pb.Message(topic=pb.Resource(name="T"), body=b"")
            msg.system_properties.message_id = "01"
            [answer], _ = client.call("SendMessage",
                                      spb.SendMessageRequest(messages=[msg]).SerializeToString())
            assert spb.SendMessageResponse.FromString(answer).status.code == pb.MESSAGE_BODY_EMPTY
        finally:
            client.close()
        _heartbeat_ok(proxy)

        _new_rpcs(proxy)
        _heartbeat_ok(proxy)
        if not tls:  # the budgets are counted above the transport: once is enough
            _flood_until_refused(proxy)
            _one_address_cannot_fill_the_port(proxy)
        _random_frames(proxy)
        _heartbeat_ok(proxy)
        assert proxy.rss() - base_rss < RSS_GROWTH_BOUND, (base_rss, proxy.rss())


def _client_hello(alpn: list[str]) -> bytes:
    """The first flight of a real TLS client (a ClientHello offering ``alpn``)."""
    ctx = ssl.create_default_context()
    ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


def _tls_handshake_attacks(proxy: LiveProxy) -> None:
    hello = _client_hello(["h2"])
    rng = random.Random(3434)
    # garbage where the ClientHello belongs; half a ClientHello, then garbage
    for first in (b"\x16\x03\x01\xff\xff" + rng.randbytes(4096),
                  hello[: len(hello) // 2] + rng.randbytes(4096)):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as s:
            s.sendall(first)
            assert _closed_by_peer(s)
    # a whole ClientHello, the server's answer read, then garbage instead of the Finished
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as s:
        s.sendall(hello)
        assert s.recv(65536)
        s.sendall(b"\x17\x03\x03\x00\x40" + rng.randbytes(64) + rng.randbytes(2048))
        assert _closed_by_peer(s)
    # stalled handshakes, silent and after half a ClientHello: closed at the deadline
    for first in (b"", hello[:20]):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as s:
            started = time.monotonic()
            s.sendall(first)
            assert _closed_by_peer(s)
            assert time.monotonic() - started < HANDSHAKE_S + 3.0
    # a TLS client that offers no h2: the handshake may finish, the connection is closed
    assert proxy.cert is not None
    ctx = client_context(proxy.cert)
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(PREFACE + _frame(4, 0, 0, b""))
                assert _closed_by_peer(s)
        except (ssl.SSLError, ConnectionResetError):
            pass  # refused inside the handshake: as good


#: the RPCs of transactions, assignment and dead letters, with a request each that is valid
#: protobuf but hostile, and the v2 Code it must be answered with
HOSTILE: dict[str, tuple[bytes, int]] = {
    "EndTransaction": (spb.EndTransactionRequest(
        topic=pb.Resource(name="T"), transaction_id="TX1:99999999999999999999:0:b",
        resolution=pb.COMMIT).SerializeToString(), pb.INVALID_TRANSACTION_ID),
    "ForwardMessageToDeadLetterQueue": (spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="G"), topic=pb.Resource(name="T"),
        receipt_handle="1 2 3 4 0 ../b 0 0 x").SerializeToString(), pb.INVALID_RECEIPT_HANDLE),
    "QueryAssignment": (spb.QueryAssignmentRequest(
        group=pb.Resource(name="G/../x"), topic=pb.Resource(name="T")).SerializeToString(),
        pb.BAD_REQUEST),
    "RecallMessage": (spb.RecallMessageRequest(
        topic=pb.Resource(name="T"), recall_handle="\x00" * 100).SerializeToString(),
        pb.NOT_IMPLEMENTED),
    "NotifyClientTermination": (spb.NotifyClientTerminationRequest().SerializeToString(),
                                pb.OK),
}


def _new_rpcs(proxy: LiveProxy) -> None:
    """Garbage protobuf in each new RPC (INVALID_ARGUMENT), a hostile request that decodes
    (its v2 Code), and a producer's Settings naming more topics than a producer may announce
    (the Telemetry stream refused, INVALID_ARGUMENT)."""
    client = proxy.client()
    try:
        for method, (request, code) in HOSTILE.items():
            _, trailers = client.call(method, b"\xff\xff\xff\xff\x0f garbage")
            assert trailers["grpc-status"] == str(int(GrpcStatus.INVALID_ARGUMENT)), method
            [answer], trailers = client.call(method, request)
            assert trailers["grpc-status"] == "0", (method, trailers)
            status = getattr(spb, f"{method}Response").FromString(answer).status
            assert status.code == code, (method, status)
        settings = pb.Settings(client_type=pb.PRODUCER)
        settings.publishing.topics.extend(pb.Resource(name=f"T{i}") for i in range(5000))
        _, trailers = client.call(
            "Telemetry", spb.TelemetryCommand(settings=settings).SerializeToString(),
            headers=(("x-mq-client-id", "fuzz"),))
        assert trailers["grpc-status"] == str(int(GrpcStatus.INVALID_ARGUMENT)), trailers
    finally:
        client.close()


def _flood_until_refused(proxy: LiveProxy) -> None:
    """Streams that each declare the largest message and never finish it, fed as fast as
    flow control lets them: the proxy closes the connection (GOAWAY ENHANCE_YOUR_CALM) once
    it holds its input budget, not later."""
    client = proxy.client()
    chunk = b"y" * 1000
    sent = 0
    goaway = None
    try:
        sids = [client.start_call("SendMessage") for _ in range(8)]
        for sid in sids:
            client.conn.send_data(sid, PREFIX.pack(0, LIMITS.max_grpc_message_bytes))
        while goaway is None and sent < 4 * LIMITS.max_connection_input_bytes:
            progress = True
            while progress:  # round robin: every stream grows, none completes first
                progress = False
                for sid in sids:
                    if client.conn.local_flow_control_window(sid) >= len(chunk):
                        client.conn.send_data(sid, chunk)
                        sent += len(chunk)
                        progress = True
            try:
                client.flush()
                data = client.sock.recv(65536)
            except OSError:  # reset, broken pipe, TLS closed
                break
            if not data:
                break
            for ev in client.conn.receive_data(data):
                if isinstance(ev, h2.events.ConnectionTerminated):
                    goaway = ev.error_code
    finally:
        client.close()
    assert goaway == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, (goaway, sent)
    assert sent <= LIMITS.max_connection_input_bytes + 2 * 1024 * 1024


def _one_address_cannot_fill_the_port(proxy: LiveProxy) -> None:
    """``max_connections_per_address`` connections from 127.0.0.1 are served (each gets the
    proxy's SETTINGS); the next is closed unserved; once they go, a new one is served."""
    held = [socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S)
            for _ in range(LIMITS.max_connections_per_address)]
    try:
        assert all(s.recv(9) for s in held)  # the server's SETTINGS frame header
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as s, \
                contextlib.suppress(ConnectionResetError):
            assert s.recv(9) == b""
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + IO_TIMEOUT_S
    while time.monotonic() < deadline:  # the proxy notices the closes a moment later
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=IO_TIMEOUT_S) as s, \
                contextlib.suppress(ConnectionResetError):
            if s.recv(9):
                return
    raise AssertionError("no connection served after the others closed")


def _random_frames(proxy: LiveProxy) -> None:
    """Seeded random frames (any type, flags, stream, length field) after a valid preface."""
    rng = random.Random(34)
    for _ in range(RANDOM_ROUNDS):
        with proxy.connect() as s:
            out = PREFACE + _frame(4, 0, 0, b"")
            for _ in range(rng.randint(1, 6)):
                payload = rng.randbytes(rng.randint(0, 64))
                length = rng.choice([len(payload), rng.randint(0, 1 << 24 - 1)])
                out += _frame(rng.randint(0, 10), rng.randint(0, 255),
                              rng.choice([0, 1, 3, rng.randint(0, 1 << 31 - 1)]), payload, length)
            try:
                s.sendall(out)
                s.shutdown(socket.SHUT_WR)
                assert _closed_by_peer(s)
            except OSError:  # reset, broken pipe, TLS closed
                pass
        assert proxy.alive
