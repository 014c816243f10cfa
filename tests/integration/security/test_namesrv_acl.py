"""The NameServer under plain ACL (issue 19 item 3), on real sockets.

In process: a NameServer and a broker with ``aclEnable=true`` over one rules file; the broker
signs its registrations with ``aclAccessKey``/``aclSecretKey``. A stranger (unsigned, a wrong
secret, or a signed non-admin account) cannot register, unregister, wipe or add write
permission, change the config or the KV table, delete a topic or keep a broker alive: each is
answered SYSTEM_ERROR with RocketMQ's ``AclException`` remark, counted (``denials`` and
``/metrics``), and the routes stay as they were; reads stay open. Real processes: the same
against ``rmq-cluster up single --acl``, whose demo still works with the admin's keys.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import trio

from rmq_cluster.broker.node import BrokerNode
from rmq_cluster.client import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
)
from rmq_cluster.client.config import ClientConfig
from rmq_cluster.cluster.acl.local import local_admin
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION
from rmq_cluster.cluster.metrics import parse_exposition, sample_value
from rmq_cluster.cluster.metrics_server import fetch_metrics
from rmq_cluster.cluster.protocol.route import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from rmq_cluster.cluster.remoting.client_pool import RemotingClient, open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.cluster.remoting.headers import (
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)
from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.testing import UP_TIMEOUT_S, become_subreaper, cli, kill_leftovers
from rmq_cluster.deploy.topology import resolve_profile
from rmq_cluster.namesrv.config import NamesrvConfig
from rmq_cluster.namesrv.server import NAMESRV_ACL_CODES, NamesrvServer
from tests.integration.client.conftest import WAIT_S, broker_settings

ADMIN = Credentials("nsAdmin01", "nsAdminSecret01")
USER = Credentials("nsUser001", "nsUserSecret01")
RULES = f"""
accounts:
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
  - accessKey: {USER.access_key}
    secretKey: {USER.secret_key}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
"""
HIJACK_ADDR = "10.66.66.66:6666"  # where a hijacked route would send producers


def stranger_requests(cluster: str, broker: str, broker_addr: str) -> list[RemotingCommand]:
    """Every kind of request that changes a NameServer's view of the cluster."""
    wrapper = TopicConfigSerializeWrapper(
        {broker: TopicConfig(broker, 8, 8)}, DataVersion(1, 99)
    )
    body = RegisterBrokerBody(wrapper).encode()
    register = RegisterBrokerRequestHeader(
        broker_name=broker, broker_addr=HIJACK_ADDR, cluster_name=cluster,
        ha_server_addr=HIJACK_ADDR, broker_id=0, body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
    )
    unregister = UnregisterBrokerRequestHeader(
        broker_name=broker, broker_addr=broker_addr, cluster_name=cluster, broker_id=0
    )
    req = RemotingCommand.request
    rc = RequestCode
    return [
        req(rc.REGISTER_BROKER, register.to_ext_fields(), body),
        req(rc.UNREGISTER_BROKER, unregister.to_ext_fields()),
        req(rc.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": broker}),
        req(rc.ADD_WRITE_PERM_OF_BROKER, {"brokerName": broker}),
        req(rc.UPDATE_NAMESRV_CONFIG, {}, b"brokerChannelExpiredTime=1000\n"),
        req(rc.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": broker,
                               "value": "evil:1"}),
        req(rc.DELETE_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": broker}),
        req(rc.DELETE_TOPIC_IN_NAMESRV, {"topic": broker}),
        req(rc.QUERY_DATA_VERSION, unregister.to_ext_fields(), DataVersion(1, 99).encode()),
        req(rc.GET_NAMESRV_CONFIG),
    ]


async def snapshot(rc: RemotingClient, ns_addr: str, topic: str) -> tuple[bytes, bytes, bytes]:
    """Routes, cluster info and the KV namespace, read unsigned (reads are open)."""
    out = []
    for code, ext in (
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
        (RequestCode.GET_BROKER_CLUSTER_INFO, {}),
        (RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}),
    ):
        resp = await rc.invoke(ns_addr, RemotingCommand.request(code, ext))
        assert resp.code in (ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), resp.remark
        out.append(bytes(resp.body))
    return out[0], out[1], out[2]


async def deny_all(rc: RemotingClient, ns_addr: str, requests: list[RemotingCommand]) -> int:
    """Send each request unsigned, with a wrong secret and as the non-admin: all refused."""
    denied = 0
    for request in requests:
        for sender, reason in (
            (lambda r: r, "No accessKey is configured"),
            (Credentials(ADMIN.access_key, "not-the-secret").sign,
             f"Check signature failed for accessKey={ADMIN.access_key}"),
            (USER.sign, f"Need admin permission for request code={request.code}, "
                        f"but accessKey={USER.access_key} is not"),
        ):
            resp = await rc.invoke(ns_addr, sender(request))
            assert resp.code == ResponseCode.SYSTEM_ERROR, (request.code, resp.code, resp.remark)
            assert resp.remark == f"{ACL_EXCEPTION}: {reason}", resp.remark
            denied += 1
    return denied


def test_every_cluster_changing_code_is_guarded() -> None:
    codes = {int(c) for c in NAMESRV_ACL_CODES}
    writes = {
        RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG, RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.QUERY_DATA_VERSION,
        RequestCode.GET_NAMESRV_CONFIG,
    }
    assert codes == writes
    assert RequestCode.GET_ROUTEINFO_BY_TOPIC not in codes


