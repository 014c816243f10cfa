"""Every NameServer request code through the pure processor."""

from __future__ import annotations

import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_cluster.cluster.config import parse_properties
from rmq_cluster.cluster.protocol.route import (
    ClusterInfo,
    DataVersion,
    KVTable,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.codes import ResponseCode
from rmq_cluster.namesrv import kv_config
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.processor import (
    NAMESRV_REQUEST_CODES,
    NamesrvState,
    Reply,
    RequestContext,
    process,
)

M, S = "10.0.0.1:10911", "10.0.0.2:10911"
REPO = Path(__file__).resolve().parents[3]


def call(
    state: NamesrvState,
    code: int,
    ext: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    version: int = 407,
    conn: int = 1,
    now: float = 0.0,
) -> Reply:
    request = RemotingCommand.request(code, ext, body, version=version)
    reply = process(state, request, RequestContext(now=now, conn_id=conn, remote="127.0.0.1:1"))
    assert reply.response.is_response and reply.response.opaque == request.opaque
    return reply


def reg_header(addr: str = M, broker_id: int = 0, **extra: str) -> dict[str, str]:
    return {
        "brokerName": "broker-a",
        "brokerAddr": addr,
        "clusterName": "C",
        "haServerAddr": addr.replace("10911", "10912"),
        "brokerId": str(broker_id),
        **extra,
    }


def body(counter: int = 1, *topics: str) -> RegisterBrokerBody:
    return RegisterBrokerBody(
        TopicConfigSerializeWrapper(
            {t: TopicConfig(t, 4, 4) for t in topics}, DataVersion(1700000000000, counter)
        )
    )


@pytest.fixture
def state() -> NamesrvState:
    return NamesrvState.create(NamesrvConfig())


def test_register_and_route(state: NamesrvState) -> None:
    resp = call(state, RC.REGISTER_BROKER, reg_header(), body(1, "T").encode()).response
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields == {} and resp.body == b""
    resp = call(state, RC.REGISTER_BROKER, reg_header(S, 1), body(1, "T").encode()).response
    assert resp.ext_fields == {"masterAddr": M, "haServerAddr": "10.0.0.1:10912"}
    found = call(state, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).response
    route = TopicRouteData.decode(found.body)
    assert route.broker_datas[0].broker_addrs == {0: M, 1: S}
    missing = call(state, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "X"}).response
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert missing.remark == (
        "No topic route info in name server for the topic: X"
        "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
    )


def test_register_compressed_with_crc(state: NamesrvState) -> None:
    data = body(1, "T", "U").encode(compress=True)
    crc = zlib.crc32(data) & 0x7FFFFFFF
    ok = call(state, RC.REGISTER_BROKER, reg_header(compressed="true", bodyCrc32=str(crc)), data)
    assert ok.response.code == 0
    assert set(state.routes.topic_queue_table) == {"T", "U"}
    bad = call(state, RC.REGISTER_BROKER, reg_header(bodyCrc32=str(crc ^ 1)), data).response
    assert (bad.code, bad.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")


def test_register_without_body_and_old_broker_versions(state: NamesrvState) -> None:
    assert call(state, RC.REGISTER_BROKER, reg_header()).response.code == 0
    assert state.routes.live_brokers[M].data_version == DataVersion(0, 0)
    wrapper = body(2, "T").topic_config_serialize_wrapper.encode()
    # a broker older than V3_0_11 (37) sends the bare TopicConfigSerializeWrapper
    assert call(state, RC.REGISTER_BROKER, reg_header(), wrapper, version=36).response.code == 0
    assert "T" in state.routes.topic_queue_table


@pytest.mark.parametrize(
    ("ext", "data", "remark"),
    [
        ({"brokerAddr": M}, b"", "RemotingCommandException: the custom field <brokerName> is null"),
        (reg_header(brokerId="x"), b"", "brokerId"),
        (reg_header(), b"{not json", "Failed to decode RegisterBrokerBody"),
        (reg_header(compressed="true"), b"\x00junk", "Failed to decode RegisterBrokerBody"),
        (reg_header(), b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":"x"}}}}',
         "Failed to decode RegisterBrokerBody"),
    ],
)
def test_bad_register_requests_get_system_error(
    state: NamesrvState, ext: dict[str, str], data: bytes, remark: str
) -> None:
    resp = call(state, RC.REGISTER_BROKER, ext, data).response
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark is not None and remark in resp.remark
    assert state.routes.live_brokers == {}


def test_every_code_without_headers_is_answered(state: NamesrvState) -> None:
    for code in NAMESRV_REQUEST_CODES:
        resp = call(state, code).response
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR), code
    unknown = call(state, RC.SEND_MESSAGE).response
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert unknown.remark == " request type 10 not supported"


