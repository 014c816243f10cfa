"""A live ``mqproxy`` process for the proxy tests (plain text, or TLS with a certificate made
for the test, optionally under an ACL file), and a small blocking HTTP/2 client (h2) to speak to
it byte by byte over either."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
import h2.config
import h2.connection
import h2.events

from rmq_cluster.deploy.supervisor import rss_bytes
from rmq_cluster.proxy.grpc_wire import SERVICE_PREFIX, frame
from rmq_cluster.proxy.tls import ensure_certificate

BOOT_PREFIX = "The Proxy boot success. grpcPort="
START_TIMEOUT_S = 30.0
IO_TIMEOUT_S = 10.0


@attrs.define
class LiveProxy:
    proc: subprocess.Popen[str]
    port: int
    #: the certificate it serves (None: plain text)
    cert: Path | None = None

    def connect(self) -> socket.socket:
        return connect(self.port, self.cert)

    def client(self, metadata: Sequence[tuple[str, str]] = ()) -> H2Client:
        return H2Client(self.port, cert=self.cert, metadata=metadata)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        value = rss_bytes(self.proc.pid)
        assert value is not None
        return value


def connect(port: int, cert: Path | None = None) -> socket.socket:
    """A connection to a gRPC port on 127.0.0.1: TLS (``cert`` trusted, ALPN h2) when
    given the certificate the proxy serves."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
    if cert is None:
        return sock
    return client_context(cert).wrap_socket(sock, server_hostname="localhost")


def client_context(cert: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert))
    ctx.set_alpn_protocols(["h2"])
    return ctx


@contextlib.contextmanager
def live_proxy(tmp_path: Path, namesrv: str = "127.0.0.1:1", *, tls: bool = False,
               extra: Sequence[str] = ()) -> Iterator[LiveProxy]:
    """``mqproxy`` on a free port (0) of 127.0.0.1 (``tls``: with a certificate made in
    ``tmp_path``; ``extra`` arguments), stopped (SIGKILL if need be) afterwards."""
    cert_args: list[str] = []
    cert = None
    if tls:
        files = ensure_certificate(tmp_path)
        cert = files.cert
        cert_args = ["--tls-cert", str(files.cert), "--tls-key", str(files.key)]
    err = open(tmp_path / "proxy.err", "w")  # noqa: SIM115  (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmq_cluster.proxy", "-n", namesrv, "--grpc-port", "0",
         "--bind", "127.0.0.1", "--log-level", "warning", *cert_args, *extra],
        stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        line = ""
        while time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()  # the boot line is the first thing printed
            if line.startswith(BOOT_PREFIX):
                break
        assert line.startswith(BOOT_PREFIX), f"mqproxy did not boot: {line!r}"
        yield LiveProxy(proc, int(line[len(BOOT_PREFIX):].strip()), cert)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err.close()


class H2Client:
    """One HTTP/2 connection (prior knowledge over plain text, or TLS) driven synchronously;
    ``metadata``: headers sent with every call (the 5.x signature)."""

    def __init__(self, port: int, *, cert: Path | None = None,
                 metadata: Sequence[tuple[str, str]] = ()) -> None:
        self.sock = connect(port, cert)
        self.metadata = list(metadata)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()

    def close(self) -> None:
        self.sock.close()

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def start_call(self, method: str, headers: tuple[tuple[str, str], ...] = ()) -> int:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [
            (":method", "POST"), (":scheme", "http"), (":path", SERVICE_PREFIX + method),
            (":authority", "127.0.0.1"), ("content-type", "application/grpc"), ("te", "trailers"),
            *self.metadata,
            *headers,
        ])
        return sid

    def call(self, method: str, payload: bytes, *, raw: bytes | None = None,
             headers: tuple[tuple[str, str], ...] = (), timeout: float = IO_TIMEOUT_S
             ) -> tuple[list[bytes], dict[str, str]]:
        """One call that sends one message: ``frame(payload)`` (or ``raw`` bytes as the body);
        the response messages and the trailers, within ``timeout``."""
        sid = self.start_call(method, headers)
        data = frame(payload) if raw is None else raw
        step = self.conn.max_outbound_frame_size
        for at in range(0, len(data), step):  # within the default flow-control window
            self.conn.send_data(sid, data[at:at + step])
        self.conn.end_stream(sid)
        self.flush()
        return self.responses(sid, timeout)

    def responses(self, sid: int, timeout: float = IO_TIMEOUT_S
                  ) -> tuple[list[bytes], dict[str, str]]:
        body = b""
        trailers: dict[str, str] = {}
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the proxy closed the connection")
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                    body += ev.data
                elif isinstance(ev, h2.events.ResponseReceived | h2.events.TrailersReceived) \
                        and ev.stream_id == sid:
                    hdrs = {k.decode(): v.decode() for k, v in ev.headers}
                    if "grpc-status" in hdrs:
                        trailers = hdrs
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    self.flush()
                    return _split(body), trailers
            self.flush()
        raise TimeoutError("no answer")


def _split(body: bytes) -> list[bytes]:
    out = []
    while body:
        n = int.from_bytes(body[1:5], "big")
        out.append(body[5:5 + n])
        body = body[5 + n:]
    return out
