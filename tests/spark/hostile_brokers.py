"""Fake brokers for the live audit: small threaded TCP servers on 127.0.0.1 that answer
GET_BROKER_RUNTIME_INFO honestly or as a hostile node would (drip, bad frames, lies), and a
deploy-style cluster directory (``cluster.json`` + real-layout stores) pointing at them."""

from __future__ import annotations

import contextlib
import json
import random
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from rmq_cluster.cluster.protocol.route import KVTable
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.spark_jobs import synth


@attrs.frozen
class Conn:
    """One accepted connection: its socket, how many came before it, the test's stop and the
    honest answer (the end offset of the stores)."""

    sock: socket.socket
    n: int
    stop: threading.Event
    end: int


Behave = Callable[[Conn], None]
FILE_BYTES = 64 * 1024
PORTS = (20000, 32767)  # below the kernel's ephemeral range


def _request(c: Conn) -> RemotingCommand:
    dec = FrameDecoder()
    while True:
        data = c.sock.recv(4096)
        if not data:
            raise ConnectionError("client left before asking")
        for cmd in dec.feed(data):
            return cmd


def _hold(c: Conn) -> None:
    """Keep the connection open until the client leaves (or the test ends)."""
    c.sock.settimeout(0.2)
    while not c.stop.is_set():
        try:
            if not c.sock.recv(4096):
                return
        except TimeoutError:
            continue


def answer(table: dict[str, str], code: int = 0, remark: str | None = None) -> Behave:
    def run(c: Conn) -> None:
        req = _request(c)
        c.sock.sendall(encode(req.response(code, remark, body=KVTable(table).encode())))

    return run


def offset(value: int | str) -> Behave:
    return answer({"commitLogMaxOffset": str(value), "slaveFallBehindMuch": "0"})


def honest(c: Conn) -> None:
    offset(c.end)(c)


def raw(data: bytes, *, hold: bool = True) -> Behave:
    """Send ``data`` in answer, then hold the connection (or close it)."""

    def run(c: Conn) -> None:
        _request(c)
        c.sock.sendall(data)
        if hold:
            _hold(c)

    return run


def drip(c: Conn) -> None:
    """A frame announced at 64 KiB, then one byte every 50 ms: never complete in time."""
    _request(c)
    c.sock.sendall(struct.pack(">I", 64 * 1024))
    while not c.stop.wait(0.05):
        c.sock.sendall(b"x")


def flood(c: Conn) -> None:
    """Answers to someone else (another opaque), 256 KiB each, for ever."""
    req = _request(c)
    frame = encode(RemotingCommand(code=0, opaque=req.opaque + 1, flag=1, body=b"x" * (256 << 10)))
    while not c.stop.is_set():
        c.sock.sendall(frame)


def silent(c: Conn) -> None:
    _request(c)
    _hold(c)


def first_then(first: Behave, later: Behave) -> Behave:
    """``first`` on the first connection, ``later`` on the others (a node that changes its
    story when asked again)."""

    def run(c: Conn) -> None:
        (first if c.n == 0 else later)(c)

    return run


def _bind() -> socket.socket:
    for _ in range(200):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", random.randint(*PORTS)))
            return s
        except OSError:
            s.close()
    raise RuntimeError("no free port below the ephemeral range")


@attrs.define
class FakeBroker:
    behave: Behave | None  # None: the port is bound but nobody listens (refused)
    end: int
    sock: socket.socket = attrs.field(factory=_bind)
    stop: threading.Event = attrs.field(factory=threading.Event)
    threads: list[threading.Thread] = attrs.field(factory=list)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        if self.behave is None:
            return
        self.sock.listen(16)
        self._spawn(self._accept)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(t)
        t.start()

    def _accept(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._spawn(self._serve, conn, n)
            n += 1

    def _serve(self, conn: socket.socket, n: int) -> None:
        assert self.behave is not None
        with conn, contextlib.suppress(OSError):
            self.behave(Conn(conn, n, self.stop, self.end))

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self.sock.close()
        for t in self.threads:
            t.join(10)


@contextlib.contextmanager
def cluster_dir(tmp: Path, behaviours: dict[str, Behave | None]) -> Iterator[dict[str, Any]]:
    """Groups of a master ``<g>`` and a slave ``<g>-s`` with identical real-layout stores,
    each node served by its fake broker (``behaviours`` by node name; missing = honest)."""
    msgs = synth.make_msgs(40, body_size=300)
    groups = sorted({n.removesuffix("-s") for n in behaviours} | {"broker-a"})
    nodes, end = [], 0
    brokers: list[FakeBroker] = []
    try:
        for g in groups:
            for name, bid in ((g, 0), (f"{g}-s", 1)):
                placed = synth.write_commitlog_store(str(tmp / "store" / name), msgs, FILE_BYTES)
                end = placed[-1].phy_offset + placed[-1].size
                fb = FakeBroker(behaviours.get(name, honest), end)
                brokers.append(fb)
                nodes.append({"name": name, "kind": "broker", "group": g, "broker_id": bid,
                              "role": "ASYNC_MASTER" if bid == 0 else "SLAVE",
                              "host": "127.0.0.1", "port": fb.port})  # fmt: skip
        (tmp / "cluster.json").write_text(json.dumps({"topology": {"nodes": nodes}}))
        for fb in brokers:
            fb.start()
        yield {"dir": tmp, "end": end, "groups": groups}
    finally:
        for fb in brokers:
            fb.close()
