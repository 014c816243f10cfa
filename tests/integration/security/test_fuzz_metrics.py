"""Fuzzing a live NameServer's and broker's /metrics listeners with Hypothesis (bounded: runs in
seconds). ``up --metrics`` opens both on every cluster (issue 38, item 8).

The nodes run in this process, in a Trio loop on a thread of their own (as in
``test_fuzz_nodes.py``); the test thread talks to them over real sockets. Each example sends
random bytes, a request head with random method, target, version and headers, or a valid head
cut short, then closes its side. After every example both listeners still answer a scrape
with text the strict parser accepts, and both remoting ports still answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.metrics import parse_exposition, sample_value
from rmq_cluster.cluster.metrics_server import (
    MAX_REQUEST_HEAD_BYTES,
    MAX_SCRAPE_CONNECTIONS,
    fetch_metrics,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NamesrvServer
from tests.integration.client.conftest import running_cluster
from tests.integration.security.loop_testlib import LoopThread
from tests.integration.security.test_fuzz_nodes import IO_TIMEOUT_S, START_TIMEOUT_S, _call

#: Examples per strategy (x2 targets): bounded so the file runs in a few seconds.
FUZZ_EXAMPLES: Final = 30


class MetricsNodes(LoopThread):
    """A broker (and its NameServer) plus a NameServer with /metrics, on a background loop."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("fuzz-metrics", start_timeout_s=START_TIMEOUT_S)
        self.tmp = tmp
        self.addrs: dict[str, str] = {}  # ns / broker -> remoting address
        self.metrics: dict[str, str] = {}  # ns / broker -> metrics address

    async def serve(self) -> None:
        ns_cfg = NamesrvConfig(
            kv_config_path=str(self.tmp / "mns" / "kv.json"),
            config_store_path=str(self.tmp / "mns" / "ns.props"),
            bind_address="127.0.0.1", listen_port=0, metrics_port=0,
        )
        ns = NamesrvServer(ns_cfg, node="metrics-ns")
        async with running_cluster(self.tmp, metricsPort="0", metricsCacheSeconds="0") as c, \
                trio.open_nursery() as nursery:
            host, port = await nursery.start(ns.serve)
            assert ns.metrics_address is not None and c.broker.metrics_address is not None
            self.addrs = {"ns": f"{host}:{port}", "broker": c.addr}
            self.metrics = {"ns": ":".join(map(str, ns.metrics_address)),
                            "broker": ":".join(map(str, c.broker.metrics_address))}
            await self.serving()
            nursery.cancel_scope.cancel()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MetricsNodes]:
    n = MetricsNodes(tmp_path_factory.mktemp("fuzz-metrics"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


_HEALTH: Final = {
    "ns": RequestCode.GET_BROKER_CLUSTER_INFO,
    "broker": RequestCode.GET_BROKER_RUNTIME_INFO,
}


def _assert_serving(nodes: MetricsNodes) -> None:
    for which in ("ns", "broker"):
        fams = parse_exposition(fetch_metrics(nodes.metrics[which], IO_TIMEOUT_S))
        assert fams, which
        host, port = nodes.addrs[which].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
            sock.settimeout(IO_TIMEOUT_S)
            resp = _call(sock, RemotingCommand.request(_HEALTH[which], {}), 1)
            assert resp.code == ResponseCode.SUCCESS, (which, resp.code, resp.remark)


def _until_scraped(addr: str) -> None:
    """Scrape ``addr`` until it answers (connections just closed may still hold the slots a
    moment), within IO_TIMEOUT_S."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while True:
        try:
            fetch_metrics(addr, IO_TIMEOUT_S)
            return
        except ConnectionError:
            if time.monotonic() > deadline:
                raise


def _throw(addr: str, payload: bytes) -> bytes:
    """Send ``payload``, close our side, -> what came back before the listener closed."""
    host, port = addr.rsplit(":", 1)
    got = bytearray()
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.settimeout(IO_TIMEOUT_S)
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(65536):
                got += chunk
        except OSError:
            pass  # the listener may drop us mid-send: that is its right
    return bytes(got)


def _answered(reply: bytes) -> None:
    """Whatever came back is empty (closed) or one HTTP/1.1 response, never a traceback."""
    assert not reply or reply.startswith(b"HTTP/1.1 "), reply[:80]
    assert b"Traceback" not in reply


target = st.sampled_from(["ns", "broker"])
token = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=20)
methods = st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "get", ""])
paths = st.one_of(st.sampled_from(["/metrics", "/metrics?x=1", "/", "*", "//metrics"]),
                  st.text(max_size=60).map(lambda t: "/" + t))
header_lines = st.lists(
    st.tuples(st.sampled_from(["Host", "Authorization", "Content-Length", "Connection",
                               "Transfer-Encoding", "Accept"]) | token,
              st.text(max_size=40)),
    max_size=8,
)
SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _head(method: str, path: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {path} {version}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass")


@SETTINGS
@given(which=target, junk=st.binary(max_size=2048))
def test_random_bytes(nodes: MetricsNodes, which: str, junk: bytes) -> None:
    _answered(_throw(nodes.metrics[which], junk))
    _assert_serving(nodes)


@SETTINGS
@given(which=target, method=methods, path=paths,
       version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "FTP/1", ""]),
       headers=header_lines)
def test_random_request_heads(nodes: MetricsNodes, which: str, method: str, path: str,
                              version: str, headers: list[tuple[str, str]]) -> None:
    _answered(_throw(nodes.metrics[which], _head(method, path, version, headers)))
    _assert_serving(nodes)


@SETTINGS
@given(which=target, headers=header_lines, cut=st.floats(0.0, 0.999))
def test_truncated_heads(nodes: MetricsNodes, which: str, headers: list[tuple[str, str]],
                         cut: float) -> None:
    head = _head("GET", "/metrics", "HTTP/1.1", headers)
    _answered(_throw(nodes.metrics[which], head[: int(len(head) * cut)]))
    _assert_serving(nodes)


def test_oversized_head_and_too_many_connections(nodes: MetricsNodes) -> None:
    """A head past MAX_REQUEST_HEAD_BYTES gets 431; connections past MAX_SCRAPE_CONNECTIONS
    are closed at once while the others are still served; the requests a NameServer
    answered are counted by code, unknown codes under one label."""
    for which in ("ns", "broker"):
        # (all of it read before the answer: no reset that could eat the 431)
        big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_REQUEST_HEAD_BYTES
        assert _throw(nodes.metrics[which], big).startswith(b"HTTP/1.1 431")
        host, port = nodes.metrics[which].rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
                for _ in range(MAX_SCRAPE_CONNECTIONS + 8)]
        try:
            extra = idle[-1]
            extra.settimeout(IO_TIMEOUT_S)
            assert extra.recv(1) == b""  # closed as soon as accepted
        finally:
            for s in idle:
                s.close()
        _until_scraped(nodes.metrics[which])  # once the listener has seen them go
        _assert_serving(nodes)
    host, port = nodes.addrs["ns"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S) as sock:
        sock.settimeout(IO_TIMEOUT_S)
        for opaque, code in enumerate((99_999, 88_888, RequestCode.GET_BROKER_CLUSTER_INFO), 1):
            _call(sock, RemotingCommand.request(code, {}), opaque)
    fams = parse_exposition(fetch_metrics(nodes.metrics["ns"], IO_TIMEOUT_S))
    assert (sample_value(fams, "rmq_namesrv_requests", code="other") or 0) >= 2
    assert (sample_value(fams, "rmq_namesrv_requests", request="GET_BROKER_CLUSTER_INFO") or 0) >= 1
