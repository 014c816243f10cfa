"""Sans-IO framing of RocketMQ 4.x classic HA (no trio, no sockets).

Slave -> master: a stream of 8-byte big-endian offsets (the slave's CommitLog max offset). Only
the last complete value matters; a partial value waits for the rest.

Master -> slave: frames of ``[phyOffset i64][bodySize i32][body]`` where ``body`` is raw CommitLog
bytes starting at ``phyOffset`` (at most haTransferBatchSize, never crossing a file). A frame with
``bodySize == 0`` is a heartbeat carrying the master's next transfer position.

Every malformed input raises ``HAProtocolError`` (and only that).
"""

from __future__ import annotations

import struct
from typing import Final

import attrs

OFFSET_REPORT: Final = struct.Struct(">q")
OFFSET_REPORT_SIZE_BYTES: Final = OFFSET_REPORT.size  # 8
FRAME_HEADER: Final = struct.Struct(">qi")
FRAME_HEADER_SIZE_BYTES: Final = FRAME_HEADER.size  # 12
#: RocketMQ's haTransferBatchSize default: the largest body the master sends in one frame.
DEFAULT_TRANSFER_BATCH_BYTES: Final = 32 * 1024
#: Largest frame body a slave accepts (RocketMQ's HAClient read buffer is 4 MiB).
MAX_FRAME_BODY_BYTES: Final = 4 * 1024 * 1024
#: Offsets are signed 64-bit on the wire; negative values are malformed.
MAX_OFFSET: Final = (1 << 63) - 1


class HAProtocolError(ValueError):
    """Bytes that are not a valid HA stream."""


# ----------------------------------------------------------------------------- slave -> master


def encode_offset_report(offset: int) -> bytes:
    if not 0 <= offset <= MAX_OFFSET:
        raise HAProtocolError(f"offset {offset} out of range")
    return OFFSET_REPORT.pack(offset)


class OffsetReportDecoder:
    """Incremental decoder of the slave's offset reports: ``feed`` returns the last complete
    report in everything received so far that was not returned yet (None if none completed)."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    @property
    def pending_bytes(self) -> int:
        return len(self._partial)

    def feed(self, data: bytes | bytearray | memoryview) -> int | None:
        if not data:
            return None
        buf = self._partial + bytes(data) if self._partial else bytes(data)
        whole = len(buf) - len(buf) % OFFSET_REPORT_SIZE_BYTES
        self._partial = buf[whole:]
        if whole == 0:
            return None
        (offset,) = OFFSET_REPORT.unpack_from(buf, whole - OFFSET_REPORT_SIZE_BYTES)
        if offset < 0:
            raise HAProtocolError(f"negative offset report {offset}")
        return int(offset)


# ----------------------------------------------------------------------------- master -> slave


@attrs.frozen
class Frame:
    offset: int
    body: bytes

    @property
    def is_heartbeat(self) -> bool:
        return not self.body

    @property
    def end(self) -> int:
        return self.offset + len(self.body)


def encode_frame_header(offset: int, size: int) -> bytes:
    if not 0 <= offset <= MAX_OFFSET:
        raise HAProtocolError(f"offset {offset} out of range")
    if not 0 <= size <= MAX_FRAME_BODY_BYTES:
        raise HAProtocolError(f"frame body of {size} bytes out of range")
    return FRAME_HEADER.pack(offset, size)


def encode_frame(offset: int, body: bytes | memoryview) -> bytes:
    return encode_frame_header(offset, len(body)) + bytes(body)


def encode_heartbeat(offset: int) -> bytes:
    return encode_frame_header(offset, 0)


def append_frame(out: bytearray, offset: int, body: bytes | memoryview) -> None:
    """Append one frame to an outgoing buffer (one copy of the body)."""
    out += encode_frame_header(offset, len(body))
    out += body


class FrameDecoder:
    """Incremental decoder of master frames; survives any split of the stream."""

    __slots__ = ("_buf", "max_body_bytes")

    def __init__(self, max_body_bytes: int = MAX_FRAME_BODY_BYTES) -> None:
        self._buf = bytearray()
        self.max_body_bytes = max_body_bytes

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        n = len(buf)
        header = FRAME_HEADER
        hsize = FRAME_HEADER_SIZE_BYTES
        while n - pos >= hsize:
            offset, size = header.unpack_from(buf, pos)
            if offset < 0:
                del buf[:pos]
                raise HAProtocolError(f"negative frame offset {offset}")
            if size < 0 or size > self.max_body_bytes:
                del buf[:pos]
                raise HAProtocolError(f"frame body size {size} out of range")
            if n - pos - hsize < size:
                break
            start = pos + hsize
            frames.append(Frame(offset, bytes(buf[start : start + size])))
            pos = start + size
        if pos:
            del buf[:pos]
        return frames


def coalesce(frames: list[Frame]) -> list[Frame]:
    """Merge data frames that continue each other (one ``append_raw`` per run); a heartbeat at
    the end of a run adds nothing and is absorbed into it."""
    out: list[Frame] = []
    run: list[bytes] = []
    run_start = -1
    run_end = -1
    for f in frames:
        if run and f.offset == run_end:
            if f.body:
                run.append(f.body)
                run_end += len(f.body)
            continue
        if run:
            out.append(Frame(run_start, b"".join(run)))
            run = []
        if f.body:
            run = [f.body]
            run_start = f.offset
            run_end = f.end
        else:
            out.append(f)
    if run:
        out.append(Frame(run_start, b"".join(run)))
    return out
