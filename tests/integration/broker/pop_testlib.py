"""Raw POP frames as Apache's 5.x client sends them, and the receipt handles it builds from the
answers (``MQClientAPIImpl.processPopResponse``), for the broker's POP tests."""

from __future__ import annotations

from typing import Any

import trio

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import StoredMessage, iter_records
from rmq_cluster.cluster.protocol.pop import (
    PROPERTY_POP_CK,
    ReceiptHandle,
    retry_flag,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import Cluster

#: Broker settings for quick POP tests: the revive scan runs every 100 ms.
POP_PROPS = {"reviveInterval": "100"}


async def pop(
    cluster: Cluster, topic: str, group: str, *, queue_id: int = -1, max_nums: int = 32,
    invisible_ms: int = 60_000, poll_ms: int = 0, order: bool = False, init_mode: int = 0,
    exp: str | None = None, timeout: float = 10.0,
) -> RemotingCommand:
    ext: dict[str, Any] = {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
        "maxMsgNums": str(max_nums), "invisibleTime": str(invisible_ms),
        "pollTime": str(poll_ms), "bornTime": str(cluster.broker.now_ms()),
        "initMode": str(init_mode), "order": "true" if order else "false",
    }
    if exp is not None:
        ext["exp"], ext["expType"] = exp, "TAG"
    return await cluster.call(RequestCode.POP_MESSAGE, ext, timeout=timeout)


def _info(text: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in filter(None, (text or "").split(";")):
        flag, qid, values = item.split(" ")
        out[f"{flag}@{qid}"] = [int(v) for v in values.split(",")]
    return out


def popped(resp: RemotingCommand, broker_name: str = "broker-a") -> list[StoredMessage]:
    """The messages of a pop answer, each with ``POP_CK`` set as the Java client sets it."""
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    ext = resp.ext_fields
    starts, offsets = _info(ext["startOffsetInfo"]), _info(ext["msgOffsetInfo"])
    out = []
    for m in iter_records(bytes(resp.body)):
        if PROPERTY_POP_CK not in m.properties:
            key = f"{retry_flag(m.topic)}@{m.queue_id}"
            assert m.queue_offset in offsets[key], (m.queue_offset, offsets)
            handle = ReceiptHandle(
                starts[key][0], int(ext["popTime"]), int(ext["invisibleTime"]),
                int(ext["reviveQid"]), retry_flag(m.topic), broker_name, m.queue_id,
                m.queue_offset,
            )
            m.properties[PROPERTY_POP_CK] = handle.encode()
        out.append(m)
    return out


def handle_of(m: StoredMessage) -> ReceiptHandle:
    return ReceiptHandle.parse(m.properties[PROPERTY_POP_CK])


def _real_topic(m: StoredMessage, group: str) -> str:
    h = handle_of(m)
    return m.topic if h.flag == "0" else f"%RETRY%{group}_{m.topic}"


async def ack(cluster: Cluster, m: StoredMessage, group: str) -> RemotingCommand:
    h = handle_of(m)
    return await cluster.call(RequestCode.ACK_MESSAGE, {
        "consumerGroup": group, "topic": _real_topic(m, group), "queueId": str(h.queue_id),
        "extraInfo": h.encode(), "offset": str(h.queue_offset),
    })


async def change_invisible(cluster: Cluster, m: StoredMessage, group: str,
                           invisible_ms: int) -> RemotingCommand:
    h = handle_of(m)
    return await cluster.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {
        "consumerGroup": group, "topic": _real_topic(m, group), "queueId": str(h.queue_id),
        "extraInfo": h.encode(), "offset": str(h.queue_offset),
        "invisibleTime": str(invisible_ms),
    })


def with_new_handle(m: StoredMessage, resp: RemotingCommand) -> StoredMessage:
    """The handle the Java client builds from a CHANGE_MESSAGE_INVISIBLETIME answer."""
    h = handle_of(m)
    ext = resp.ext_fields
    new = ReceiptHandle(h.queue_offset, int(ext["popTime"]), int(ext["invisibleTime"]),
                        int(ext["reviveQid"]), h.flag, h.broker_name, h.queue_id,
                        h.queue_offset)
    m.properties[PROPERTY_POP_CK] = new.encode()
    return m


async def pop_until(cluster: Cluster, topic: str, group: str, want: int, *,
                    deadline_s: float = 15.0, **kw: Any) -> list[StoredMessage]:
    """Pop (long polling) until ``want`` messages came back or the deadline passes."""
    got: list[StoredMessage] = []
    with trio.move_on_after(deadline_s):
        while len(got) < want:
            resp = await pop(cluster, topic, group, poll_ms=1000, **kw)
            if resp.code == ResponseCode.SUCCESS:
                got += popped(resp)
    return got


async def set_group(cluster: Cluster, group: str, **fields: Any) -> None:
    body = {"groupName": group, "consumeEnable": True, "retryQueueNums": 1,
            "retryMaxTimes": 16, **fields}
    resp = await cluster.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                              fastjson.dumps(body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
