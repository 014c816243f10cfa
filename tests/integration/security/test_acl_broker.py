"""Plain ACL end to end: an in-process NameServer + broker with aclEnable=true, real sockets.

Denials are checked on the wire (code SYSTEM_ERROR, remark ``...AclException: <reason>``) with
raw remoting calls; the accepted path is our Producer/PushConsumer with credentials; hot
reload is a rewrite of the rules file that takes effect without a restart.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from rmq_cluster.client import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    SendStatus,
    frames,
)
from rmq_cluster.client.admin import Admin
from rmq_cluster.client.errors import MQBrokerError
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION
from rmq_cluster.cluster.metrics import parse_exposition, sample_value
from rmq_cluster.cluster.metrics_server import fetch_metrics
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from tests.integration.client.conftest import WAIT_S, running_cluster

ADMIN = Credentials("adminKey01", "adminSecret01")
USER = Credentials("userKey01", "userSecret01")


def rules(global_white: str = "10.250.250.*", user_topics: str = '"AclTopic=PUB|SUB"') -> str:
    return f"""
globalWhiteRemoteAddresses:
  - {global_white}
accounts:
  - accessKey: adminKey01
    secretKey: adminSecret01
    admin: true
  - accessKey: userKey01
    secretKey: userSecret01
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [{user_topics}, "ReadOnly=SUB"]
"""


def write_rules(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a new inode: the watcher sees the change even within one mtime tick


def send_frame(topic: str) -> RemotingCommand:
    return frames.send_message(
        group="PG", topic=topic, queue_id=0, sys_flag=0, born_timestamp=1, flag=0,
        properties="", body=b"hello", broker_name="broker-a",
    )


def assert_denied(resp: RemotingCommand, reason: str) -> None:
    assert resp.code == ResponseCode.SYSTEM_ERROR, (resp.code, resp.remark)
    assert resp.remark == f"{ACL_EXCEPTION}: {reason}", resp.remark


async def test_acl_denials_and_accepts_on_the_wire(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_rules(acl_file, rules())
    async with running_cluster(
        tmp_path, aclEnable="true", aclFile=str(acl_file), metricsPort="0"
    ) as cluster, open_remoting_client() as rc:
        broker = cluster.broker
        addr = cluster.addr
        get_max = RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": "AclTopic", "queueId": "0"}
        )
        # unsigned, from an address outside the global white list
        assert_denied(await rc.invoke(addr, get_max), "No accessKey is configured")
        # wrong secret
        bad = Credentials("userKey01", "not-the-secret").sign(send_frame("AclTopic"))
        assert_denied(await rc.invoke(addr, bad), "Check signature failed for accessKey=userKey01")
        # unknown account
        who = Credentials("nobody-at-all", "userSecret01").sign(send_frame("AclTopic"))
        assert_denied(await rc.invoke(addr, who), "No acl config for nobody-at-all")
        # right secret, no permission: SUB only, and a topic left at the DENY default
        assert_denied(await rc.invoke(addr, USER.sign(send_frame("ReadOnly"))),
                      "No default permission for topic:ReadOnly")
        assert_denied(await rc.invoke(addr, USER.sign(send_frame("Elsewhere"))),
                      "No default permission for topic:Elsewhere")
        # admin operation by a non-admin
        create = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {"topic": "NewTopic", "defaultTopic": "TBW102", "readQueueNums": "2",
             "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG"},
        )
        assert_denied(await rc.invoke(addr, USER.sign(create)),
                      "Need admin permission for request code=17, but accessKey=userKey01 is not")
        assert broker.acl is not None and broker.acl.denials == 6
        assert broker.topics.select("NewTopic") is None
        # the right ones are accepted: admin creates the topic, the user sends to its topic
        ok = await rc.invoke(addr, ADMIN.sign(create))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert broker.topics.select("NewTopic") is not None
        sent = await rc.invoke(addr, USER.sign(send_frame("AclTopic")))
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert broker.acl.denials == 6
        # denials are on /metrics
        assert broker.metrics_address is not None
        text = await trio.to_thread.run_sync(
            fetch_metrics, f"127.0.0.1:{broker.metrics_address[1]}"
        )
        assert sample_value(parse_exposition(text), "rmq_acl_denials") == 6


async def test_client_with_credentials_round_trips(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_rules(acl_file, rules())
    async with running_cluster(tmp_path, aclEnable="true", aclFile=str(acl_file)) as cluster:
        cc = cluster.client_config()
        got: list[bytes] = []
        done = trio.Event()

        def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
            got.extend(m.body for m in msgs)
            if len(got) >= 5:
                done.set()
            return ConsumeResult.SUCCESS

        async with Producer("AclPG", client_config=cc, access_key=USER.access_key,
                            secret_key=USER.secret_key) as producer:
            for i in range(5):
                result = await producer.send(Message("AclTopic", b"m%d" % i))
                assert result.status is SendStatus.SEND_OK
            consumer = PushConsumer("AclGroup", listener=listener, client_config=cc,
                                    access_key=USER.access_key, secret_key=USER.secret_key)
            consumer.subscribe("AclTopic")
            async with consumer:
                with trio.fail_after(WAIT_S):
                    await done.wait()
        assert sorted(got) == [b"m%d" % i for i in range(5)]
        # the same producer without credentials is refused by the broker
        async with Producer("AclPG2", client_config=cc) as anonymous:
            try:
                await anonymous.send(Message("AclTopic", b"x"))
            except MQBrokerError as exc:
                assert exc.code == ResponseCode.SYSTEM_ERROR
                assert "No accessKey is configured" in (exc.remark or "")
            else:
                raise AssertionError("an unsigned send was accepted")
        # admin through the Admin client
        async with Admin(client_config=cc, access_key=ADMIN.access_key,
                         secret_key=ADMIN.secret_key) as admin:
            await admin.update_topic("AdminMade", broker_addr=cluster.addr)
        assert cluster.broker.topics.select("AdminMade") is not None


async def test_hot_reload_without_restart(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    write_rules(acl_file, rules())
    async with running_cluster(
        tmp_path, aclEnable="true", aclFile=str(acl_file)
    ) as cluster, open_remoting_client() as rc:
        guard = cluster.broker.acl
        assert guard is not None
        addr = cluster.addr
        assert_denied(await rc.invoke(addr, USER.sign(send_frame("Later"))),
                      "No default permission for topic:Later")
        unsigned = send_frame("AclTopic")
        assert_denied(await rc.invoke(addr, unsigned), "No accessKey is configured")
        # grant the user "Later" and white-list this host
        reloaded = guard.reloaded
        write_rules(acl_file, rules(global_white="127.0.0.*", user_topics='"Later=PUB"'))
        with trio.fail_after(WAIT_S):
            await reloaded.wait()
        assert guard.reloads == 1
        resp = await rc.invoke(addr, USER.sign(send_frame("Later")))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        resp = await rc.invoke(addr, unsigned)  # white-listed now: no signature needed
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # a broken edit keeps the previous rules
        reloads = guard.reloads
        examined = guard.examined
        write_rules(acl_file, "accounts: [{accessKey: x}]")
        with trio.fail_after(WAIT_S):
            await examined.wait()
        assert guard.reloads == reloads
        resp = await rc.invoke(addr, USER.sign(send_frame("Later")))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
