"""ha.protocol: offset reports and master frames survive any split; garbage -> HAProtocolError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.ha.protocol import (
    FRAME_HEADER_SIZE_BYTES,
    MAX_OFFSET,
    Frame,
    FrameDecoder,
    HAProtocolError,
    OffsetReportDecoder,
    append_frame,
    coalesce,
    encode_frame,
    encode_frame_header,
    encode_heartbeat,
    encode_offset_report,
)

offsets = st.integers(min_value=0, max_value=MAX_OFFSET)
frames_st = st.lists(
    st.tuples(offsets, st.binary(max_size=300)), max_size=20
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def test_offset_report_layout() -> None:
    assert encode_offset_report(0x0102030405060708) == bytes(range(1, 9))
    with pytest.raises(HAProtocolError):
        encode_offset_report(-1)


def test_frame_layout() -> None:
    assert encode_frame(5, b"abc") == (5).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"abc"
    assert encode_heartbeat(7) == (7).to_bytes(8, "big") + bytes(4)
    assert len(encode_heartbeat(7)) == FRAME_HEADER_SIZE_BYTES
    out = bytearray()
    append_frame(out, 5, memoryview(b"abc"))
    assert bytes(out) == encode_frame(5, b"abc")
    with pytest.raises(HAProtocolError):
        encode_frame_header(-1, 0)


@given(st.lists(offsets, min_size=1, max_size=30), st.lists(st.integers(0, 10**6), max_size=12))
def test_offset_reports_any_split_last_wins(values: list[int], cuts: list[int]) -> None:
    data = b"".join(encode_offset_report(v) for v in values)
    dec = OffsetReportDecoder()
    seen: list[int] = []
    for chunk in split(data, cuts):
        got = dec.feed(chunk)
        if got is not None:
            seen.append(got)
    assert seen and seen[-1] == values[-1]
    assert dec.pending_bytes == 0
    assert all(v in values for v in seen)


@given(frames_st, st.lists(st.integers(0, 10**6), max_size=12))
def test_frames_any_split(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    data = b"".join(encode_frame(o, b) for o, b in frames)
    dec = FrameDecoder()
    got: list[Frame] = []
    for chunk in split(data, cuts):
        got.extend(dec.feed(memoryview(chunk)))
    assert [(f.offset, f.body) for f in got] == frames
    assert dec.pending_bytes == 0


@given(st.binary(max_size=200), st.lists(st.integers(0, 10**6), max_size=6))
def test_garbage_only_raises_protocol_error(data: bytes, cuts: list[int]) -> None:
    dec = FrameDecoder(max_body_bytes=64)
    rep = OffsetReportDecoder()
    try:
        for chunk in split(data, cuts):
            dec.feed(chunk)
    except HAProtocolError:
        pass
    try:
        for chunk in split(data, cuts):
            rep.feed(chunk)
    except HAProtocolError:
        pass


def test_malformed_frames() -> None:
    with pytest.raises(HAProtocolError):
        FrameDecoder().feed(encode_frame_header(0, 0)[:8] + (-1).to_bytes(4, "big", signed=True))
    with pytest.raises(HAProtocolError):
        FrameDecoder(max_body_bytes=10).feed(encode_frame_header(0, 11))
    with pytest.raises(HAProtocolError):
        FrameDecoder().feed((-5).to_bytes(8, "big", signed=True) + bytes(4))
    with pytest.raises(HAProtocolError):
        OffsetReportDecoder().feed((-5).to_bytes(8, "big", signed=True))


def test_partial_header_waits() -> None:
    dec = FrameDecoder()
    data = encode_frame(100, b"xyz")
    assert dec.feed(data[:5]) == []
    assert dec.feed(data[5:13]) == []
    assert dec.feed(data[13:]) == [Frame(100, b"xyz")]


@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=50)), max_size=20), offsets)
def test_coalesce_preserves_bytes(parts: list[tuple[bool, bytes]], start: int) -> None:
    # a contiguous stream sliced into frames, with heartbeats sprinkled in
    frames = []
    pos = start % (1 << 40)
    for hb, body in parts:
        if hb:
            frames.append(Frame(pos, b""))
        frames.append(Frame(pos, body))
        pos += len(body)
    merged = coalesce(frames)
    data = [f for f in merged if f.body]
    assert len(data) <= 1
    assert b"".join(f.body for f in data) == b"".join(b for _, b in parts)
    if data:
        assert data[0].offset == min(f.offset for f in frames if f.body)


def test_coalesce_keeps_discontinuity() -> None:
    frames = [Frame(0, b"ab"), Frame(2, b"cd"), Frame(10, b"x"), Frame(11, b"")]
    assert coalesce(frames) == [Frame(0, b"abcd"), Frame(10, b"x")]
