"""The POP and timer scenario: RocketMQ 5 requests replayed to Apache's 5.3.1 broker and to ours.

The same ``scenario.Step`` machinery as the 4.x differential (``scenario.replay``): raw remoting
requests, as Apache's 5.x client sends them (``MQClientAPIImpl.popMessageAsync`` / ``ackMessage``
/ ``changeInvisibleTimeAsync``), the answers flattened field by field. The receipt handle of each
popped message (``extraInfo``) is built from the pop answer the way Apache's client builds it
(``startOffsetInfo`` / ``msgOffsetInfo`` plus the answer's popTime, invisibleTime and reviveQid),
so an ack or change-invisible carries what a real client would send.

What it walks through, on one queue each so the offsets are deterministic:

* pop of two of three messages, ack of the first (twice), change-invisible of the second to
  1 s, pop of the third and its ack;
* the second coming back through the pop retry topic once its invisible time ran out (retry
  topic name, reconsumeTimes, properties), then its fate when it expires again with the group's
  ``retryMaxTimes=1`` (retry again, or ``%DLQ%``);
* orderly pop of a FIFO topic: a batch, the queue blocked while it is in flight, its acks, the
  next batch (``orderCountInfo``);
* an orderly pop retried with its attempt id (a receive whose answer was lost): the same batch,
  the same counts; another attempt blocked meanwhile, then, once the batch turned visible,
  counting each message once more, and its own retry keeping that;
* a timer message (``TIMER_DELAY_SEC``) popped once it is due (its properties).

Wall-clock values (popTime, first pop time, timer times) differ by nature: ``ALLOWED``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from rmq_cluster.cluster.remoting.codec import RemotingCommand
from rmq_cluster.cluster.remoting.codes import RequestCode as RC

from .scenario import Ctx, Step, send_v2

GROUP: Final = "PopOracleG"
ORDER_GROUP: Final = "PopOracleOrderG"
TIMER_GROUP: Final = "PopOracleTimerG"
ATTEMPT_GROUP: Final = "PopOracleAttemptG"
TOPIC: Final = "PopOracleT"
FIFO_TOPIC: Final = "PopOracleFifo"
TIMER_TOPIC: Final = "PopOracleTimer"
ATTEMPT_TOPIC: Final = "PopOracleFifoAttempt"
BROKER_NAME: Final = "broker-a"  # oracle.broker_conf
#: The invisible time of a pop that is acked in the scenario (never runs out during it).
LONG_INVISIBLE_MS: Final = 60_000
#: The invisible time of a message that must come back through the retry topic.
SHORT_INVISIBLE_MS: Final = 1_000
#: How long a revive or a timer may take on either broker (Apache delays its checkpoints
#: through its timer wheel and revives in rounds: ~5-10 s on 2 cores).
REVIVE_WAIT_S: Final = 45.0
#: How long ``dlq_max_offset`` waits for the dead letter. It runs BEFORE ``pop_retry_again``:
#: Apache's broker never writes one and waits it all, and meanwhile its second expiry brings
#: the message back, so Apache has both waits (DLQ_WAIT_S + RETRY_AGAIN_WAIT_S) for that, not
#: one: it takes ~4 s, but its first revive 5-10 s on 2 cores, so on a loaded machine it could
#: outlast the 12 s it had when it came first (the deliberate deviation then goes unobserved).
#: Ours writes the dead letter at the revive after the second expiry (a second or two).
DLQ_WAIT_S: Final = 12.0
#: The second expiry: Apache's message is back (mostly long since); ours dead-lettered it, so
#: this step waits its whole time on ours (deviations.py), kept short.
RETRY_AGAIN_WAIT_S: Final = 10.0


def _now_ms() -> int:
    return int(time.time() * 1000)


def create_topic(topic: str, attributes: str = "") -> dict[str, str]:
    ext = {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
    }
    if attributes:
        ext["attributes"] = attributes
    return ext


def group_body(group: str, retry_max_times: int) -> bytes:
    return orjson.dumps({
        "groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": retry_max_times,
        "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
    })


def pop(group: str, topic: str, nums: int, invisible_ms: int, *, order: bool = False,
        poll_ms: int = 0, attempt_id: str | None = None) -> Callable[[Ctx], dict[str, str]]:
    def ext(_ctx: Ctx) -> dict[str, str]:
        fields = {
            "consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(nums),
            "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms),
            "bornTime": str(_now_ms()), "initMode": "0", "expType": "TAG", "exp": "*",
            "order": "true" if order else "false",
        }
        if attempt_id is not None:
            fields["attemptId"] = attempt_id
        return fields
    return ext


def _offset_items(text: str) -> list[tuple[str, int, list[int]]]:
    """``startOffsetInfo`` / ``msgOffsetInfo``: ``flag queueId offsets;...``."""
    out = []
    for item in filter(None, text.split(";")):
        flag, qid, offsets = item.split(" ")
        out.append((flag, int(qid), [int(o) for o in offsets.split(",")]))
    return out


def save_pop(key: str) -> Callable[[Ctx, RemotingCommand], None]:
    """Remember each popped message's receipt handle (``ctx[key][i]``), as the client builds
    it: ``ckQueueOffset popTime invisibleTime reviveQid flag brokerName queueId offset``."""
    def save(ctx: Ctx, resp: RemotingCommand) -> None:
        ext = resp.ext_fields
        if resp.code != 0 or "msgOffsetInfo" not in ext:
            return
        starts = {(f, q): offs[0] for f, q, offs in _offset_items(ext["startOffsetInfo"])}
        handles = []
        for flag, qid, offsets in _offset_items(ext["msgOffsetInfo"]):
            for offset in offsets:
                handles.append({
                    "queueId": str(qid), "offset": str(offset),
                    "extraInfo": " ".join(str(v) for v in (
                        starts[(flag, qid)], ext["popTime"], ext["invisibleTime"],
                        ext["reviveQid"], flag, BROKER_NAME, qid, offset)),
                })
        ctx[key] = handles
    return save


def ack(group: str, topic: str, key: str, index: int) -> Callable[[Ctx], dict[str, str]]:
    def ext(ctx: Ctx) -> dict[str, str]:
        return {"consumerGroup": group, "topic": topic, **ctx[key][index]}
    return ext


def change_invisible(group: str, topic: str, key: str, index: int,
                     invisible_ms: int) -> Callable[[Ctx], dict[str, str]]:
    def ext(ctx: Ctx) -> dict[str, str]:
        return {"consumerGroup": group, "topic": topic, "invisibleTime": str(invisible_ms),
                **ctx[key][index]}
    return ext


def _records(view: Mapping[str, Any]) -> bool:
    return any(k.startswith("body[") for k in view)


def _offset_is(n: int) -> Callable[[Mapping[str, Any]], bool]:
    return lambda view: view.get("ext.offset") == str(n)


def _sends(topic: str, first: int, count: int,
           extra: Mapping[str, str] | None = None) -> tuple[Step, ...]:
    return tuple(
        Step(f"send_{topic}_{n}", "broker", RC.SEND_MESSAGE_V2,
             send_v2(topic, 0, n, extra=extra), f"pop oracle message {n}".encode())
        for n in range(first, first + count)
    )


SETUP: Final[tuple[Step, ...]] = (
    Step("create_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC, create_topic(TOPIC)),
    Step("create_fifo_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         create_topic(FIFO_TOPIC, "+message.type=FIFO")),
    Step("create_timer_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         create_topic(TIMER_TOPIC, "+message.type=DELAY")),
    Step("create_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=group_body(GROUP, 1), doc="retryMaxTimes=1: the second expiry is the last"),
    Step("create_order_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=group_body(ORDER_GROUP, 16)),
    Step("create_timer_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=group_body(TIMER_GROUP, 16)),
    Step("create_attempt_topic", "broker", RC.UPDATE_AND_CREATE_TOPIC,
         create_topic(ATTEMPT_TOPIC, "+message.type=FIFO")),
    Step("create_attempt_group", "broker", RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
         body=group_body(ATTEMPT_GROUP, 16)),
)

POP_STEPS: Final[tuple[Step, ...]] = (
    *_sends(TOPIC, 100, 3),
    Step("wait_dispatched", "broker", RC.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"},
         until=_offset_is(3)),
    Step("pop_two", "broker", RC.POP_MESSAGE, pop(GROUP, TOPIC, 2, LONG_INVISIBLE_MS),
         body_kind="records", save=save_pop("p1"),
         doc="two of three: startOffsetInfo, msgOffsetInfo, restNum, the records"),
    Step("ack_first", "broker", RC.ACK_MESSAGE, ack(GROUP, TOPIC, "p1", 0)),
    Step("ack_first_again", "broker", RC.ACK_MESSAGE, ack(GROUP, TOPIC, "p1", 0),
         doc="a duplicate ack"),
    Step("change_invisible_second", "broker", RC.CHANGE_MESSAGE_INVISIBLETIME,
         change_invisible(GROUP, TOPIC, "p1", 1, SHORT_INVISIBLE_MS),
         doc="the second comes back in 1 s (through the retry topic)"),
    Step("pop_third", "broker", RC.POP_MESSAGE, pop(GROUP, TOPIC, 2, LONG_INVISIBLE_MS),
         body_kind="records", save=save_pop("p2"), doc="only the third is left"),
    Step("ack_third", "broker", RC.ACK_MESSAGE, ack(GROUP, TOPIC, "p2", 0)),
    Step("ack_bad_extra_info", "broker", RC.ACK_MESSAGE,
         {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "offset": "0",
          "extraInfo": "not a receipt handle"}),
    Step("pop_retry", "broker", RC.POP_MESSAGE, pop(GROUP, TOPIC, 2, SHORT_INVISIBLE_MS),
         body_kind="records", save=save_pop("p3"), until=_records, eventual_s=REVIVE_WAIT_S,
         retry_s=0.5,
         doc="the second, expired: retry topic name, reconsumeTimes, properties; it is left "
             "to expire again"),
    Step("dlq_max_offset", "broker", RC.GET_MAX_OFFSET,
         {"topic": f"%DLQ%{GROUP}", "queueId": "0"}, until=_offset_is(1),
         eventual_s=DLQ_WAIT_S, retry_s=0.5,
         doc="whether the broker dead-lettered it after its second expiry (a broker that "
             "does is given the time its revive takes on a loaded machine; one that does not "
             "waits it all, while its second expiry brings the message back)"),
    Step("pop_retry_again", "broker", RC.POP_MESSAGE, pop(GROUP, TOPIC, 2, LONG_INVISIBLE_MS),
         body_kind="records", until=_records, eventual_s=RETRY_AGAIN_WAIT_S, retry_s=0.5,
         doc="after its second expiry with retryMaxTimes=1: back again, or dead-lettered"),
)

ORDER_STEPS: Final[tuple[Step, ...]] = (
    *_sends(FIFO_TOPIC, 200, 3, {"__SHARDINGKEY": "g1"}),
    Step("wait_fifo_dispatched", "broker", RC.GET_MAX_OFFSET,
         {"topic": FIFO_TOPIC, "queueId": "0"}, until=_offset_is(3)),
    Step("pop_order", "broker", RC.POP_MESSAGE,
         pop(ORDER_GROUP, FIFO_TOPIC, 2, LONG_INVISIBLE_MS, order=True),
         body_kind="records", save=save_pop("o1"), doc="orderly: a batch of two"),
    Step("pop_order_blocked", "broker", RC.POP_MESSAGE,
         pop(ORDER_GROUP, FIFO_TOPIC, 2, LONG_INVISIBLE_MS, order=True),
         body_kind="records", doc="the queue is blocked while that batch is in flight"),
    Step("ack_order_first", "broker", RC.ACK_MESSAGE, ack(ORDER_GROUP, FIFO_TOPIC, "o1", 0)),
    Step("pop_order_half_acked", "broker", RC.POP_MESSAGE,
         pop(ORDER_GROUP, FIFO_TOPIC, 2, LONG_INVISIBLE_MS, order=True),
         body_kind="records", doc="still blocked: one of the batch is unacked"),
    Step("ack_order_second", "broker", RC.ACK_MESSAGE, ack(ORDER_GROUP, FIFO_TOPIC, "o1", 1)),
    Step("pop_order_next", "broker", RC.POP_MESSAGE,
         pop(ORDER_GROUP, FIFO_TOPIC, 2, LONG_INVISIBLE_MS, order=True),
         body_kind="records", until=_records, doc="the next batch once all were acked"),
)



def _attempt_pop(attempt: str, invisible_ms: int = LONG_INVISIBLE_MS
                 ) -> Callable[[Ctx], dict[str, str]]:
    return pop(ATTEMPT_GROUP, ATTEMPT_TOPIC, 2, invisible_ms, order=True, attempt_id=attempt)


ATTEMPT_STEPS: Final[tuple[Step, ...]] = (
    *_sends(ATTEMPT_TOPIC, 400, 2, {"__SHARDINGKEY": "g1"}),
    Step("wait_attempt_dispatched", "broker", RC.GET_MAX_OFFSET,
         {"topic": ATTEMPT_TOPIC, "queueId": "0"}, until=_offset_is(2)),
    Step("pop_attempt_a", "broker", RC.POP_MESSAGE, _attempt_pop("attempt-A"),
         body_kind="records", doc="orderly, attempt A: a batch of two, counts 0"),
    Step("pop_attempt_b_blocked", "broker", RC.POP_MESSAGE, _attempt_pop("attempt-B"),
         body_kind="records", doc="another attempt: blocked while A's batch is in flight"),
    Step("pop_attempt_a_retried", "broker", RC.POP_MESSAGE,
         _attempt_pop("attempt-A", SHORT_INVISIBLE_MS), body_kind="records",
         doc="A's answer was lost: A again gets the batch, its counts unchanged (orderCountInfo);"
             " invisible for 1 s from now"),
    Step("pop_attempt_b", "broker", RC.POP_MESSAGE, _attempt_pop("attempt-B"),
         body_kind="records", until=_records, eventual_s=REVIVE_WAIT_S, retry_s=0.25,
         doc="B once that batch turned visible: handed out again, each counted once more"),
    Step("pop_attempt_b_retried", "broker", RC.POP_MESSAGE, _attempt_pop("attempt-B"),
         body_kind="records", doc="B's answer was lost: B again, its counts unchanged"),
    Step("pop_attempt_a_stale", "broker", RC.POP_MESSAGE, _attempt_pop("attempt-A"),
         body_kind="records", doc="A is no longer the batch's attempt: blocked"),
)

TIMER_STEPS: Final[tuple[Step, ...]] = (
    Step("send_timer", "broker", RC.SEND_MESSAGE_V2,
         send_v2(TIMER_TOPIC, 0, 300, extra={"TIMER_DELAY_SEC": "2"}), b"timer message",
         doc="due in 2 s"),
    Step("pop_timer", "broker", RC.POP_MESSAGE,
         pop(TIMER_GROUP, TIMER_TOPIC, 4, LONG_INVISIBLE_MS), body_kind="records",
         until=_records, eventual_s=REVIVE_WAIT_S, retry_s=0.25,
         doc="delivered once due: its properties and queue offset"),
)

POP_SCENARIO: Final[tuple[Step, ...]] = (
    *SETUP, *POP_STEPS, *ORDER_STEPS, *ATTEMPT_STEPS, *TIMER_STEPS)

#: Fields that differ by nature (the brokers' clocks), as (step regex, field regex, why).
ALLOWED: Final[tuple[tuple[str, str, str], ...]] = (
    (r".*", r"body\[\d+\]\.store_timestamp", "store time is the broker's clock"),
    (r"(pop|change)_.*", r"ext\.popTime", "the broker's clock"),
    (r"pop_.*", r"body\[\d+\]\.properties\.1ST_POP_TIME", "the broker's clock"),
    (r"pop_timer", r"body\[\d+\]\.properties\.TIMER_(OUT|DELIVER|ENQUEUE|DEQUEUE)_MS",
     "due time: the broker's clock"),
    (r".*", r"(ext|body)\.(version|dataVersion)(\..*)?", "DataVersion: timestamp + counter"),
)
