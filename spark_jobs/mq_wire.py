"""A blocking remoting channel for Spark tasks: one TCP connection, one call at a time.

The RocketMQ source and sink run inside Spark's Python workers, which import only what the job
archive ships (``package.py``: this package, the record layout, the remoting codec, ``attrs``;
no Trio, no compiled wheel).  Frames are encoded and decoded by the project's codec
(``cluster/remoting/codec.py``, sans-IO: ``encode`` and ``FrameDecoder``); this module adds
the socket, one deadline per call for the whole answer (not one per ``recv``: a peer that
drips bytes cannot hold a task) and the bounds: at most ``MAX_FRAME_BYTES`` a frame and
``MAX_ANSWER_BYTES`` read while waiting for one answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from typing import Any, Final

from ..cluster.remoting.codec import FrameDecoder, ProtocolError, RemotingCommand, encode
from ..cluster.remoting.codes import CURRENT_VERSION

#: RocketMQ's largest frame (its ``frameMaxLength`` default), length word included.
MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
#: Bytes a peer may send on one call before its answer is complete (stale answers included).
MAX_ANSWER_BYTES: Final = 4 * MAX_FRAME_BYTES
#: Per call: connect, send, and the whole answer.
CALL_TIMEOUT_S: Final = 10.0
#: ``MQVersion`` V4_9_7: a NameServer answers routes in standard (quoted-key) JSON from V4_9_4.
CLIENT_VERSION: Final = CURRENT_VERSION
LANGUAGE: Final = "PYTHON"
_RECV_BYTES: Final = 256 * 1024

#: What a call answers: the codec's command (``code``, ``remark``, ``ext_fields``, ``body``).
Reply = RemotingCommand


class WireError(Exception):
    """The peer could not be reached, answered late, or sent a frame this channel refuses."""


def request_frame(code: int, ext: Mapping[str, Any], body: bytes, opaque: int) -> bytes:
    """One request frame (JSON header; extFields as strings, nulls dropped)."""
    try:
        cmd = RemotingCommand.request(code, ext, body, language=LANGUAGE, version=CLIENT_VERSION)
        return encode(cmd, opaque)
    except ProtocolError as exc:
        raise WireError(f"request not encodable: {exc}") from None


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
        self._decoder = FrameDecoder(max_frame_bytes=MAX_FRAME_BYTES)
        self._ready: list[RemotingCommand] = []
        self._opaque = 0

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._decoder.release()
        self._decoder = FrameDecoder(max_frame_bytes=MAX_FRAME_BYTES)
        self._ready.clear()

    def call(self, code: int, ext: Mapping[str, Any], body: bytes = b"",
             timeout_s: float | None = None) -> Reply:  # fmt: skip
        deadline = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        try:
            return self._call(code, ext, body, deadline)
        except TimeoutError:
            self.close()
            raise WireError(f"{self.addr}: no answer before the deadline") from None
        except (OSError, WireError, ProtocolError) as exc:
            self.close()
            if isinstance(exc, OSError):
                raise WireError(f"{self.addr}: {exc!r}") from None
            raise WireError(f"{self.addr}: {exc}") from None

    def _call(self, code: int, ext: Mapping[str, Any], body: bytes, deadline: float) -> Reply:
        if self._sock is None:
            self._sock = socket.create_connection(self._target, timeout=_left(deadline))
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        frame = request_frame(code, ext, body, self._opaque)
        self._sock.settimeout(_left(deadline))
        self._sock.sendall(frame)
        got = 0
        while True:
            while self._ready:
                cmd = self._ready.pop(0)
                if cmd.is_response and cmd.opaque == self._opaque:
                    return cmd  # answers to earlier, timed-out calls and requests are dropped
            got += self._receive(deadline)
            if got > MAX_ANSWER_BYTES:
                raise WireError(f"more than {MAX_ANSWER_BYTES} bytes without the answer")

    def _receive(self, deadline: float) -> int:
        sock = self._sock
        if sock is None:
            raise WireError("not connected")
        sock.settimeout(_left(deadline))
        data = sock.recv(_RECV_BYTES)
        if not data:
            raise WireError("connection closed by the peer")
        self._ready += self._decoder.feed(data)
        return len(data)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise WireError("no answer before the deadline")
    return left
