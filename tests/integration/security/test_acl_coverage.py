"""ACL coverage end to end: every code that names a topic or group is checked, whatever field
carries it, and reads by offset or id check the topic of the message actually read.

An in-process NameServer + broker with aclEnable=true; requests signed with the user's or the
admin's credentials over real sockets (the client's signing hook).
"""

from __future__ import annotations

from pathlib import Path

from rmq_cluster.client import frames
from rmq_cluster.cluster.acl.signing import Credentials
from rmq_cluster.cluster.acl.validator import ACL_EXCEPTION
from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import decode_offset_msg_id, iter_records
from rmq_cluster.cluster.remoting.client_pool import open_remoting_client
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC
from rmq_cluster.cluster.remoting.codes import ResponseCode
from tests.integration.client.conftest import running_cluster

ADMIN = Credentials("adminKey01", "adminSecret01")
USER = Credentials("userKey01", "userSecret01")

RULES = """
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: adminKey01
    secretKey: adminSecret01
    admin: true
  - accessKey: userKey01
    secretKey: userSecret01
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: ["AclTopic=PUB|SUB"]
    groupPerms: ["Mine=SUB"]
"""


def send_frame(topic: str) -> RemotingCommand:
    return frames.send_message(
        group="PG", topic=topic, queue_id=0, sys_flag=0, born_timestamp=1, flag=0,
        properties="", body=b"secret" if topic == "Secret" else b"open", broker_name="broker-a",
    )


def denied(resp: RemotingCommand, reason: str) -> None:
    assert resp.code == ResponseCode.SYSTEM_ERROR, (resp.code, resp.remark)
    assert resp.remark == f"{ACL_EXCEPTION}: {reason}", resp.remark


def not_denied(resp: RemotingCommand) -> None:
    assert ACL_EXCEPTION not in (resp.remark or ""), resp.remark


async def test_every_name_is_checked_and_reads_check_the_message_topic(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(RULES)
    async with running_cluster(
        tmp_path, aclEnable="true", aclFile=str(acl_file)
    ) as cluster, open_remoting_client() as rc:
        addr = cluster.addr

        async def call(who: Credentials, code: int, ext: dict[str, str],
                       body: bytes = b"") -> RemotingCommand:
            return await rc.invoke(addr, who.sign(RemotingCommand.request(code, ext, body)))

        secret = await rc.invoke(addr, ADMIN.sign(send_frame("Secret")))
        assert secret.code == ResponseCode.SUCCESS, secret.remark
        _host, secret_offset = decode_offset_msg_id(secret.ext_fields["msgId"])
        mine = await rc.invoke(addr, USER.sign(send_frame("AclTopic")))
        assert mine.code == ResponseCode.SUCCESS, mine.remark
        _host, mine_offset = decode_offset_msg_id(mine.ext_fields["msgId"])

        # sends to %RETRY%/%DLQ% topics need SUB on the group the topic names, whatever else
        denied(await rc.invoke(addr, USER.sign(send_frame("%RETRY%Other"))),
               "No default permission for group:Other")
        denied(await rc.invoke(addr, USER.sign(send_frame("%DLQ%Other"))),
               "No default permission for group:Other")
        not_denied(await rc.invoke(addr, USER.sign(send_frame("%RETRY%Mine"))))

        # reading by offset checks the topic of the message actually read
        denied(await call(USER, RC.VIEW_MESSAGE_BY_ID, {"offset": str(secret_offset)}),
               "No default permission for topic:Secret")
        ok = await call(USER, RC.VIEW_MESSAGE_BY_ID, {"offset": str(mine_offset)})
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert [m.body for m in iter_records(bytes(ok.body))] == [b"open"]
        admin_view = await call(ADMIN, RC.VIEW_MESSAGE_BY_ID, {"offset": str(secret_offset)})
        assert admin_view.code == ResponseCode.SUCCESS, admin_view.remark
        # giving back a message read by offset: its topic, not the header's originTopic
        denied(await call(USER, RC.CONSUMER_SEND_MSG_BACK, {
            "group": "Mine", "offset": str(secret_offset), "delayLevel": "0",
            "originTopic": "AclTopic", "originMsgId": "x"}),
            "No default permission for topic:Secret")

        # codes RocketMQ 4.9 leaves unchecked: queries, stats, offsets, locks, relays
        denied(await call(USER, RC.QUERY_MESSAGE, {
            "topic": "Secret", "key": "k", "maxNum": "1", "beginTimestamp": "0",
            "endTimestamp": "1"}), "No default permission for topic:Secret")
        denied(await call(USER, RC.GET_CONSUME_STATS, {"consumerGroup": "Other"}),
               "No default permission for group:Other")
        denied(await call(USER, RC.GET_TOPIC_STATS_INFO, {"topic": "Secret"}),
               "No default permission for topic:Secret")
        denied(await call(USER, RC.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": "Mine", "topic": "Secret", "queueId": "0"}),
            "No default permission for topic:Secret")
        denied(await call(USER, RC.GET_MAX_OFFSET, {"topic": "Secret", "queueId": "0"}),
               "No default permission for topic:Secret")
        denied(await call(USER, RC.INVOKE_BROKER_TO_RESET_OFFSET, {
            "topic": "AclTopic", "group": "Other", "timestamp": "0", "isForce": "false"}),
            "No default permission for group:Other")
        lock = fastjson.dumps({"consumerGroup": "Mine", "clientId": "c", "mqSet": [
            {"topic": "Secret", "brokerName": "broker-a", "queueId": 0}]})
        denied(await call(USER, RC.LOCK_BATCH_MQ, {}, lock),
               "No default permission for topic:Secret")
        hb = fastjson.dumps({"clientID": "c", "producerDataSet": [], "consumerDataSet": [
            {"groupName": "Mine", "subscriptionDataSet": [{"topic": "Secret"}]}]})
        denied(await call(USER, RC.HEART_BEAT, {}, hb), "No default permission for topic:Secret")
        denied(await call(USER, RC.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": "Other", "clientId": "c"}), "No default permission for group:Other")
        # and what the user owns still passes
        ok = await call(USER, RC.GET_MAX_OFFSET, {"topic": "AclTopic", "queueId": "0"})
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        not_denied(await call(USER, RC.GET_CONSUME_STATS, {
            "consumerGroup": "Mine", "topic": "AclTopic"}))
