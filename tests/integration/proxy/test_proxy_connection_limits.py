"""The gRPC port's connection timeouts and fair shares, as the remoting port has them, against
a live ``mqproxy`` (plain text: both are counted above the transport):

* ``idle_timeout_s``: a connection with no call open and none started for that long is closed
  (GOAWAY NO_ERROR); calls now and then, or an open Telemetry stream, keep one open;
* ``partial_frame_timeout_s``: half a frame header, a frame cut short (also one dripped a byte
  at a time), a header block left without its end, a gRPC message cut short and a unary call
  never ended each close their connection once that long has passed since they started;
* ``max_connections``: once full, a newcomer from an address holding at least two fewer than
  the address holding the most takes the place of that address's connection idle longest;
  one from the address holding the most is closed at once."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.proxy.grpc_wire import PREFIX, frame
from rmq_cluster.proxy.pb import definition_pb2 as pb
from rmq_cluster.proxy.pb import service_pb2 as spb

from .proxy_testlib import IO_TIMEOUT_S, H2Client, LiveProxy, live_proxy

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_ACK = b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
#: the timeouts of the proxy under test (``--idle-timeout``, ``--partial-frame-timeout``)
TIMEOUT_S = 1.0
#: how late a close may come (the proxy's loop on a loaded machine)
SLACK_S = 3.0


def _frame(kind: int, flags: int, sid: int, payload: bytes, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def _closed(sock: socket.socket, deadline: float) -> bool:
    """Read until the proxy closes ``sock`` (True) or ``deadline`` passes (False)."""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def _heartbeat(client: H2Client) -> None:
    req = spb.HeartbeatRequest(client_type=pb.SIMPLE_CONSUMER).SerializeToString()
    [answer], trailers = client.call("Heartbeat", req)
    assert trailers["grpc-status"] == "0"
    assert spb.HeartbeatResponse.FromString(answer).status.code == pb.OK


def _raw(proxy: LiveProxy, data: bytes) -> socket.socket:
    sock = proxy.connect()
    sock.sendall(data)
    return sock


def _slow_starters(proxy: LiveProxy) -> dict[str, socket.socket]:
    """One connection per way of starting something and not finishing it (and one idle)."""
    start = PREFACE + SETTINGS
    conns = {
        "idle": _raw(proxy, start),
        "half a frame header": _raw(proxy, start + b"\x00\x00\x08"),
        "a frame cut short": _raw(proxy, start + _frame(6, 0, 0, b"1234", length=8)),
        "a header block without its end": _raw(proxy, start + _frame(1, 0, 1, b"\x82")),
    }
    message = proxy.client()
    sid = message.start_call("SendMessage")
    message.conn.send_data(sid, PREFIX.pack(0, 1000) + b"x" * 10)
    message.flush()
    conns["a gRPC message cut short"] = message.sock
    unended = proxy.client()
    sid = unended.start_call("Heartbeat")
    unended.conn.send_data(sid, frame(spb.HeartbeatRequest().SerializeToString()))
    unended.flush()
    conns["a unary call never ended"] = unended.sock
    return conns


@contextlib.contextmanager
def _proxy(tmp_path: Path, *extra: str) -> Iterator[LiveProxy]:
    with live_proxy(tmp_path, extra=list(extra)) as proxy:
        yield proxy


def test_idle_and_slow_connections_are_closed_at_their_timeouts(tmp_path: Path) -> None:
    with _proxy(tmp_path, "--idle-timeout", str(TIMEOUT_S),
                "--partial-frame-timeout", str(TIMEOUT_S)) as proxy:
        started = time.monotonic()
        slow = _slow_starters(proxy)
        drip = _raw(proxy, PREFACE + SETTINGS + _frame(0, 0, 1, b"", length=16000))
        busy = proxy.client()
        telemetry = proxy.client()
        telemetry.start_call("Telemetry")  # a bidi stream held open, nothing sent on it
        telemetry.flush()
        try:
            deadline = started + TIMEOUT_S + SLACK_S
            dripped_closed = False
            while time.monotonic() < deadline and not dripped_closed:
                _heartbeat(busy)  # a call every 0.2 s: never idle
                with contextlib.suppress(OSError):
                    drip.sendall(b"d")
                dripped_closed = _closed(drip, time.monotonic() + 0.2)
            assert dripped_closed, "a frame dripped a byte at a time was not closed"
            for what, sock in slow.items():
                assert _closed(sock, deadline), f"{what}: still open"
            while time.monotonic() < started + 2 * TIMEOUT_S + 0.5:  # past the idle timeout
                _heartbeat(busy)
                time.sleep(0.2)  # the gap between calls, shorter than the idle timeout
            _heartbeat(busy)
            _heartbeat(telemetry)  # its open stream kept it
        finally:
            for sock in slow.values():
                sock.close()
            drip.close()
            busy.close()
            telemetry.close()


def _from(proxy: LiveProxy, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(IO_TIMEOUT_S)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", proxy.port))
    return sock


def _served(sock: socket.socket) -> bool:
    """The proxy sent its SETTINGS (a frame header): the connection was admitted."""
    with contextlib.suppress(ConnectionResetError):
        return len(sock.recv(9)) == 9
    return False


def _settings_acked(sock: socket.socket) -> bool:
    seen = b""
    while SETTINGS_ACK not in seen:
        data = sock.recv(65536)
        if not data:
            return False
        seen += data
    return True


@pytest.mark.parametrize("limit", [4])
def test_at_the_connection_limit_a_newcomer_takes_the_place_of_the_idlest_of_the_heaviest(
    tmp_path: Path, limit: int
) -> None:
    with _proxy(tmp_path, "--max-connections", str(limit),
                "--max-connections-per-address", str(limit)) as proxy:
        held = [_from(proxy, "127.0.0.1") for _ in range(limit)]
        others: list[socket.socket] = []
        try:
            assert all(_served(s) for s in held)
            for s in held[1:]:  # all but the first have just been read from
                s.sendall(PREFACE + SETTINGS)
                assert _settings_acked(s)  # the proxy has read it
            others.append(_from(proxy, "127.0.0.2"))
            assert _served(others[-1])
            deadline = time.monotonic() + IO_TIMEOUT_S
            assert _closed(held[0], deadline), "the idlest of 127.0.0.1 was not closed"
            # 127.0.0.1 holds 3 and 127.0.0.2 one: the heaviest address gets no more
            with _from(proxy, "127.0.0.1") as refused:
                assert _closed(refused, deadline) and not _served(refused)
            others.append(_from(proxy, "127.0.0.2"))
            assert _served(others[-1])
            assert sum(_closed(s, time.monotonic() + 1.0) for s in held[1:]) == 1
        finally:
            for s in held + others:
                s.close()