async def test_stranger_cannot_change_routes_and_signed_broker_registers(
    tmp_path: Path,
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(RULES)
    cfg = NamesrvConfig(
        kv_config_path=str(tmp_path / "ns" / "kv.json"),
        config_store_path=str(tmp_path / "ns" / "ns.properties"),
        bind_address="127.0.0.1", listen_port=0, acl_enable=True, acl_file=str(acl_file),
        metrics_port=0,
    )
    async with trio.open_nursery() as nursery, open_remoting_client() as rc:
        ns = NamesrvServer(cfg)
        host, port = await nursery.start(ns.serve)
        ns_addr = f"{host}:{port}"
        settings = broker_settings(
            tmp_path / "b", ns_addr, aclEnable="true", aclFile=str(acl_file),
            aclAccessKey=ADMIN.access_key, aclSecretKey=ADMIN.secret_key,
        )
        broker = BrokerNode(settings)
        await nursery.start(broker.run)
        with trio.fail_after(WAIT_S):  # registered, signed with the admin's keys
            await ns.wait_until(lambda st: "broker-a" in st.routes.broker_addr_table)
        assert ns.acl is not None and ns.acl.denials == 0
        before = await snapshot(rc, ns_addr, "broker-a")
        config_before = ns.config

        requests = stranger_requests("TestCluster", "broker-a", broker.broker_addr)
        denied = await deny_all(rc, ns_addr, requests)
        assert denied == 3 * len(requests)
        assert await snapshot(rc, ns_addr, "broker-a") == before
        assert HIJACK_ADDR.encode() not in before[0]
        assert ns.config == config_before
        assert ns.acl.denials == denied
        assert ns.metrics_address is not None
        text = await trio.to_thread.run_sync(
            fetch_metrics, f"127.0.0.1:{ns.metrics_address[1]}"
        )
        assert sample_value(parse_exposition(text), "rmq_acl_denials") == denied

        # the admin may: wipe and restore the write permission, read the config
        wipe, add = requests[2], requests[3]
        resp = await rc.invoke(ns_addr, ADMIN.sign(wipe))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["wipeTopicCount"] != "0"
        resp = await rc.invoke(ns_addr, ADMIN.sign(add))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = await rc.invoke(ns_addr, ADMIN.sign(requests[-1]))
        assert resp.code == ResponseCode.SUCCESS and b"aclEnable=true" in resp.body

        # the admin's keys send and receive through the routes the broker registered
        cc_kwargs = {
            "client_config": ClientConfig(
                namesrv_addr=ns_addr, client_ip="127.0.0.1", poll_namesrv_interval_s=0.5,
                heartbeat_interval_s=1.0, rebalance_interval_s=1.0,
            ),
            "access_key": ADMIN.access_key,
            "secret_key": ADMIN.secret_key,
        }
        got: list[bytes] = []
        done = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            if len(got) >= 3:
                done.set()
            return ConsumeResult.SUCCESS

        async with Producer("NsAclPG", **cc_kwargs) as producer:
            for i in range(3):
                sent = await producer.send(Message("NsAclTopic", b"m%d" % i))
                assert sent.status is SendStatus.SEND_OK
            consumer = PushConsumer("NsAclCG", listener=listener, **cc_kwargs)
            consumer.subscribe("NsAclTopic")
            async with consumer:
                with trio.fail_after(WAIT_S):
                    await done.wait()
        assert sorted(got) == [b"m0", b"m1", b"m2"]
        assert ns.acl.denials == denied
        nursery.cancel_scope.cancel()


@pytest.mark.slow
def test_up_acl_namesrv_refuses_strangers(tmp_path: Path) -> None:
    become_subreaper()
    cluster_dir = tmp_path / "c"
    port = supervisor.free_base_port(resolve_profile("single"))
    pids: dict[str, int] = {}
    try:
        up = cli("up", "single", "--acl", "--dir", str(cluster_dir),
                 "--base-port", str(port), "--timeout", str(UP_TIMEOUT_S))
        assert up.returncode == 0, up.stderr  # ready: the broker registered, signed
        state = supervisor.load_state(cluster_dir)
        pids = {r.name: r.pid for r in state.records() if r.pid is not None}
        ns_conf = next(r.conf for r in state.records() if r.spec.kind == "namesrv")
        assert "aclEnable=true" in Path(ns_conf).read_text()
        (broker,) = state.records("broker")
        ns_addr = state.topology.namesrv_addr
        admin = local_admin(cluster_dir.resolve())
        assert admin is not None

        async def attack() -> int:
            async with open_remoting_client() as rc:
                before = await snapshot(rc, ns_addr, "broker-a")
                denied = 0
                for request in stranger_requests(
                    state.topology.spec.cluster_name, "broker-a", broker.spec.addr
                ):
                    for sender in (lambda r: r, USER.sign):  # unsigned; unknown account
                        resp = await rc.invoke(ns_addr, sender(request))
                        assert resp.code == ResponseCode.SYSTEM_ERROR, resp.remark
                        assert (resp.remark or "").startswith(f"{ACL_EXCEPTION}: ")
                        denied += 1
                assert await snapshot(rc, ns_addr, "broker-a") == before
                assert HIJACK_ADDR.encode() not in before[0]
                return denied

        denied = trio.run(attack)
        assert denied == 20
        demo = cli("demo", "--dir", str(cluster_dir), "--json")  # the admin's keys
        assert demo.returncode == 0, demo.stderr + demo.stdout
        ns_rec = next(r for r in state.records() if r.spec.kind == "namesrv")
        assert Path(ns_rec.log).read_text().count("acl denied") >= denied
    finally:
        cli("down", "--dir", str(cluster_dir), "--purge")
        kill_leftovers(cluster_dir, pids)
