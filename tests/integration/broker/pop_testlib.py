"""Raw POP frames as Apache's 5.x client sends them, and the receipt handles it builds from the
answers (``MQClientAPIImpl.processPopResponse``), for the broker's POP tests and the POP
failover tests that run a cluster as processes (``sigkill_node``)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

import trio

from rmq_cluster.cluster.protocol import fastjson
from rmq_cluster.cluster.protocol.message import StoredMessage, iter_records
from rmq_cluster.cluster.protocol.pop import (
    PROPERTY_POP_CK,
    ReceiptHandle,
    real_topic,
    retry_flag,
)
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode
from rmq_cluster.deploy.testing import RunningCluster, pid_running

from .conftest import Cluster

#: Broker settings for quick POP tests: the revive scan runs every 100 ms.
POP_PROPS = {"reviveInterval": "100"}


def pop_fields(
    topic: str, group: str, *, queue_id: int = -1, max_nums: int = 32,
    invisible_ms: int = 60_000, poll_ms: int = 0, order: bool = False, init_mode: int = 0,
    exp: str | None = None, born_ms: int | None = None, attempt_id: str | None = None,
) -> dict[str, str]:
    """POP_MESSAGE's extFields (``born_ms``: default, this machine's clock now; ``attempt_id``:
    the 5.x SDKs' attempt of an orderly receive, through the proxy)."""
    ext = {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
        "maxMsgNums": str(max_nums), "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms),
        "bornTime": str(time.time_ns() // 1_000_000 if born_ms is None else born_ms),
        "initMode": str(init_mode), "order": "true" if order else "false",
    }
    if exp is not None:
        ext["exp"], ext["expType"] = exp, "TAG"
    if attempt_id is not None:
        ext["attemptId"] = attempt_id
    return ext


async def pop(
    cluster: Cluster, topic: str, group: str, *, queue_id: int = -1, max_nums: int = 32,
    invisible_ms: int = 60_000, poll_ms: int = 0, order: bool = False, init_mode: int = 0,
    exp: str | None = None, timeout: float = 10.0, attempt_id: str | None = None,
) -> RemotingCommand:
    ext = pop_fields(topic, group, queue_id=queue_id, max_nums=max_nums,
                     invisible_ms=invisible_ms, poll_ms=poll_ms, order=order,
                     init_mode=init_mode, exp=exp, born_ms=cluster.broker.now_ms(),
                     attempt_id=attempt_id)
    return await cluster.call(RequestCode.POP_MESSAGE, ext, timeout=timeout)


def _info(text: str) -> dict[str, list[int]]:
    """``startOffsetInfo`` / ``msgOffsetInfo``: "<retry flag>@<queue>" -> offsets (one item
    per topic and queue: queue 0 of a topic and of its retry topic may both be in an answer)."""
    out: dict[str, list[int]] = {}
    for item in filter(None, (text or "").split(";")):
        flag, qid, values = item.split(" ")
        out[f"{flag}@{qid}"] = [int(v) for v in values.split(",")]
    return out


def receipt_handle(m: StoredMessage, ext: Mapping[str, Any], broker_name: str) -> ReceiptHandle:
    """The receipt handle Apache's client builds for record ``m`` of a pop answer whose
    extFields are ``ext``; a revived record carries its own (``POP_CK``)."""
    if PROPERTY_POP_CK in m.properties:
        return ReceiptHandle.parse(m.properties[PROPERTY_POP_CK])
    flag = retry_flag(m.topic)
    start = _info(str(ext.get("startOffsetInfo", "")))[f"{flag}@{m.queue_id}"][0]
    return ReceiptHandle(start, int(ext["popTime"]), int(ext["invisibleTime"]),
                         int(ext["reviveQid"]), flag, broker_name, m.queue_id, m.queue_offset)


def popped(resp: RemotingCommand, broker_name: str = "broker-a") -> list[StoredMessage]:
    """The messages of a pop answer, each with ``POP_CK`` set as the Java client sets it."""
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    ext = resp.ext_fields
    offsets = _info(ext["msgOffsetInfo"])
    out = []
    for m in iter_records(bytes(resp.body)):
        if PROPERTY_POP_CK not in m.properties:
            key = f"{retry_flag(m.topic)}@{m.queue_id}"
            assert m.queue_offset in offsets[key], (m.queue_offset, offsets)
            m.properties[PROPERTY_POP_CK] = receipt_handle(m, ext, broker_name).encode()
        out.append(m)
    return out


def handle_of(m: StoredMessage) -> ReceiptHandle:
    return ReceiptHandle.parse(m.properties[PROPERTY_POP_CK])


def ack_fields(topic: str, group: str, h: ReceiptHandle) -> dict[str, str]:
    """ACK_MESSAGE's extFields for the message of ``h`` popped from ``topic`` (the topic
    itself or, by the handle's retry flag, its pop retry topic)."""
    return {"consumerGroup": group, "topic": real_topic(topic, group, h.flag),
            "queueId": str(h.queue_id), "extraInfo": h.encode(), "offset": str(h.queue_offset)}


async def ack(cluster: Cluster, m: StoredMessage, group: str) -> RemotingCommand:
    return await cluster.call(RequestCode.ACK_MESSAGE, ack_fields(m.topic, group, handle_of(m)))


async def change_invisible(cluster: Cluster, m: StoredMessage, group: str,
                           invisible_ms: int) -> RemotingCommand:
    ext = {**ack_fields(m.topic, group, handle_of(m)), "invisibleTime": str(invisible_ms)}
    return await cluster.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext)


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


def sigkill_node(cluster: RunningCluster, addr: str) -> None:
    """SIGKILL the node of ``cluster`` serving ``addr`` (by pid) and wait until it is gone."""
    (pid,) = [int(n["pid"]) for n in cluster.nodes if n["addr"] == addr]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while pid_running(pid):
        assert time.monotonic() < deadline, f"pid {pid} outlived SIGKILL"
        time.sleep(0.05)  # the kernel reaps it: poll with a deadline
