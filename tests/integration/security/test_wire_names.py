"""Names on the wire against a live NameServer + broker (real sockets, real store files).

The nodes run in this process on a Trio loop in a thread of their own; the test thread talks
to them with blocking stdlib sockets. The store root is ``tmp/store``; beside it lie decoys
(``tmp/commitlog``, ``tmp/decoy/file``). Hypothesis puts generated names (dots, slashes,
absolute paths, NUL, newlines, unicode, long) into every name position of every request code
that carries one; after each example nothing outside the store root was created, changed or
deleted, a bad name was answered by the gate (SYSTEM_ERROR, the remark naming the field), and
the node still answers on the same connection. Afterwards the broker still sends and pulls.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq_cluster.broker.processors.gate import refusal_remark
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import MessageConst, encode_properties, iter_records
from rmq_cluster.cluster.protocol.names import NAME_TABLE, H, check_request
from rmq_cluster.cluster.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand, encode
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.namesrv.processor import NAMESRV_REQUEST_CODES
from tests.integration.broker.conftest import running_cluster
from tests.integration.security.loop_testlib import LoopThread, connect

IO_TIMEOUT_S: Final = 5.0
START_TIMEOUT_S: Final = 30.0
EXAMPLES: Final = 300

#: Every header field a request might need, valid, so that only the name under test is bad.
BASE_EXT: Final = {
    "topic": "T", "consumerGroup": "G", "group": "G", "producerGroup": "PG", "queueId": "0",
    "a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
    "j": "0", "m": "false", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
    "readQueueNums": "1", "writeQueueNums": "1", "perm": "6", "topicFilterType": "SINGLE_TAG",
    "originTopic": "T", "offset": "0", "delayLevel": "0", "commitOffset": "0",
    "queueOffset": "0", "maxMsgNums": "1", "sysFlag": "0", "suspendTimeoutMillis": "0",
    "subscription": "*", "subVersion": "0", "timestamp": "0", "key": "k", "maxNum": "1",
    "beginTimestamp": "0", "endTimestamp": "1", "clientID": "c", "clientId": "c",
    "groupName": "G", "tranStateTableOffset": "0", "commitLogOffset": "0",
    "commitOrRollback": "0", "msgId": "x", "isForce": "false", "bornTimestamp": "1",
    "flag": "0", "bornHost": "/127.0.0.1:1", "storeHost": "/127.0.0.1:1",
    "storeTimestamp": "1", "properties": "", "clusterName": "C", "brokerName": "b",
    "brokerAddr": "127.0.0.1:1", "haServerAddr": "127.0.0.1:2", "brokerId": "0",
    "bodyCrc32": "0", "compressed": "false",
}


def _heartbeat(where: str, name: Any) -> bytes:
    body: dict[str, Any] = {
        "clientID": "c",
        "producerDataSet": [{"groupName": name if where == "producer" else "PG"}],
        "consumerDataSet": [{
            "groupName": name if where == "consumer" else "G",
            "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": name if where == "sub" else "T",
                                     "subString": "*"}],
        }],
    }
    return fastjson.dumps(body)


def _mq_batch(where: str, name: Any) -> bytes:
    return fastjson.dumps({
        "consumerGroup": name if where == "group" else "G", "clientId": "c",
        "mqSet": [{"topic": name if where == "topic" else "T", "brokerName": "b",
                   "queueId": name if where == "queueId" else 0}],
    })


def _register(name: Any) -> bytes:
    tc = TopicConfig(str(name), 4, 4, 6)
    wrapper = TopicConfigSerializeWrapper({str(name): tc}, DataVersion())
    return RegisterBrokerBody(wrapper).encode()


#: code -> body positions (label, builder(name) -> body) for codes whose bodies carry names
BODY_POSITIONS: Final[dict[int, list[tuple[str, Any]]]] = {
    RC.HEART_BEAT: [(w, lambda n, w=w: _heartbeat(w, n)) for w in ("producer", "consumer", "sub")],
    RC.LOCK_BATCH_MQ: [(w, lambda n, w=w: _mq_batch(w, n)) for w in ("group", "topic", "queueId")],
    RC.UNLOCK_BATCH_MQ: [(w, lambda n, w=w: _mq_batch(w, n)) for w in ("group", "topic")],
    RC.CHECK_CLIENT_CONFIG: [
        ("group", lambda n: fastjson.dumps({"group": n})),
        ("topic", lambda n: fastjson.dumps({"group": "G", "subscriptionData": {"topic": n}})),
    ],
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: [
        ("groupName", lambda n: fastjson.dumps({"groupName": n})),
    ],
    RC.REGISTER_BROKER: [("topicConfigTable", _register)],
    **{code: [
        ("topic", lambda n: fastjson.dumps({"topic": n, "consumerGroup": "G", "clientId": "c"})),
        ("consumerGroup", lambda n: fastjson.dumps({"topic": "T", "consumerGroup": n})),
    ] for code in (RC.QUERY_ASSIGNMENT, RC.SET_MESSAGE_REQUEST_MODE)},
    RC.BATCH_ACK_MESSAGE: [
        ("acks[0].c", lambda n: fastjson.dumps({"acks": [{"c": n, "t": "T"}]})),
        ("acks[0].t", lambda n: fastjson.dumps({"acks": [{"c": "G", "t": n}]})),
    ],
}

NS_CODES: Final = frozenset(NAMESRV_REQUEST_CODES)


def _positions() -> list[tuple[int, str, bool]]:
    """(code, header field or body label, is_body) for every name position in the table."""
    out = []
    for code, specs in NAME_TABLE.items():
        for spec in specs:
            if isinstance(spec, H):
                out.append((int(code), spec.field, False))
        for label, _build in BODY_POSITIONS.get(code, []):
            out.append((int(code), label, True))
    return out


POSITIONS: Final = _positions()


def test_every_body_reader_has_positions_here() -> None:
    for code, specs in NAME_TABLE.items():
        if any(not isinstance(s, H) for s in specs):
            assert code in BODY_POSITIONS, RC(code).name


class Nodes(LoopThread):
    """An in-process NameServer + broker (store root ``tmp/store``) on a Trio loop in a thread."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("wire-names", start_timeout_s=START_TIMEOUT_S)
        self.tmp = tmp
        self.ns_addr = ""
        self.broker_addr = ""
        self.broker: Any = None

    async def serve(self) -> None:
        async with running_cluster(self.tmp, serverChannelMaxIdleTimeSeconds="60") as cluster:
            self.ns_addr = cluster.ns_addr
            self.broker_addr = cluster.addr
            self.broker = cluster.broker
            await self.serving()

    def stop(self) -> None:
        super().stop()
        assert not self._thread.is_alive(), "nodes did not stop"


