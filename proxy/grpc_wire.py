"""gRPC's framing over HTTP/2, sans-IO: length-prefixed messages, request paths, status
trailers. Pure (no Trio): the connection in ``h2_server`` feeds it bytes."""

from __future__ import annotations

import enum
import struct
from typing import Final
from urllib.parse import quote

#: one gRPC message: compressed flag (1 byte) + big-endian length (4 bytes) + payload
PREFIX: Final = struct.Struct(">BI")
SERVICE_PREFIX: Final = "/apache.rocketmq.v2.MessagingService/"


class GrpcStatus(enum.IntEnum):
    """gRPC's own status codes (transport level; RocketMQ's ``Code`` rides in the response)."""

    OK = 0
    CANCELLED = 1
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    RESOURCE_EXHAUSTED = 8
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14


class GrpcWireError(Exception):
    def __init__(self, status: GrpcStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class MessageReader:
    """Reassembles gRPC messages from a stream's DATA; refuses compressed ones (the proxy
    announces no grpc-encoding) and any longer than ``limit`` before buffering it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while len(self._buf) >= PREFIX.size:
            flag, length = PREFIX.unpack_from(self._buf)
            if flag not in (0, 1):
                raise GrpcWireError(GrpcStatus.INTERNAL, f"bad message flag {flag}")
            if flag == 1:
                raise GrpcWireError(GrpcStatus.UNIMPLEMENTED, "compressed messages unsupported")
            if length > self._limit:
                raise GrpcWireError(
                    GrpcStatus.RESOURCE_EXHAUSTED,
                    f"message of {length} bytes over the limit of {self._limit}",
                )
            end = PREFIX.size + length
            if len(self._buf) < end:
                break
            out.append(bytes(self._buf[PREFIX.size:end]))
            del self._buf[:end]
        return out


def frame(payload: bytes) -> bytes:
    return PREFIX.pack(0, len(payload)) + payload


def method_of(path: str) -> str | None:
    """``/apache.rocketmq.v2.MessagingService/SendMessage`` -> ``SendMessage``."""
    if not path.startswith(SERVICE_PREFIX):
        return None
    name = path[len(SERVICE_PREFIX):]
    return name if name.isidentifier() else None


#: the header a client's deadline rides in: ``grpc-timeout: <1 to 8 digits><unit>``
TIMEOUT_HEADER: Final = "grpc-timeout"
#: gRPC's timeout units, in seconds (hours down to nanoseconds)
_TIMEOUT_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_TIMEOUT_MAX_DIGITS: Final = 8


def parse_timeout(value: str) -> float:
    """A ``grpc-timeout`` header's value in seconds (``"4S"`` → 4.0, ``"2500m"`` → 2.5);
    GrpcWireError for anything gRPC's grammar does not allow (at most 8 digits, one unit)."""
    digits, unit = value[:-1], value[-1:]
    if not (0 < len(digits) <= _TIMEOUT_MAX_DIGITS and digits.isascii() and digits.isdigit()
            and unit in _TIMEOUT_UNITS):
        raise GrpcWireError(GrpcStatus.INVALID_ARGUMENT, f"bad grpc-timeout {value[:32]!r}")
    return int(digits) * _TIMEOUT_UNITS[unit]


def is_grpc_request(headers: dict[str, str]) -> bool:
    content_type = headers.get("content-type", "")
    return headers.get(":method") == "POST" and content_type.startswith("application/grpc")


RESPONSE_HEADERS: Final = ((":status", "200"), ("content-type", "application/grpc"))


def trailers(status: GrpcStatus, message: str = "") -> list[tuple[str, str]]:
    out = [("grpc-status", str(int(status)))]
    if message:
        out.append(("grpc-message", quote(message[:512], safe=" !#$&'()*+,/:;=?@[]~")))
    return out


#: HTTP/2's client connection preface, then every frame starts with a 9-byte header
H2_PREFACE_LEN: Final = 24
H2_FRAME_HEADER_LEN: Final = 9


#: frame types that carry a header block, and the flag that ends one
_HEADERS: Final = 0x1
_PUSH_PROMISE: Final = 0x5
_CONTINUATION: Final = 0x9
_END_HEADERS: Final = 0x4


class FrameLengthGuard:
    """Follows the frame boundaries of a client's HTTP/2 byte stream and says when a frame
    header declares more than ``limit`` bytes, or a header block (HEADERS and its
    CONTINUATIONs) would exceed ``header_limit`` bytes. h2 (4.4) checks a frame's length only
    once the whole frame is buffered, and buffers up to 64 CONTINUATION frames of a header
    block before decoding it: without this a peer could make it hold 16 MiB (or 64 frames)
    per connection."""

    def __init__(self, limit: int, header_limit: int | None = None) -> None:
        self._limit = limit
        self._header_limit = limit if header_limit is None else header_limit
        self._preface_left = H2_PREFACE_LEN
        self._skip = 0
        self._header = bytearray()
        #: bytes of the header block under way (None: no block open)
        self._block: int | None = None
        self.reason = ""

    @property
    def preface_done(self) -> bool:
        """The client's 24-byte connection preface has come in full."""
        return not self._preface_left

    @property
    def partial(self) -> bool:
        """A frame, or a header block (HEADERS awaiting its CONTINUATIONs), is under way: the
        bytes so far end inside it."""
        return bool(self._header or self._skip or self._block is not None)

    def check(self, data: bytes | bytearray) -> bool:
        """Feed the next bytes; False once a frame (or header block) over its limit has been
        announced (``reason`` says which)."""
        view = memoryview(data)
        if self._preface_left:
            n = min(self._preface_left, len(view))
            self._preface_left -= n
            view = view[n:]
        while view:
            if self._skip:
                n = min(self._skip, len(view))
                self._skip -= n
                view = view[n:]
                continue
            n = min(H2_FRAME_HEADER_LEN - len(self._header), len(view))
            self._header += view[:n]
            view = view[n:]
            if len(self._header) == H2_FRAME_HEADER_LEN:
                if not self._frame(bytes(self._header)):
                    return False
                self._header.clear()
        return True

    def _frame(self, header: bytes) -> bool:
        length, kind, flags = int.from_bytes(header[:3], "big"), header[3], header[4]
        if length > self._limit:
            self.reason = f"frame of {length} bytes"
            return False
        if kind in (_HEADERS, _PUSH_PROMISE, _CONTINUATION):
            self._block = (self._block or 0) + length if kind == _CONTINUATION else length
            if self._block > self._header_limit:
                self.reason = f"header block of over {self._header_limit} bytes"
                return False
            if flags & _END_HEADERS:
                self._block = None
        self._skip = length
        return True
