"""A blocking remoting channel for Spark tasks: one TCP connection, one call at a time.

The RocketMQ source and sink run inside Spark's Python workers, which import only what the job
archive ships (``package.py``: this package, the record layout, ``attrs``; no orjson, no Trio).
So this module speaks the remoting frame (RocketMQ's JSON header variant) with the standard
library: ``int32 length | int32 serialize<<24 | headerLen | JSON header | body``.  Every size a
peer sends is bounded (``MAX_FRAME_BYTES``, ``MAX_HEADER_BYTES``) and every call has one
deadline for the whole answer, not one per ``recv``: a peer that drips bytes cannot hold a task.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any, Final

import attrs

#: RocketMQ's largest frame (its ``frameMaxLength`` default), length word included.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
#: A response header larger than this is refused (ours and Apache's are < 1 KiB).
MAX_HEADER_BYTES: Final = 64 * 1024
#: Per call: connect, send, and the whole answer.
CALL_TIMEOUT_S: Final = 10.0
#: ``MQVersion`` V4_9_7: a NameServer answers routes in standard (quoted-key) JSON from V4_9_4.
CLIENT_VERSION: Final = 407
LANGUAGE: Final = "PYTHON"
_RECV_BYTES: Final = 256 * 1024
_PREFIX = struct.Struct(">II")
_FLAG_RESPONSE: Final = 0x1
_SERIALIZE_JSON: Final = 0


class WireError(Exception):
    """The peer could not be reached, answered late, or sent a frame this channel refuses."""


@attrs.frozen(slots=True)
class Reply:
    code: int
    remark: str | None
    ext: Mapping[str, str]
    body: bytes


def encode_request(code: int, ext: Mapping[str, Any], body: bytes, opaque: int) -> bytes:
    """One request frame with a JSON header (extFields values as strings, nulls dropped)."""
    fields = {k: _ext_str(v) for k, v in ext.items() if v is not None}
    header = json.dumps(
        {"code": code, "extFields": fields, "flag": 0, "language": LANGUAGE, "opaque": opaque,
         "serializeTypeCurrentRPC": "JSON", "version": CLIENT_VERSION},
        separators=(",", ":"), sort_keys=True,
    ).encode()  # fmt: skip
    return _PREFIX.pack(4 + len(header) + len(body), len(header)) + header + body


def _ext_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decode_reply(frame: bytes | memoryview) -> tuple[int, Reply]:
    """(opaque, Reply) of one frame without its length word; WireError if it is not a JSON
    response frame this channel accepts."""
    mv = memoryview(frame)
    if len(mv) < 4:
        raise WireError("frame without a header word")
    (word,) = struct.unpack_from(">I", mv, 0)
    stype, header_len = word >> 24, word & 0xFFFFFF
    if stype != _SERIALIZE_JSON:
        raise WireError(f"serialize type {stype} answered to a JSON request")
    if header_len > MAX_HEADER_BYTES or header_len > len(mv) - 4:
        raise WireError(f"header length {header_len} out of bounds")
    try:
        header = json.loads(bytes(mv[4 : 4 + header_len]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    code, opaque, flag = header.get("code"), header.get("opaque"), header.get("flag", 0)
    ext = header.get("extFields") or {}
    remark = header.get("remark")
    if not (isinstance(code, int) and isinstance(opaque, int) and isinstance(flag, int)
            and isinstance(ext, dict) and (remark is None or isinstance(remark, str))):  # fmt: skip
        raise WireError("header fields of the wrong type")
    if not flag & _FLAG_RESPONSE:
        raise WireError(f"a request (code {code}) where a response was expected")
    fields = {str(k): _ext_str(v) for k, v in ext.items() if v is not None}
    return opaque, Reply(code, remark, fields, bytes(mv[4 + header_len :]))


class Channel:
    """One connection to ``host:port``; ``call`` sends a request and waits for its answer.

    Not thread-safe (a Spark task owns its channels).  Any failure closes the connection; the
    next call reconnects."""

    def __init__(self, addr: str, timeout_s: float = CALL_TIMEOUT_S) -> None:
        host, sep, port = addr.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise WireError(f"not a host:port address: {addr!r}")
        self.addr = addr
        self._target = (host, int(port))
        self._timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._opaque = 0
        self._buf = bytearray()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf.clear()

    def call(self, code: int, ext: Mapping[str, Any], body: bytes = b"",
             timeout_s: float | None = None) -> Reply:
        deadline = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        try:
            return self._call(code, ext, body, deadline)
        except TimeoutError:
            self.close()
            raise WireError(f"{self.addr}: no answer before the deadline") from None
        except (OSError, WireError) as exc:
            self.close()
            if isinstance(exc, WireError):
                raise WireError(f"{self.addr}: {exc}") from None
            raise WireError(f"{self.addr}: {exc!r}") from None

    def _call(self, code: int, ext: Mapping[str, Any], body: bytes, deadline: float) -> Reply:
        if self._sock is None:
            self._sock = socket.create_connection(self._target, timeout=_left(deadline))
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        self._sock.settimeout(_left(deadline))
        self._sock.sendall(encode_request(code, ext, body, self._opaque))
        while True:
            opaque, reply = decode_reply(self._read_frame(deadline))
            if opaque == self._opaque:
                return reply  # an answer to an earlier, timed-out call is dropped

    def _read_frame(self, deadline: float) -> bytes:
        while True:
            buf = self._buf
            if len(buf) >= 4:
                (length,) = struct.unpack_from(">I", buf, 0)
                if length < 4 or length + 4 > MAX_FRAME_BYTES:
                    raise WireError(f"frame length {length} out of bounds")
                if len(buf) >= 4 + length:
                    frame = bytes(buf[4 : 4 + length])
                    del buf[: 4 + length]
                    return frame
            sock = self._sock
            if sock is None:
                raise WireError("not connected")
            sock.settimeout(_left(deadline))
            data = sock.recv(_RECV_BYTES)
            if not data:
                raise WireError("connection closed by the peer")
            buf += data


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WireError("no answer before the deadline")
    return left