def _connect(addr: str) -> socket.socket:
    return connect(addr, IO_TIMEOUT_S)


_opaque = iter(range(1, 1 << 30))


def _call(sock: socket.socket, cmd: RemotingCommand) -> RemotingCommand:
    opaque = next(_opaque)
    sock.sendall(encode(cmd, opaque))
    decoder = FrameDecoder()
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("node closed the connection")
        for got in decoder.feed(data):
            if got.opaque == opaque:
                return got


def _outside(tmp: Path) -> dict[str, tuple[bool, int, int]]:
    """Everything under ``tmp`` outside the store root: path -> (is_dir, size, mtime_ns)."""
    out: dict[str, tuple[bool, int, int]] = {}
    store = tmp / "store"
    for root, dirs, files in os.walk(tmp):
        here = Path(root)
        if here == store:
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if here / d != store]
        for name in dirs + files:
            p = here / name
            st_ = p.lstat()
            out[str(p.relative_to(tmp))] = (p.is_dir(), st_.st_size, st_.st_mtime_ns)
    return out


class World:
    def __init__(self, nodes: Nodes, tmp: Path) -> None:
        self.nodes = nodes
        self.tmp = tmp
        self.broker = _connect(nodes.broker_addr)
        self.ns = _connect(nodes.ns_addr)
        self.before = _outside(tmp)

    def close(self) -> None:
        self.broker.close()
        self.ns.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("names")
    (tmp / "commitlog").mkdir()
    (tmp / "commitlog" / "00000000000000000000").write_bytes(b"decoy")
    (tmp / "decoy").mkdir()
    (tmp / "decoy" / "file").write_bytes(b"decoy")
    (tmp / "consumequeue").mkdir()
    nodes = Nodes(tmp)
    nodes.start()
    w = World(nodes, tmp)
    try:
        yield w
    finally:
        w.close()
        nodes.stop()


def _request(code: int, field: str, is_body: bool, name: Any) -> RemotingCommand:
    ext = dict(BASE_EXT)
    body = b""
    if is_body:
        build = dict(BODY_POSITIONS[code])[field]
        body = build(name)
        if code == RC.REGISTER_BROKER:
            ext["bodyCrc32"] = "0"
    else:
        ext[field] = name
    return RemotingCommand.request(code, ext, body, version=407)


