"""Route bodies byte for byte as RocketMQ's Java NameServer writes them, and lenient reading.

Every expected string below is written by hand from docs/protocol/remoting.md ("Route and
cluster JSON"), not produced by our encoder.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.route import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    KVTable,
    PermName,
    QueueData,
    RegisterBrokerBody,
    RouteDecodeError,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, Version
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.processor import NamesrvState, RequestContext, process

# §4.1, verbatim: what a 4.9.4+ NameServer sends a client of version >= 401 (Java 407).
ROUTE_STANDARD = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
# The same route for an old client (C++ 2.0 = 333, Go v2 = 317): fastjson default, unquoted ids.
ROUTE_FASTJSON = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
# §4.3: always fastjson default, whatever the client's version.
CLUSTER_INFO = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}},'
    b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
)
# §4.5, verbatim.
REGISTER_BODY = (
    b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
    b'"timestamp":1700000000000},"topicConfigTable":{"T":{"order":false,"perm":6,'
    b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,'
    b'"writeQueueNums":8}}}}'
)


def _register(state: NamesrvState, addr: str, broker_id: int, body: bytes) -> RemotingCommand:
    header = {
        "brokerName": "broker-a",
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": addr.replace("10911", "10912"),
        "brokerId": str(broker_id),
    }
    req = RemotingCommand.request(RequestCode.REGISTER_BROKER, header, body)
    return process(state, req, RequestContext(now=0.0, conn_id=broker_id + 1)).response


@pytest.fixture
def state() -> NamesrvState:
    st = NamesrvState.create(NamesrvConfig())
    wrapper = TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", read_queue_nums=4, write_queue_nums=4)},
        DataVersion(1700000000000, 3),
    )
    body = RegisterBrokerBody(wrapper).encode()
    assert _register(st, "10.0.0.1:10911", 0, body).code == 0
    assert _register(st, "10.0.0.2:10911", 1, body).code == 0
    return st


@pytest.mark.parametrize(
    ("version", "accept_standard", "expected"),
    [
        (Version.V4_9_7, None, ROUTE_STANDARD),  # Java 4.9.7 client
        (Version.V4_9_4, None, ROUTE_STANDARD),  # the switch-over version itself
        (Version.V4_6_0, None, ROUTE_FASTJSON),  # C++ 2.0
        (Version.V4_5_2, None, ROUTE_FASTJSON),  # Go v2
        (Version.V4_5_2, "true", ROUTE_STANDARD),  # old client asking for standard JSON
        (Version.V4_6_0, "false", ROUTE_FASTJSON),
    ],
)
def test_route_body_golden(
    state: NamesrvState, version: int, accept_standard: str | None, expected: bytes
) -> None:
    ext = {"topic": "T"}
    if accept_standard is not None:
        ext["acceptStandardJsonOnly"] = accept_standard
    req = RemotingCommand.request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, ext, version=version, language="CPP"
    )
    resp = process(state, req, RequestContext(now=0.0)).response
    assert resp.code == 0
    assert bytes(resp.body) == expected


@pytest.mark.parametrize("version", [Version.V4_9_7, Version.V4_6_0, Version.V4_5_2])
def test_cluster_info_golden(state: NamesrvState, version: int) -> None:
    req = RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO, version=version)
    resp = process(state, req, RequestContext(now=0.0)).response
    assert resp.code == 0
    assert bytes(resp.body) == CLUSTER_INFO


def test_route_objects_encode_golden() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("broker-a", 4, 4, PermName.PERM_RW, 0)],
        broker_datas=[
            BrokerData("DefaultCluster", "broker-a", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"})
        ],
    )
    assert route.encode(standard=True) == ROUTE_STANDARD
    assert route.encode(standard=False) == ROUTE_FASTJSON
    with_conf = TopicRouteData(order_topic_conf="broker-a:4")
    assert with_conf.encode() == (
        b'{"brokerDatas":[],"filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas":[]}'
    )


def test_register_body_golden_and_round_trip() -> None:
    body = RegisterBrokerBody(
        TopicConfigSerializeWrapper(
            {"T": TopicConfig("T", read_queue_nums=8, write_queue_nums=8)},
            DataVersion(timestamp=1700000000000, counter=3),
        )
    )
    assert body.encode() == REGISTER_BODY
    assert RegisterBrokerBody.decode(REGISTER_BODY) == body
    assert RegisterBrokerBody.decode(body.encode(compress=True), compressed=True) == body


def test_compressed_register_body_built_by_hand() -> None:
    def part(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    raw = (
        part(b'{"counter":5,"timestamp":1700000000001}')
        + struct.pack(">i", 2)
        + part(b"T1 8 4 6 SINGLE_TAG")
        + part(b"T2 1 1 2 MULTI_TAG")
        + part(b'["10.0.0.9:9999"]')
    )
    body = RegisterBrokerBody.decode(zlib.compress(raw), compressed=True)
    wrapper = body.topic_config_serialize_wrapper
    assert wrapper.data_version == DataVersion(1700000000001, 5)
    assert wrapper.topic_config_table == {
        "T1": TopicConfig("T1", 8, 4, 6, "SINGLE_TAG"),
        "T2": TopicConfig("T2", 1, 1, 2, "MULTI_TAG"),
    }
    assert body.filter_server_list == ("10.0.0.9:9999",)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"not zlib",
        zlib.compress(b"\x00\x00\x00\x10{}"),  # part longer than the stream
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", 999999)),  # topic count
        zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">ii", 1, 3) + b"T 1"),
    ],
)
def test_compressed_register_body_rejects_garbage(bad: bytes) -> None:
    with pytest.raises(RouteDecodeError):
        RegisterBrokerBody.decode(bad, compressed=True)


def test_lenient_input_like_fastjson() -> None:
    # unquoted ids, numbers as strings, the pre-4.9.0 topicSynFlag key, unknown keys ignored
    text = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911", 1 :"10.0.0.2:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster","zoneName":"z"}],'
        b'"queueDatas":[{"brokerName":"broker-a","perm":"6","readQueueNums":"4",'
        b'"topicSynFlag":0,"writeQueueNums":4}],"extra":{"1":2}}'
    )
    route = TopicRouteData.decode(text)
    assert route == TopicRouteData.decode(ROUTE_STANDARD) == TopicRouteData.decode(ROUTE_FASTJSON)
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert route.broker_datas[0].master_addr == "10.0.0.1:10911"
    info = ClusterInfo.decode(CLUSTER_INFO)
    assert info.cluster_addr_table == {"DefaultCluster": frozenset({"broker-a"})}
    assert info.encode() == CLUSTER_INFO


def test_unquoting_never_touches_strings() -> None:
    text = '{"a,1:b":{2:"x,3:y"},"k":[{4:"{5:6}"}]}'
    assert fastjson.loads(text) == {"a,1:b": {"2": "x,3:y"}, "k": [{"4": "{5:6}"}]}
    with pytest.raises(fastjson.FastjsonError):
        fastjson.loads(b"{0:}")


def test_standard_json_escapes_non_ascii_like_browser_compatible() -> None:
    assert fastjson.dumps({"t": "é"}, standard=True) == b'{"t":"\\u00e9"}'
    assert fastjson.dumps({"t": "é"}) == '{"t":"é"}'.encode()


def test_small_bodies() -> None:
    assert TopicList(["T1"], "10.0.0.1:10911").encode() == (
        b'{"brokerAddr":"10.0.0.1:10911","topicList":["T1"]}'
    )
    assert TopicList(["T1"]).encode() == b'{"topicList":["T1"]}'
    assert KVTable({"k": "v"}).encode() == b'{"table":{"k":"v"}}'
    assert DataVersion(1700000000000, 12).encode() == b'{"counter":12,"timestamp":1700000000000}'
    text = b'{"counter":"12","timestamp":1,"stateVersion":0}'
    assert DataVersion.decode(text) == DataVersion(1, 12)
    assert TopicList.decode(b'{"topicList":["a","b"]}').topic_list == ("a", "b")
    assert KVTable.decode(b'{"table":{"k":"v"}}').table == {"k": "v"}


def test_perm_names() -> None:
    assert PermName.perm_to_string(6) == "RW-"
    assert PermName.is_writeable(6) and not PermName.is_writeable(4)
    assert PermName.is_readable(4) and PermName.is_inherited(7)


@pytest.mark.parametrize(
    "bad",
    [b"[]", b'{"queueDatas":{}}', b'{"brokerDatas":[{"brokerAddrs":{"x":"a"},"brokerName":"b"}]}',
     b'{"queueDatas":[{"perm":6}]}', b"\xff"],
)
def test_bad_route_bodies(bad: bytes) -> None:
    with pytest.raises(RouteDecodeError):
        TopicRouteData.decode(bad)


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=6))
_json_tree = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.dictionaries(st.integers(-5, 20), inner, max_size=4),
    ),
    max_leaves=12,
)


def _as_parsed(value: object) -> object:
    """What JSON text of ``value`` parses back to: keys become strings, null map values vanish."""
    if isinstance(value, dict):
        return {str(k): _as_parsed(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_as_parsed(v) for v in value]
    return value


@given(_json_tree, st.booleans())
def test_fastjson_round_trip(value: object, standard: bool) -> None:
    text = fastjson.dumps(value, standard=standard)
    assert fastjson.loads(text) == _as_parsed(value)
    if standard:
        assert text.isascii()
