"""UPDATE_BROKER_CONFIG (mqadmin updateBrokerConfig / getBrokerConfig): keys change the running
broker at once, brokerPermission re-registers (read-only broker: routes show perm 4, sends get
NO_PERMISSION, reads go on), the config file is rewritten in place, bad keys are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq_cluster.client import (
    Admin,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    MQBrokerError,
    NoRouteError,
    Producer,
    PullConsumer,
)
from rmq_cluster.cluster.remoting.codes import ResponseCode

from .conftest import Cluster
from .test_cli_sync import run_cli

CONF = """# broker-a, written by hand
brokerClusterName=TestCluster
brokerName = broker-a
brokerPermission=6

# a long value continued \\
  on the next line
msgTraceTopicName=A\\
B
"""


async def test_broker_permission_goes_read_only_and_back(cluster: Cluster,
                                                         tmp_path: Path) -> None:
    conf = tmp_path / "broker-a.properties"
    conf.write_text(CONF)
    cluster.broker.config_file = str(conf)
    cc = cluster.client_config()
    addr = cluster.addr
    async with Admin(client_config=cc) as admin, Producer("CfgPG", client_config=cc) as p:
        first = await p.send(Message("CfgT", b"before"))
        assert (await admin.get_broker_config(addr))["brokerPermission"] == "6"

        await admin.update_broker_config(addr, {"brokerPermission": "4"})
        assert (await admin.get_broker_config(addr))["brokerPermission"] == "4"
        # registered before the answer: the route is read-only now
        route = await admin.topic_route("CfgT")
        assert {q.perm for q in route.queue_datas} == {4}
        with pytest.raises(MQBrokerError) as err:
            await p.send(Message("CfgT", b"refused"), queue=first.queue)
        assert err.value.code == ResponseCode.NO_PERMISSION
        async with Producer("CfgPG2", client_config=cc) as fresh:
            with pytest.raises(NoRouteError):  # no writable queue in the route
                await fresh.send(Message("CfgT", b"nowhere"))
        # reads go on
        async with PullConsumer("CfgPull", client_config=cc,
                                consume_from=ConsumeFromWhere.FIRST_OFFSET) as pc:
            result = await pc.pull(first.queue, 0)
            assert [m.body for m in result.messages] == [b"before"]

        text = conf.read_text()
        assert "brokerPermission=4\n" in text and "brokerPermission=6" not in text
        assert text.startswith("# broker-a, written by hand\n")  # the rest as it was
        assert "brokerName = broker-a\n" in text and "msgTraceTopicName=A\\\nB\n" in text

        await admin.update_broker_config(addr, {"brokerPermission": "6"})
        assert {q.perm for q in (await admin.topic_route("CfgT")).queue_datas} == {6}
        again = await p.send(Message("CfgT", b"after"), queue=first.queue)
        assert again.queue_offset == first.queue_offset + 1
        assert "brokerPermission=6\n" in conf.read_text()


async def test_flags_read_per_request_change_at_once(cluster: Cluster) -> None:
    cc = cluster.client_config()
    addr = cluster.addr
    async with Admin(client_config=cc) as admin, Producer("CfgFlagPG", client_config=cc) as p:
        await p.send(Message("CfgAuto1", b"x"))  # auto-created through TBW102
        await admin.update_broker_config(addr, {"autoCreateTopicEnable": "false"})
        assert cluster.broker.bcfg.auto_create_topic_enable is False
        with pytest.raises(MQBrokerError) as err:
            await p.send(Message("CfgAuto2", b"x"), queue=MessageQueue("CfgAuto2", "broker-a", 0))
        assert err.value.code == ResponseCode.TOPIC_NOT_EXIST
        await admin.update_broker_config(addr, {"autoCreateTopicEnable": "true"})
        await p.send(Message("CfgAuto2", b"x"), queue=MessageQueue("CfgAuto2", "broker-a", 0))


async def test_bad_updates_are_refused_with_a_remark(cluster: Cluster) -> None:
    addr = cluster.addr
    async with Admin(client_config=cluster.client_config()) as admin:
        before = await admin.get_broker_config(addr)
        cases = {
            "noSuchKey": "unknown broker config key(s): noSuchKey",
            "brokerName": "brokerName cannot change while the broker runs",
            "brokerPermission": "brokerPermission",
        }
        for key, remark in cases.items():
            value = "abc" if key == "brokerPermission" else "x"
            with pytest.raises(MQBrokerError) as err:
                await admin.update_broker_config(addr, {key: value, "longPollingEnable": "false"})
            assert err.value.code == ResponseCode.SYSTEM_ERROR
            assert remark in (err.value.remark or "")
        # all or nothing: the valid key of each refused update was not applied
        assert await admin.get_broker_config(addr) == before
        assert cluster.broker.config_file is None  # nothing to persist to; still applied:
        await admin.update_broker_config(addr, {"longPollingEnable": "false"})
        assert (await admin.get_broker_config(addr))["longPollingEnable"] == "false"


async def test_cli_update_and_get_broker_config(cluster: Cluster,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    ns = cluster.ns_addr
    code, rows = await run_cli(capsys, "updateBrokerConfig", "-n", ns, "-c", "TestCluster",
                               "-k", "rejectTransactionMessage", "-v", "true", "--json")
    assert code == 0 and rows[0]["updated"] == [cluster.addr]
    code, rows = await run_cli(capsys, "getBrokerConfig", "-n", ns, "-b", cluster.addr,
                               "--json")
    assert code == 0 and rows[0]["rejectTransactionMessage"] == "true"
    code, rows = await run_cli(capsys, "updateBrokerConfig", "-n", ns, "-b", cluster.addr,
                               "-k", "bogusKey", "-v", "1", "--json")
    assert code == 1 and rows[0]["code"] == ResponseCode.SYSTEM_ERROR
    assert "bogusKey" in rows[0]["remark"]
