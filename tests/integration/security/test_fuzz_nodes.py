"""Fuzzing a live NameServer and broker with Hypothesis (bounded: runs in CI in seconds).

The nodes run in this process, in a Trio loop on a thread of their own; the test thread talks
to them over real sockets with blocking stdlib calls. Each example opens a connection, sends
random bytes, a well-framed request with random header values and body, or a valid frame cut
short, then closes its side. After every example, connections opened before the fuzzing
(one per node) must still answer a normal request, and a fresh connection must too: one
peer's garbage never takes a node down or stalls its other peers.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.client.conftest import running_cluster
from tests.integration.security.loop_testlib import LoopThread, connect

#: Examples per strategy (x2 targets): bounded so the file runs in a few seconds.
FUZZ_EXAMPLES: Final = 40
IO_TIMEOUT_S: Final = 5.0
START_TIMEOUT_S: Final = 30.0

KNOWN_CODES: Final = [int(c) for c in RequestCode]


class Nodes(LoopThread):
    """An in-process NameServer + broker on a Trio loop in a background thread."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("fuzz-nodes", start_timeout_s=START_TIMEOUT_S)
        self.tmp = tmp
        self.ns_addr = ""
        self.broker_addr = ""

    async def serve(self) -> None:
        async with running_cluster(self.tmp, serverChannelMaxIdleTimeSeconds="30") as cluster:
            self.ns_addr = cluster.ns_addr
            self.broker_addr = cluster.addr
            await self.serving()


def _connect(addr: str) -> socket.socket:
    return connect(addr, IO_TIMEOUT_S)


def _call(sock: socket.socket, cmd: RemotingCommand, opaque: int) -> RemotingCommand:
    sock.sendall(encode(cmd, opaque))
    decoder = FrameDecoder()
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("node closed a healthy connection")
        for got in decoder.feed(data):
            if got.opaque == opaque:
                return got


def _health(addr: str, code: int) -> RemotingCommand:
    return RemotingCommand.request(code, {})


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    n = Nodes(tmp_path_factory.mktemp("fuzz"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def witnesses(nodes: Nodes) -> Iterator[dict[str, socket.socket]]:
    """Connections opened before any fuzzing; they must keep being served."""
    socks = {"ns": _connect(nodes.ns_addr), "broker": _connect(nodes.broker_addr)}
    try:
        yield socks
    finally:
        for s in socks.values():
            s.close()


_HEALTH: Final = {
    "ns": RequestCode.GET_BROKER_CLUSTER_INFO,
    "broker": RequestCode.GET_BROKER_RUNTIME_INFO,
}
_opaque = iter(range(1, 1 << 30))


def _assert_serving(nodes: Nodes, witnesses: dict[str, socket.socket]) -> None:
    for name, addr in (("ns", nodes.ns_addr), ("broker", nodes.broker_addr)):
        request = RemotingCommand.request(_HEALTH[name], {})
        resp = _call(witnesses[name], request, next(_opaque))
        assert resp.code == ResponseCode.SUCCESS, (name, resp.code, resp.remark)
        fresh = _connect(addr)
        try:
            assert _call(fresh, request, next(_opaque)).code == ResponseCode.SUCCESS
        finally:
            fresh.close()


def _throw(addr: str, payload: bytes) -> None:
    """Send ``payload``, close our side, read whatever comes back until the node closes."""
    sock = _connect(addr)
    try:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (ConnectionError, TimeoutError):
            pass  # the node may drop us mid-send: that is its right
    finally:
        sock.close()


ext_values = st.one_of(st.text(max_size=40), st.integers().map(str), st.just(""))
headers = st.fixed_dictionaries(
    {
        "code": st.one_of(st.sampled_from(KNOWN_CODES), st.integers(-(2**31), 2**31 - 1)),
        "language": st.sampled_from(["JAVA", "CPP", "GO", "PYTHON", "OTHER"]),
        "version": st.integers(0, 500),
        "opaque": st.integers(0, 2**31 - 1),
        "flag": st.sampled_from([0, 0, 2]),
        "extFields": st.dictionaries(
            st.sampled_from(
                ["topic", "b", "a", "consumerGroup", "queueId", "e", "queueOffset",
                 "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subscription",
                 "key", "value", "namespace", "brokerName", "brokerAddr", "clusterName",
                 "brokerId", "group", "originTopic", "offset", "msgId", "i", "m", "n",
                 "producerGroup", "tranStateTableOffset", "commitLogOffset", "clientID"]
            ) | st.text(max_size=10),
            ext_values,
            max_size=12,
        ),
    }
)


def _frame(header: dict[str, Any], body: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">II", 4 + len(h) + len(body), len(h)) + h + body


target = st.sampled_from(["ns", "broker"])
SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _addr(nodes: Nodes, which: str) -> str:
    return nodes.ns_addr if which == "ns" else nodes.broker_addr


@SETTINGS
@given(which=target, junk=st.binary(max_size=512), framed=st.booleans())
def test_random_bytes(nodes: Nodes, witnesses: dict[str, socket.socket], which: str,
                      junk: bytes, framed: bool) -> None:
    payload = struct.pack(">I", len(junk)) + junk if framed else junk
    _throw(_addr(nodes, which), payload)
    _assert_serving(nodes, witnesses)


@SETTINGS
@given(which=target, header=headers, body=st.binary(max_size=256))
def test_random_header_values(nodes: Nodes, witnesses: dict[str, socket.socket], which: str,
                              header: dict[str, Any], body: bytes) -> None:
    _throw(_addr(nodes, which), _frame(header, body))
    _assert_serving(nodes, witnesses)


@SETTINGS
@given(which=target, header=headers, body=st.binary(min_size=1, max_size=256),
       cut=st.floats(0.0, 0.999))
def test_truncated_frames(nodes: Nodes, witnesses: dict[str, socket.socket], which: str,
                          header: dict[str, Any], body: bytes, cut: float) -> None:
    frame = _frame(header, body)
    _throw(_addr(nodes, which), frame[: int(len(frame) * cut)])
    _assert_serving(nodes, witnesses)


def test_oversized_frame_and_ext_fields_refused(nodes: Nodes,
                                                witnesses: dict[str, socket.socket]) -> None:
    """Over-limit input closes that connection only."""
    _throw(nodes.broker_addr, struct.pack(">II", 64 * 1024 * 1024, 10))
    many = {"code": 34, "language": "JAVA", "version": 1, "opaque": 1, "flag": 0,
            "extFields": {f"k{i}": "v" for i in range(5000)}}
    _throw(nodes.ns_addr, _frame(many, b""))
    _assert_serving(nodes, witnesses)
