"""What one single send costs the broker's event loop, counted (issue 32's last point).

A SEND_MESSAGE_V2 of a known topic, through the live broker's own ``SendProcessor.process``
over its open store (append, the inline dispatch into the ConsumeQueue, the arrival hooks, the
answer): the Python functions it calls, counted with a tracer. Counts do not move with the
machine's load, so a budget holds where a timing would not; ``bench/send_counts.py --case
single`` is the same measure over a whole broker process. The budget is this tree's count: a
change that adds a call per send must say so here (and in bench/README.md's issue 32 section).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import trio

from rmq_cluster.broker.processors.send import SendProcessor
from rmq_cluster.cluster.protocol.message import MessageConst, encode_properties
from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode, ResponseCode

from .conftest import WAIT_S, Cluster, ok, running_cluster

#: Python calls one single send may make inside ``SendProcessor.process`` (itself excluded)
SEND_CALL_BUDGET = 26
#: Python calls a send to a topic declaring ``message.type`` may make beyond a plain topic's
#: (the remembered declared type, the message's type, their comparison)
FIFO_EXTRA_CALLS = 3
#: Python calls its dispatch (one reput round of that one record) may make
DISPATCH_CALL_BUDGET = 29
#: delegations that once sat on every send and must not come back
NOT_PER_SEND = (
    "MessageStore.append_marked",  # (the backend's bound method is the store's attribute)
    "FileCommitLog.append_message",  # (a single put is written out in append_marked)
    "SendProcessor._target",  # (a known topic and queue are checked in prepare)
    "PermName.is_writeable",
    "PopPolling.notify",  # (asked only when a pop is parked on the topic)
    "_all_str",  # (written out in RemotingCommand.response)
    "PutMessageStatus.stored",  # (PUT_OK by identity first)
)


def _create_ext(topic: str, **more: str) -> dict[str, str]:
    return {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
            "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG", **more}


@attrs.frozen
class _Peer:
    peer: str = "127.0.0.1:30001"


def _request(topic: str, opaque: int, **more: str) -> RemotingCommand:
    props = {MessageConst.PROPERTY_TAGS: "t", "UNIQ_KEY": f"7F00000100002A9F0000000000{opaque:06d}"}
    props.update(more)
    ext = {
        "a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0",
        "g": "1700000000000", "h": "0", "i": encode_properties(props).decode(), "j": "0",
        "k": "false", "m": "false",
    }  # fmt: skip
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x" * 1024)
    return attrs.evolve(cmd, opaque=opaque)


def _calls_of(fn: Any, *args: Any) -> tuple[Any, Counter[str]]:
    """What ``fn(*args)`` returns and the Python functions it called, by name (``fn`` not
    counted)."""
    calls: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            calls[frame.f_code.co_qualname] += 1

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        returned = fn(*args)
    finally:
        sys.settrace(previous)
    calls[fn.__qualname__] -= 1
    return returned, +calls


async def _one_send(cluster: Cluster, topic: str, **props: str) -> tuple[int, Counter[str]]:
    """A send to ``topic`` (queue 1) once the caches are warm and the reput has caught up, as
    at a steady load: the Python calls of its ``process``; the end offset before it."""
    store = cluster.broker.store
    process = SendProcessor(cluster.broker).process
    for opaque in range(1, 4):  # (the first sends fill the caches: topic, peer, queue file)
        warm = process(_Peer(), _request(topic, opaque, **props))
        assert isinstance(warm, RemotingCommand) and warm.code == ResponseCode.SUCCESS
    # the queue's file made (a worker makes it) and the reput caught up: the next dispatch
    # round is the next send's record alone
    with trio.fail_after(WAIT_S):
        while (cq := store.cqs.find(topic, 1)) is None or cq.max_offset_in_queue < 3:  # noqa: ASYNC110 - the store's state itself
            await trio.sleep(0.01)
    end = store.commitlog.max_offset
    answer, calls = _calls_of(process, _Peer(), _request(topic, 9, **props))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert store.commitlog.max_offset > end
    return end, calls


async def test_a_single_send_stays_within_its_call_budget(tmp_path: Path) -> None:
    async with running_cluster(tmp_path) as cluster:
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_ext("BudgetT")))
        _end, calls = await _one_send(cluster, "BudgetT")
        # its dispatch, as the reput task runs it next: the ConsumeQueue unit, the arrival hooks
        store = cluster.broker.store
        dispatched, dispatch_calls = _calls_of(store.dispatch)
        cq = store.cqs.find("BudgetT", 1)
        assert dispatched == 1 and cq is not None and cq.max_offset_in_queue == 4
        listing = ", ".join(f"{name} {n}" for name, n in (calls + dispatch_calls).most_common())
        assert not [name for name in NOT_PER_SEND if name in calls + dispatch_calls], listing
        assert sum(calls.values()) <= SEND_CALL_BUDGET, listing
        assert sum(dispatch_calls.values()) <= DISPATCH_CALL_BUDGET, listing


async def test_a_send_to_a_typed_topic_checks_its_type_in_few_calls(tmp_path: Path) -> None:
    """A 5.x topic declaring ``message.type=FIFO``: the type it declares is looked up, not
    parsed again per send; what the message is, read from its properties in one function.
    Against a send of the same message to a plain topic of the same broker."""
    async with running_cluster(tmp_path) as cluster:
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, _create_ext("PlainT")))
        ext = _create_ext("FifoT", attributes="+message.type=FIFO")
        ok(await cluster.call(RequestCode.UPDATE_AND_CREATE_TOPIC, ext))
        fifo = {"__SHARDINGKEY": "order-1"}
        _end, plain = await _one_send(cluster, "PlainT", **fifo)
        _end, typed = await _one_send(cluster, "FifoT", **fifo)
        extra = sum(typed.values()) - sum(plain.values())
        assert extra <= FIFO_EXTRA_CALLS, typed - plain
        # (and the check still refuses a message of another type)
        process = SendProcessor(cluster.broker).process
        refused = process(_Peer(), _request("FifoT", 10))
        assert isinstance(refused, RemotingCommand)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
