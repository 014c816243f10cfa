"""Request frames as a Java 4.9.7 client builds them (``MQClientAPIImpl``). Pure.

Every builder returns a ``RemotingCommand`` with language JAVA, version 407 and the header keys
and string values Java's reflection writes (nulls omitted; booleans "true"/"false").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from ..cluster.protocol import fastjson
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import SERIALIZE_JSON, RequestCode
from ..cluster.remoting.headers import SEND_V2_LETTER
from .config import (
    AUTO_CREATE_TOPIC_KEY,
    DEFAULT_TOPIC_QUEUE_NUMS,
    LANGUAGE,
    VERSION,
)
from .model import MessageQueue

RC = RequestCode

#: PullSysFlag bits.
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_CLASS_FILTER = 0x8
_DEFAULT_QUEUE_NUMS_STR = str(DEFAULT_TOPIC_QUEUE_NUMS)


_FIELDS = tuple(f.name for f in attrs.fields(RemotingCommand))
_FAST_OK = _FIELDS == (
    "code", "language", "version", "opaque", "flag", "remark", "ext_fields", "body",
    "serialize_type",
)
_new = object.__new__
_set = object.__setattr__


def _fast_request(code: int, ext: dict[str, str], body: bytes) -> RemotingCommand:
    """A request whose extFields are already all strings (the per-message send path): skips
    the converter's copy. Falls back to the constructor if RemotingCommand's fields change."""
    if not _FAST_OK:
        return request(code, ext, body)
    cmd = _new(RemotingCommand)
    _set(cmd, "code", code)
    _set(cmd, "language", LANGUAGE)
    _set(cmd, "version", VERSION)
    _set(cmd, "opaque", 0)
    _set(cmd, "flag", 0)
    _set(cmd, "remark", None)
    _set(cmd, "ext_fields", ext)
    _set(cmd, "body", body)
    _set(cmd, "serialize_type", SERIALIZE_JSON)
    return cmd


def request(
    code: int, ext: dict[str, Any] | None = None, body: bytes = b"", *, oneway: bool = False
) -> RemotingCommand:
    return RemotingCommand.request(
        code, ext, body, oneway=oneway, language=LANGUAGE, version=VERSION
    )


def pull_sys_flag(commit_offset: bool, suspend: bool, subscription: bool) -> int:
    return (
        (PULL_COMMIT_OFFSET if commit_offset else 0)
        | (PULL_SUSPEND if suspend else 0)
        | (PULL_SUBSCRIPTION if subscription else 0)
    )


# SEND_MESSAGE_V2's letters (``SEND_V2_LETTER``), one constant each for the per-message path
(
    _V2_GROUP, _V2_TOPIC, _V2_DEFAULT_TOPIC, _V2_QUEUE_NUMS, _V2_QUEUE_ID, _V2_SYS_FLAG, _V2_BORN,
    _V2_FLAG, _V2_PROPERTIES, _V2_RECONSUME_TIMES, _V2_UNIT_MODE, _V2_MAX_RECONSUME_TIMES,
    _V2_BATCH, _V2_BROKER_NAME,
) = (SEND_V2_LETTER[name] for name in (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes",
    "batch", "brokerName",
))  # fmt: skip


def send_message(
    *,
    group: str,
    topic: str,
    queue_id: int,
    sys_flag: int,
    born_timestamp: int,
    flag: int,
    properties: str,
    body: bytes,
    broker_name: str,
    batch: bool = False,
    reconsume_times: int = 0,
    max_reconsume_times: int | None = None,
    unit_mode: bool = False,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (310), or SEND_BATCH_MESSAGE (320) for a batch; one-letter header."""
    ext: dict[str, str] = {  # strings already: this is the per-message path
        _V2_GROUP: group,
        _V2_TOPIC: topic,
        _V2_DEFAULT_TOPIC: AUTO_CREATE_TOPIC_KEY,
        _V2_QUEUE_NUMS: _DEFAULT_QUEUE_NUMS_STR,
        _V2_QUEUE_ID: str(queue_id),
        _V2_SYS_FLAG: str(sys_flag),
        _V2_BORN: str(born_timestamp),
        _V2_FLAG: str(flag),
        _V2_PROPERTIES: properties,
        _V2_RECONSUME_TIMES: str(reconsume_times),
        _V2_UNIT_MODE: "true" if unit_mode else "false",
        _V2_BATCH: "true" if batch else "false",
        _V2_BROKER_NAME: broker_name,
    }
    if max_reconsume_times is not None:
        ext[_V2_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    code = RC.SEND_BATCH_MESSAGE if batch else RC.SEND_MESSAGE_V2
    return _fast_request(int(code), ext, body)


def pull_message(
    *,
    group: str,
    mq: MessageQueue,
    offset: int,
    max_nums: int,
    sys_flag: int,
    commit_offset: int,
    suspend_ms: int,
    subscription: str | None,
    sub_version: int,
    expression_type: str = "TAG",
) -> RemotingCommand:
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": mq.queue_id,
        "queueOffset": offset,
        "maxMsgNums": max_nums,
        "sysFlag": sys_flag,
        "commitOffset": commit_offset,
        "suspendTimeoutMillis": suspend_ms,
        "subscription": subscription,
        "subVersion": sub_version,
        "expressionType": expression_type,
        "bname": mq.broker_name,
    }
    return request(RC.PULL_MESSAGE, ext)


