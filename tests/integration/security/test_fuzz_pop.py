"""Fuzzing the RocketMQ 5 POP request codes of a live broker (POP_MESSAGE, ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION, POLLING_INFO, QUERY_ASSIGNMENT,
SET_MESSAGE_REQUEST_MODE) with Hypothesis, over real sockets, in the shape of
test_fuzz_nodes.py: headers near the valid ones (real topic and group, receipt handles that
almost parse, hostile numbers) and random bodies. After every example the broker must still
serve its old and new connections, and at the end a real pop/ack round trip must still work."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol.message import MessageConst, encode_properties, iter_records
from rmq_cluster.cluster.protocol.pop import PROPERTY_POP_CK, ReceiptHandle
from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.security.test_fuzz_nodes import (
    SETTINGS,
    Nodes,
    _assert_serving,
    _call,
    _connect,
    _frame,
    _opaque,
)

#: The remark the connection gives a processor that raised (errors.exception_remark).
CRASH_REMARK: Final = re.compile(r"^[A-Z][A-Za-z]*(Error|Exception|Group)\b")
TOPIC: Final = "FuzzPopT"
GROUP: Final = "FuzzPopG"
POP_CODES: Final = [
    RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
    RequestCode.NOTIFICATION, RequestCode.POLLING_INFO, RequestCode.QUERY_ASSIGNMENT,
    RequestCode.SET_MESSAGE_REQUEST_MODE,
]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    n = Nodes(tmp_path_factory.mktemp("fuzz-pop"))
    n.start()
    try:
        sock = _connect(n.broker_addr)
        try:
            for i in range(8):
                _call(sock, _send(f"m{i}".encode()), next(_opaque))
        finally:
            sock.close()
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def witnesses(nodes: Nodes) -> Iterator[dict[str, socket.socket]]:
    socks = {"ns": _connect(nodes.ns_addr), "broker": _connect(nodes.broker_addr)}
    try:
        yield socks
    finally:
        for s in socks.values():
            s.close()


def _send(body: bytes) -> RemotingCommand:
    props = encode_properties({MessageConst.PROPERTY_TAGS: "A"}).decode()
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
        "a": "PG", "b": TOPIC, "c": "TBW102", "d": "2", "e": "0", "f": "0",
        "g": "1700000000000", "h": "0", "i": props, "j": "0", "k": "false", "m": "false",
    }, body)


numbers = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-3, 40)).map(str)
handles = st.one_of(
    st.builds(lambda *v: " ".join(str(x) for x in v),
              st.integers(-5, 2**40), st.integers(-5, 2**45), st.integers(-5, 10**6),
              st.sampled_from([0, 1, 7, 8, 999, -1, 2**31]), st.sampled_from(["0", "1", "2", "x"]),
              st.sampled_from(["broker-a", "", "b"]), st.integers(-2, 3), st.integers(-2, 12)),
    st.text(max_size=60),
)
pop_fields = st.fixed_dictionaries(
    {},
    optional={
        "consumerGroup": st.sampled_from([GROUP, "", "%RETRY%x", "a b"]),
        "topic": st.sampled_from([TOPIC, f"%RETRY%{GROUP}_{TOPIC}", "NoSuch", "", "../x"]),
        "queueId": st.sampled_from(["-1", "0", "1", "1023", "1024", "-2", "x"]),
        "maxMsgNums": numbers, "invisibleTime": numbers,
        "pollTime": st.sampled_from(["0", "50", "-1", "x", str(2**62)]),
        "bornTime": st.sampled_from(["0", "1", str(2**62), "-5"]),
        "initMode": numbers, "order": st.sampled_from(["true", "false", "1", "x"]),
        "exp": st.sampled_from(["*", "A || B", "", "||", "a = 1"]),
        "expType": st.sampled_from(["TAG", "SQL92", "X"]),
        "attemptId": st.text(max_size=20), "extraInfo": handles, "offset": numbers,
        "hasMsg": st.just("true"),
    },
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
bodies = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(
        st.sampled_from(["topic", "consumerGroup", "clientId", "strategyName", "messageModel",
                         "mode", "popShareQueueNum"]),
        st.one_of(json_scalars, st.sampled_from([TOPIC, GROUP, "POP", "PULL", "BROADCASTING"])),
        max_size=7,
    ).map(lambda d: json.dumps(d).encode()),
)


@SETTINGS
@given(code=st.sampled_from(POP_CODES), ext=pop_fields, body=bodies)
def test_pop_codes_with_hostile_headers(nodes: Nodes, witnesses: dict[str, socket.socket],
                                        code: int, ext: dict[str, Any], body: bytes) -> None:
    header = {"code": int(code), "language": "JAVA", "version": 453, "opaque": 7, "flag": 0,
              "extFields": ext}
    sock = _connect(nodes.broker_addr)
    try:
        sock.sendall(_frame(header, body))
        decoder = FrameDecoder()
        answers: list[RemotingCommand] = []
        while not answers:
            data = sock.recv(65536)
            if not data:
                break
            answers += decoder.feed(data)
    finally:
        sock.close()
    for resp in answers:
        # answered with a code and a remark of ours, never an escaped exception
        assert not CRASH_REMARK.match(resp.remark or ""), (code, ext, resp.remark)
    _assert_serving(nodes, witnesses)


def test_pop_and_ack_still_work_after_fuzzing(nodes: Nodes,
                                              witnesses: dict[str, socket.socket]) -> None:
    sock = _connect(nodes.broker_addr)
    try:
        _call(sock, _send(b"after"), next(_opaque))
        pop = RemotingCommand.request(RequestCode.POP_MESSAGE, {
            "consumerGroup": "AfterG", "topic": TOPIC, "queueId": "-1", "maxMsgNums": "32",
            "invisibleTime": "60000", "pollTime": "0", "bornTime": "0", "initMode": "0",
        })
        resp = _call(sock, pop, next(_opaque))
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
        msgs = list(iter_records(bytes(resp.body)))
        assert b"after" in [m.body for m in msgs]
        ext = resp.ext_fields
        m = msgs[0]
        start = int(ext["startOffsetInfo"].split(";")[0].split(" ")[2])
        handle = ReceiptHandle(start, int(ext["popTime"]), 60000, int(ext["reviveQid"]), "0",
                               "broker-a", m.queue_id, m.queue_offset)
        ack = RemotingCommand.request(RequestCode.ACK_MESSAGE, {
            "consumerGroup": "AfterG", "topic": TOPIC, "queueId": str(m.queue_id),
            "extraInfo": handle.encode(), "offset": str(m.queue_offset),
        })
        assert _call(sock, ack, next(_opaque)).code == ResponseCode.SUCCESS
        assert PROPERTY_POP_CK not in m.properties
    finally:
        sock.close()