SEGMENTS = st.sampled_from(
    ["..", ".", "/", "../", "../../", "commitlog", "decoy", "file", "%RETRY%", "%DLQ%", "\x00",
     "\n", "\r", " ", "\u00e9", "\u4e2d", "\U0001f600", "T", "G", "_", "-", "|", "%", "x" * 130,
     str(Path("/tmp").resolve())]
)
NAMES = st.one_of(
    st.lists(SEGMENTS, min_size=1, max_size=6).map("".join),
    st.text(max_size=300),
    st.from_regex(r"[%|a-zA-Z0-9_-]{1,140}", fullmatch=True),
)

SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(position=st.sampled_from(POSITIONS), name=NAMES)
def test_names_through_every_code(world: World, position: tuple[int, str, bool],
                                  name: str) -> None:
    code, field, is_body = position
    request = _request(code, field, is_body, name)
    expected = check_request(request)
    sock = world.ns if code in NS_CODES else world.broker
    response = _call(sock, request)
    if expected is not None:
        assert response.code == ResponseCode.SYSTEM_ERROR, (RC(code).name, field, response)
        # (a bad topic of a send or a topic creation: RocketMQ's words, see gate.py)
        assert response.remark == refusal_remark(request, expected)
    assert _outside(world.tmp) == world.before
    # the node keeps serving on the same connection
    health = RC.GET_BROKER_RUNTIME_INFO if sock is world.broker else RC.GET_BROKER_CLUSTER_INFO
    assert _call(sock, RemotingCommand.request(health, {})).code == ResponseCode.SUCCESS


def _send(world: World, topic: str, body: bytes) -> RemotingCommand:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": "1700000000000", "h": "0",
           "i": encode_properties({MessageConst.PROPERTY_KEYS: "k1"}).decode(),
           "j": "0", "k": "false", "m": "false"}
    return _call(world.broker, RemotingCommand.request(RC.SEND_MESSAGE_V2, ext, body))


def _pull(world: World, topic: str) -> RemotingCommand:
    ext = {"consumerGroup": "CG", "topic": topic, "queueId": "0", "queueOffset": "0",
           "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
           "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
    return _call(world.broker, RemotingCommand.request(RC.PULL_MESSAGE, ext))


def test_issue_examples_and_the_node_still_serves(world: World) -> None:
    store = world.tmp / "store"
    sent = _send(world, "NamesKeep", b"kept")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    commitlog_files = sorted(os.listdir(store / "commitlog"))
    assert commitlog_files
    # DELETE_TOPIC_IN_BROKER with an absolute path or ../commitlog
    for topic in (str(world.tmp / "decoy"), "../commitlog", "../../commitlog", "/",
                  "..", "a\n"):
        resp = _call(world.broker, RemotingCommand.request(
            RC.DELETE_TOPIC_IN_BROKER, {"topic": topic}))
        assert resp.code == ResponseCode.SYSTEM_ERROR, (topic, resp)
        assert "topic" in (resp.remark or "")
    # CONSUMER_SEND_MSG_BACK with a ../ group
    for group in ("../../x", "../commitlog", "/abs", "g\x00"):
        resp = _call(world.broker, RemotingCommand.request(RC.CONSUMER_SEND_MSG_BACK, {
            "group": group, "offset": "0", "delayLevel": "0", "originTopic": "NamesKeep",
            "originMsgId": "x"}))
        assert resp.code == ResponseCode.SYSTEM_ERROR, (group, resp)
        assert resp.remark and "(field group)" in resp.remark
    # UPDATE_AND_CREATE_TOPIC over MAX_QUEUE_NUMS, and a huge retryQueueNums
    resp = _call(world.broker, RemotingCommand.request(RC.UPDATE_AND_CREATE_TOPIC, {
        **BASE_EXT, "topic": "Huge", "readQueueNums": str(2**31 - 1),
        "writeQueueNums": str(2**31 - 1)}))
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "out of range" in (resp.remark or "")
    resp = _call(world.broker, RemotingCommand.request(
        RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
        json.dumps({"groupName": "HugeRetry", "retryQueueNums": 2**31 - 1}).encode()))
    assert resp.code == ResponseCode.SYSTEM_ERROR and "retryQueueNums" in (resp.remark or "")
    assert _outside(world.tmp) == world.before
    assert sorted(os.listdir(store / "commitlog")) == commitlog_files
    # the node still sends and pulls, and the message sent before is still there
    again = _send(world, "NamesKeep", b"again")
    assert again.code == ResponseCode.SUCCESS, again.remark
    pulled = _pull(world, "NamesKeep")
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert [m.body for m in iter_records(bytes(pulled.body))] == [b"kept", b"again"]
