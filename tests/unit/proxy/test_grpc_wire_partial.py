"""``FrameLengthGuard`` says when the bytes so far end inside the preface, a frame or a header
block (the gRPC port's partial-frame timeout runs while they do)."""

from __future__ import annotations

import struct

from rmq_cluster.proxy.grpc_wire import FrameLengthGuard

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(kind: int, flags: int, payload: bytes, length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack(">I", n)[1:] + bytes([kind, flags]) + struct.pack(">I", 1) + payload


def test_partial_follows_frames_header_blocks_and_the_preface() -> None:
    guard = FrameLengthGuard(16384)
    assert guard.check(PREFACE[:10]) and not guard.preface_done
    assert guard.check(PREFACE[10:]) and guard.preface_done and not guard.partial
    ping = _frame(6, 0, b"12345678")
    assert guard.check(ping[:4]) and guard.partial  # half a frame header
    assert guard.check(ping[4:12]) and guard.partial  # the payload cut short
    assert guard.check(ping[12:]) and not guard.partial
    assert guard.check(_frame(1, 0, b"\x82")) and guard.partial  # HEADERS, no END_HEADERS
    assert guard.check(_frame(9, 4, b"\x84")) and not guard.partial  # CONTINUATION ends it