def test_unregister(state: NamesrvState) -> None:
    call(state, RC.REGISTER_BROKER, reg_header(), body(1, "T").encode())
    ext = {"brokerName": "broker-a", "brokerAddr": M, "clusterName": "C", "brokerId": "0"}
    assert call(state, RC.UNREGISTER_BROKER, ext).response.code == 0
    assert state.routes.live_brokers == {} and state.routes.topic_queue_table == {}


def test_query_data_version(state: NamesrvState) -> None:
    call(state, RC.REGISTER_BROKER, reg_header(), body(3, "T").encode(), now=1.0)
    ext = {"brokerName": "broker-a", "brokerAddr": M, "clusterName": "C", "brokerId": "0"}
    same = call(state, RC.QUERY_DATA_VERSION, ext, DataVersion(1700000000000, 3).encode(), now=50.0)
    assert same.response.ext_fields == {"changed": "false"}
    assert DataVersion.decode(same.response.body) == DataVersion(1700000000000, 3)
    assert state.routes.live_brokers[M].last_update == 50.0  # liveness refreshed
    newer = DataVersion(1700000000000, 4).encode()
    other = call(state, RC.QUERY_DATA_VERSION, ext, newer, now=60.0)
    assert other.response.ext_fields == {"changed": "true"}
    assert state.routes.live_brokers[M].last_update == 50.0
    bad = call(state, RC.QUERY_DATA_VERSION, ext, b"[1]").response
    assert bad.code == ResponseCode.SYSTEM_ERROR


def test_cluster_info_and_topic_lists(state: NamesrvState) -> None:
    call(state, RC.REGISTER_BROKER, reg_header(), body(1, "T", "U").encode())
    info = ClusterInfo.decode(call(state, RC.GET_BROKER_CLUSTER_INFO).response.body)
    assert info.cluster_addr_table == {"C": frozenset({"broker-a"})}
    topics = TopicList.decode(call(state, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).response.body)
    assert topics.topic_list == ("T", "U")
    by_cluster = call(state, RC.GET_TOPICS_BY_CLUSTER, {"cluster": "C"}).response.body
    assert TopicList.decode(by_cluster).topic_list == ("T", "U")
    system = TopicList.decode(call(state, RC.GET_SYSTEM_TOPIC_LIST_FROM_NS).response.body)
    assert system == TopicList(("C", "broker-a"), M)
    for code in (RC.GET_UNIT_TOPIC_LIST, RC.GET_HAS_UNIT_SUB_TOPIC_LIST,
                 RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST):
        assert TopicList.decode(call(state, code).response.body).topic_list == ()


def test_write_perm_and_delete_topic(state: NamesrvState) -> None:
    call(state, RC.REGISTER_BROKER, reg_header(), body(1, "T", "U").encode())
    wipe = call(state, RC.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).response
    assert wipe.ext_fields == {"wipeTopicCount": "2"}
    add = call(state, RC.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}).response
    assert add.ext_fields == {"addTopicCount": "2"}
    other_cluster = {"topic": "T", "clusterName": "X"}
    assert call(state, RC.DELETE_TOPIC_IN_NAMESRV, other_cluster).response.code == 0
    assert "T" in state.routes.topic_queue_table
    call(state, RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "T"})
    assert set(state.routes.topic_queue_table) == {"U"}


def test_kv_config(state: NamesrvState) -> None:
    put = call(state, RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"})
    assert put.response.code == 0 and put.kv_changed
    got = call(state, RC.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).response
    assert got.ext_fields == {"value": "v"}
    listed = call(state, RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}).response
    assert KVTable.decode(listed.body).table == {"k": "v"}
    deleted = call(state, RC.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert deleted.response.code == 0 and deleted.kv_changed
    missing = call(state, RC.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}).response
    assert (missing.code, missing.remark) == (
        ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: ns Key: k")
    assert call(state, RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}).response.body == (
        b'{"table":{}}')
    none = call(state, RC.GET_KVLIST_BY_NAMESPACE, {"namespace": "zz"}).response
    assert (none.code, none.remark) == (
        ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: zz")
    no_value = call(state, RC.PUT_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert no_value.response.code == ResponseCode.SYSTEM_ERROR and not no_value.kv_changed


def test_order_topic_conf(state: NamesrvState) -> None:
    conf = {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"}
    call(state, RC.PUT_KV_CONFIG, conf)
    resp = call(state, RC.REGISTER_BROKER, reg_header(), body(1, "T").encode()).response
    assert KVTable.decode(resp.body).table == {"T": "broker-a:4"}
    route = call(state, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).response.body
    assert TopicRouteData.decode(route).order_topic_conf is None  # orderMessageEnable=false
    call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n")
    route = call(state, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}).response.body
    assert TopicRouteData.decode(route).order_topic_conf == "broker-a:4"


def test_namesrv_config_get_and_update(state: NamesrvState) -> None:
    text = bytes(call(state, RC.GET_NAMESRV_CONFIG).response.body).decode()
    props = parse_properties(text)
    assert props["listenPort"] == "9876" and props["orderMessageEnable"] == "false"
    upd = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"brokerChannelExpiredTime=5000\nzzz=1\n")
    assert upd.response.code == 0 and upd.config_changed
    assert state.routes.broker_expired_s == 5.0
    black = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/etc/passwd\n").response
    assert black.code == ResponseCode.NO_PERMISSION
    assert "kvConfigPath cannot be updated by a request (configBlackList)" in (black.remark or "")
    # Apache's Netty server options are answered at their defaults, with configBlackList
    assert props["serverWorkerThreads"] == "8" and props["useEpollNativeSelector"] == "false"
    assert props["configBlackList"] == "configBlackList;configStorePath;kvConfigPath"
    bad = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"listenPort=abc\n").response
    assert bad.code == ResponseCode.SYSTEM_ERROR and "listenPort" in (bad.remark or "")
    assert state.config.listen_port == 9876


