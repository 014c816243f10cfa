"""What ``FrameDecoder`` allocates for a frame: small frames in one small buffer, a big one in a
mapping of exactly its size from its second read on, nothing once decoded or released."""

from __future__ import annotations

import mmap
import os

from rmq_cluster.cluster.remoting.codec import (
    BIG_FRAME_BYTES,
    FrameDecoder,
    RemotingCommand,
    encode_into,
)
from rmq_cluster.cluster.remoting.input_budget import GRANT_SLACK_BYTES, frame_grant

CHUNK = 64 * 1024
MIB = 1024 * 1024


def _frame(body: bytes, code: int = 7) -> bytes:
    out = bytearray()
    encode_into(out, RemotingCommand.request(code, body=body), 1)
    return bytes(out)


def _pages(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def test_a_big_frame_fills_one_exact_mapping_and_gives_it_back() -> None:
    body = os.urandom(3 * MIB)
    frame = _frame(body)
    dec = FrameDecoder()
    assert dec.feed(frame[:CHUNK]) == []  # the read with the length word stays small
    assert dec.buffered == CHUNK and dec.allocated < 2 * CHUNK + 64
    assert dec.feed(frame[CHUNK : 2 * CHUNK]) == []  # the next read: one mapping, exact size
    assert dec.buffered == 2 * CHUNK
    assert dec.allocated == _pages(len(frame) - 4) + bytearray().__alloc__()
    allocated = dec.allocated
    at = 2 * CHUNK
    while len(frame) - at > CHUNK:  # never grown while it fills
        assert dec.feed(frame[at : at + CHUNK]) == []
        assert dec.allocated == allocated
        at += CHUNK
    (cmd, nxt) = dec.feed(frame[at:] + _frame(b"next"))  # the end, and a whole frame after it
    assert cmd.body == body and nxt.body == b"next"
    assert dec.buffered == 0 and dec.allocated < 1024
    assert frame_grant(len(frame)) >= allocated + 2 * CHUNK + 64
    assert frame_grant(len(frame)) <= _pages(len(frame)) + GRANT_SLACK_BYTES


def test_a_frame_that_completes_in_its_second_read_and_any_split_decode_alike() -> None:
    frames = [_frame(os.urandom(n), code=i) for i, n in enumerate((10, BIG_FRAME_BYTES, 200_000))]
    data = b"".join(frames)
    for step in (1, 3, 4096, CHUNK - 1, CHUNK, 150_000, len(data)):
        dec = FrameDecoder()
        got = [c for at in range(0, len(data), step) for c in dec.feed(data[at : at + step])]
        assert [c.code for c in got] == [0, 1, 2]
        assert dec.buffered == 0


def test_release_drops_a_partial_big_frame() -> None:
    frame = _frame(bytes(2 * MIB))
    dec = FrameDecoder()
    dec.feed(frame[:CHUNK])
    dec.feed(frame[CHUNK : 5 * CHUNK])
    assert dec.allocated > 2 * MIB
    dec.release()
    assert dec.buffered == 0 and dec.allocated < 1024