def heartbeat(body: bytes) -> RemotingCommand:
    return request(RC.HEART_BEAT, None, body)


def get_route(topic: str) -> RemotingCommand:
    return request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def unregister_client(
    client_id: str, producer_group: str | None, consumer_group: str | None
) -> RemotingCommand:
    ext = {"clientID": client_id, "producerGroup": producer_group, "consumerGroup": consumer_group}
    return request(RC.UNREGISTER_CLIENT, ext)


def query_consumer_offset(group: str, mq: MessageQueue) -> RemotingCommand:
    ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id}
    return request(RC.QUERY_CONSUMER_OFFSET, ext)


def update_consumer_offset(
    group: str, mq: MessageQueue, offset: int, *, oneway: bool = True
) -> RemotingCommand:
    ext = {
        "consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "commitOffset": offset,
    }
    return request(RC.UPDATE_CONSUMER_OFFSET, ext, oneway=oneway)


def get_max_offset(mq: MessageQueue) -> RemotingCommand:
    return request(RC.GET_MAX_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})


def get_min_offset(mq: MessageQueue) -> RemotingCommand:
    return request(RC.GET_MIN_OFFSET, {"topic": mq.topic, "queueId": mq.queue_id})


def search_offset(mq: MessageQueue, timestamp_ms: int) -> RemotingCommand:
    ext = {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": timestamp_ms}
    return request(RC.SEARCH_OFFSET_BY_TIMESTAMP, ext)


def get_consumer_list(group: str) -> RemotingCommand:
    return request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


def send_back(
    *,
    commitlog_offset: int,
    group: str,
    delay_level: int,
    origin_msg_id: str,
    origin_topic: str,
    max_reconsume_times: int,
) -> RemotingCommand:
    ext = {
        "offset": commitlog_offset,
        "group": group,
        "delayLevel": delay_level,
        "originMsgId": origin_msg_id,
        "originTopic": origin_topic,
        "unitMode": False,
        "maxReconsumeTimes": max_reconsume_times,
    }
    return request(RC.CONSUMER_SEND_MSG_BACK, ext)


def end_transaction(
    *,
    group: str,
    tran_state_table_offset: int,
    commitlog_offset: int,
    commit_or_rollback: int,
    from_check: bool,
    msg_id: str,
    transaction_id: str | None,
    remark: str | None = None,
) -> RemotingCommand:
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": tran_state_table_offset,
        "commitLogOffset": commitlog_offset,
        "commitOrRollback": commit_or_rollback,
        "fromTransactionCheck": from_check,
        "msgId": msg_id,
        "transactionId": transaction_id,
    }
    cmd = request(RC.END_TRANSACTION, ext, oneway=True)
    if remark is not None:
        from attrs import evolve

        cmd = evolve(cmd, remark=remark)
    return cmd


def lock_body(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> bytes:
    data = {
        "clientId": client_id,
        "consumerGroup": group,
        "mqSet": [mq.to_json_obj() for mq in sorted(mqs)],
    }
    return fastjson.dumps(data)


def lock_batch(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> RemotingCommand:
    return request(RC.LOCK_BATCH_MQ, None, lock_body(group, client_id, mqs))


def unlock_batch(group: str, client_id: str, mqs: Iterable[MessageQueue]) -> RemotingCommand:
    return request(RC.UNLOCK_BATCH_MQ, None, lock_body(group, client_id, mqs), oneway=True)