def test_kv_file_round_trip_and_atomic_write(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kvConfig.json"
    assert kv_config.load_file(path).table == {}
    kv = kv_config.KVConfigManager({"ORDER_TOPIC_CONFIG": {"T": "a:4"}, "ns": {"k": "v"}})
    kv_config.write_atomically(path, kv.encode())
    assert path.read_bytes() == (
        b'{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"a:4"},"ns":{"k":"v"}}}'
    )
    assert kv_config.load_file(path).table == kv.table
    assert [p.name for p in path.parent.iterdir()] == ["kvConfig.json"]  # no temp file left
    path.write_text("[1,2]")
    with pytest.raises(kv_config.KVConfigError):
        kv_config.load_file(path)


def test_main_prints_config(tmp_path: Path) -> None:
    # a child process: main() configures process-wide logging, which must not leak into pytest
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"listenPort=19876\nkvConfigPath={tmp_path}/kv.json\nrocketmqHome=/opt/rmq\n")
    cmd = [sys.executable, "-m", "rmq_cluster.namesrv", "-c", str(conf), "-p"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first == f"load config properties file OK, {conf}"
    props = parse_properties(rest)
    assert props["listenPort"] == "19876"
    assert props["rocketmqHome"] == "/opt/rmq"
    assert props["configStorePath"] == str(conf)
    conf.write_text("listenPort=notaport\n")
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2 and "listenPort" in done.stderr


_KEYS = ["brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId", "compressed",
         "bodyCrc32", "topic", "cluster", "namespace", "key", "value", "acceptStandardJsonOnly"]
_VALUES = st.one_of(st.sampled_from(["0", "1", "-1", "true", "x", "", "99999999999999999999"]),
                    st.text(max_size=8))


@settings(max_examples=300, deadline=None)
@given(
    code=st.sampled_from([*sorted(NAMESRV_REQUEST_CODES), 0, 999]),
    ext=st.builds(
        lambda base, extra: {**base, **extra},
        st.sampled_from([{}, reg_header(), {"topic": "T"}, {"namespace": "n", "key": "k"}]),
        st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4),
    ),
    data=st.one_of(
        st.binary(max_size=64),
        st.just(body(1, "T").encode()),
        st.just(body(2, "T").encode(compress=True)),
        st.sampled_from([b"{}", b"[]", b'{"topicConfigSerializeWrapper":[]}', b"null",
                         zlib.compress(b"\x00\x00\x00\x02{}")]),
    ),
    version=st.sampled_from([0, 36, 317, 333, 401, 407]),
)
def test_any_request_gets_an_answer(
    code: int, ext: dict[str, str], data: bytes, version: int
) -> None:
    state = NamesrvState.create(NamesrvConfig())
    reply = call(state, code, ext, data, version=version)
    assert reply.response.code in {c.value for c in ResponseCode}
    assert state.routes.consistency_errors() == []


def test_namesrv_config_black_list_is_the_configured_one() -> None:
    """``configBlackList`` from the NameServer's file is honoured for updates; the key itself
    never changes by a request."""
    state = NamesrvState.create(NamesrvConfig(config_black_list="orderMessageEnable"))
    refused = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true\n").response
    assert refused.code == ResponseCode.NO_PERMISSION and not state.config.order_message_enable
    itself = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"configBlackList=\n").response
    assert itself.code == ResponseCode.NO_PERMISSION
    moved = call(state, RC.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/kv.json\n").response
    assert moved.code == ResponseCode.SYSTEM_ERROR  # not black-listed here: a restart-only key
