"""PULL_MESSAGE (11) with long polling (RocketMQ 4.9 ``PullMessageProcessor``).

``decide`` is the synchronous core: checks, subscription, the store read, the response, and
whether the pull may be parked. ``process`` (a plain processor: a pull that finds messages is
answered inline, in the read's batch) parks the others in ``PullRequestHoldService`` until a
matching message arrives or ``suspendTimeoutMillis`` passes, then answers with a second,
non-suspending read, queued on its connection (``queue_later``; it replied ``LATER``: no task
per parked pull) and sent at the end of the batch of wakes (``send_woken``: one send per
connection).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

import orjson

from ...cluster.filter.sql92 import Selector
from ...cluster.logging import get_logger
from ...cluster.protocol.message import (
    MessageConst,
    RecordError,
    java_map_order,
    new_message,
    peek_field,
    record_properties,
)
from ...cluster.protocol.route import PermName, TopicConfig
from ...cluster.remoting.codec import FixedAnswer, RemotingCommand
from ...cluster.remoting.codes import SERIALIZE_JSON, ResponseCode
from ...cluster.remoting.errors import exception_remark
from ...cluster.remoting.headers import HeaderError, PullMessageRequestHeader
from ...cluster.remoting.processors import LATER, Later
from ...store.message_store import GetMessageStatus
from ..clients import SubscriptionData, build_subscription
from ..long_polling import Parked
from ..topic_config import OFFSET_MOVED_EVENT
from .common import FAQ_SUGGEST
from .consumer import TOTAL_MEMORY_BYTES as _RAM_BYTES

if TYPE_CHECKING:
    from ..context import BrokerContext
    from ..offsets import SubscriptionGroupConfig

FLAG_COMMIT_OFFSET: Final = 0x1
FLAG_SUSPEND: Final = 0x2
FLAG_SUBSCRIPTION: Final = 0x4
FLAG_CLASS_FILTER: Final = 0x8
#: Messages one pull returns at most (Java maxTransferCountOnMessageInMemory).
MAX_PULL_MSG_NUMS: Final = 32
#: Longest a pull may be held (long polling) whatever the client asks: the server channel's
#: idle timeout (a Java client asks 15-20 s and gives up after 30 s).
MAX_SUSPEND_TIMEOUT_MS: Final = 120_000
MASTER_ID: Final = 0
#: A slave judges "on disk" with accessMessageInMemoryMaxRatio minus this many points.
SLAVE_RATIO_DISCOUNT: Final = 10.0
#: RAM the in-memory ratio applies to (tests may patch it).
TOTAL_MEMORY_BYTES: int = _RAM_BYTES

_S = GetMessageStatus
log = get_logger(role="pull")


def offset_moved_body(
    group: str, topic: str, broker_name: str, queue_id: int, requested: int, new: int
) -> bytes:
    """RocketMQ's ``OffsetMovedEvent`` as fastjson encodes it (keys sorted)."""
    return orjson.dumps(
        {
            "consumerGroup": group,
            "messageQueue": {"brokerName": broker_name, "queueId": queue_id, "topic": topic},
            "offsetNew": new,
            "offsetRequest": requested,
        },
        option=orjson.OPT_SORT_KEYS,
    )


def offset_moved_message(
    group: str, topic: str, broker_name: str, queue_id: int, requested: int, new: int,
    broker_host: tuple[str, int], now_ms: int,
) -> Any:
    """The message RocketMQ's PullMessageProcessor.generateOffsetMovedEvent stores in
    OFFSET_MOVED_EVENT queue 0: tagged and keyed by the group, DELAY=0, born in the broker."""
    props = java_map_order({
        MessageConst.PROPERTY_TAGS: group,
        MessageConst.PROPERTY_DELAY_TIME_LEVEL: "0",
        MessageConst.PROPERTY_KEYS: group,
    })
    return new_message(
        OFFSET_MOVED_EVENT,
        offset_moved_body(group, topic, broker_name, queue_id, requested, new),
        0, 0, props, 0, now_ms, broker_host, broker_host, 0,
    )


RecordFilter = Callable[[memoryview], bool]


class _PullRead(NamedTuple):
    """What a pull read, as its answer reports it."""

    next_begin_offset: int
    min_offset: int
    max_offset: int
    status_value: str


#: A pull's answer header: its extFields, always these four (RocketMQ's
#: PullMessageResponseHeader), filled from a template per status (``_PullAnswer``).
PULL_ANSWER: Final = FixedAnswer(
    ("maxOffset", "minOffset", "nextBeginOffset", "suggestWhichBrokerId"))


class _PullAnswer(NamedTuple):
    """A pull's answer (not a refusal): its code, status and the four offsets of its header."""

    code: int
    read: _PullRead
    suggest: int
    body: bytes

    def response(self, request: RemotingCommand) -> RemotingCommand:
        read = self.read
        ext = {
            "suggestWhichBrokerId": str(self.suggest),
            "nextBeginOffset": str(read.next_begin_offset),
            "minOffset": str(read.min_offset),
            "maxOffset": str(read.max_offset),
        }
        return request.response(self.code, read.status_value, ext, self.body)

    def frame_head(self, request: RemotingCommand) -> bytes | None:
        """The answer's frame but its body, from ``PULL_ANSWER`` (None: encode it as any
        other: a binary-header request, or what the template cannot say)."""
        if request.serialize_type != SERIALIZE_JSON:
            return None
        read = self.read
        values = (read.max_offset, read.min_offset, read.next_begin_offset, self.suggest)
        return PULL_ANSWER.frame_head(self.code, request.opaque, read.status_value, values,
                                      len(self.body))


class _ParkedPull(Parked):
    """A pull to hold (``decide``'s verdict when it finds nothing and may wait): its queue,
    offset and tags filter, its connection and request, and its parsed header and subscription
    (the wake decides again from them: neither can change). Woken, it is decided again (no
    suspending) and its answer queued, encoded, on its connection (sent at the batch's end);
    nothing of it is a task."""

    __slots__ = ("conn", "header", "processor", "request", "sub", "timeout_s")

    def __init__(
        self, processor: PullProcessor, conn: Any, request: RemotingCommand,
        header: PullMessageRequestHeader, sub: SubscriptionData, timeout_s: float,
    ) -> None:
        super().__init__(header.queue_offset,
                         None if sub.matches_all else sub.is_matched_by_tags_code)
        self.processor: PullProcessor | None = processor
        self.conn = conn
        self.request: RemotingCommand | None = request
        self.header = header
        self.sub = sub
        self.timeout_s = timeout_s

    def wake(self) -> None:
        processor, request, conn = self.processor, self.request, self.conn
        if processor is None or request is None:
            return
        self.processor = self.request = self.conn = None  # a woken pull holds nothing
        processor.unsent[id(conn)] = conn
        try:
            got = processor.decide(conn, request, self.header, self.sub, allow_suspend=False)
            if type(got) is _PullAnswer:
                head = got.frame_head(request)
                if head is not None:
                    conn.queue_later_frame(request, head, got.body)  # (sent: ``send_woken``)
                    return
                got = got.response(request)
        except Exception as exc:
            log.warning("parked pull failed", error=repr(exc), exc_info=True)
            got = request.response(ResponseCode.SYSTEM_ERROR, exception_remark(exc))
        conn.queue_later(request, got)  # (a woken pull never parks again)


#: What ``PullProcessor.decide`` comes to: a refusal, an answer, or a pull to hold.
Decision = RemotingCommand | _PullAnswer | _ParkedPull

#: Subscriptions a pull carries (FLAG_SUBSCRIPTION), built once per distinct text: the cache's
#: bound (cleared when full; a consumer sends the same few over and over).
SUBSCRIPTION_CACHE_MAX: Final = 4096


class PullProcessor:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl
        self._subs: dict[tuple[str, str | None, int, str | None], SubscriptionData] = {}
        #: connections with woken pulls' answers queued and not yet sent (by id, in wake order)
        self.unsent: dict[int, Any] = {}
        ctrl.hold.on_batch_end(self.send_woken)

    def send_woken(self) -> None:
        """The end of a batch of woken pulls: each connection sends the answers they queued,
        in one send (no task per connection)."""
        unsent, self.unsent = self.unsent, {}
        for conn in unsent.values():
            conn.send_later()

    def _subscription(self, h: PullMessageRequestHeader) -> SubscriptionData:
        """``build_subscription`` of the pull's own subscription, cached (SubscriptionData is
        frozen; a bad expression raises ValueError every time, uncached)."""
        key = (h.topic, h.subscription, h.sub_version, h.expression_type)
        sub = self._subs.get(key)
        if sub is None:
            sub = build_subscription(h.topic, h.subscription, h.sub_version, h.expression_type)
            if len(self._subs) >= SUBSCRIPTION_CACHE_MAX:
                self._subs.clear()
            self._subs[key] = sub
        return sub

    def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand | Later:
        """A plain processor (answered inline when it need not wait); a pull to hold is
        parked and answered later through its connection (``LATER``: no task per parked
        pull)."""
        try:
            h = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        got = self.decide(conn, request, h, None, allow_suspend=True)
        if type(got) is _ParkedPull:
            self.ctrl.hold.park(h.topic, h.queue_id, got, got.timeout_s)
            return LATER
        if type(got) is _PullAnswer:
            return got.response(request)
        return cast(RemotingCommand, got)

    def decide(
        self, conn: Any, request: RemotingCommand, h: PullMessageRequestHeader,
        sub: SubscriptionData | None, *, allow_suspend: bool,
    ) -> Decision:
        """The pull's refusal, its answer, or (``allow_suspend``) the pull to hold. ``sub``:
        a parked pull's own, built when it first came (its wake)."""
        ctrl = self.ctrl
        sgc = self._readable(conn, request, h)
        if isinstance(sgc, RemotingCommand):
            return sgc
        if sub is None or not h.sys_flag & FLAG_SUBSCRIPTION:  # (a group's is looked up again)
            found = self._pull_subscription(request, h, sgc)
            if isinstance(found, RemotingCommand):
                return found
            sub = found
        record_filter = self._record_filter(request, sub)
        if isinstance(record_filter, RemotingCommand):
            return record_filter
        sys_flag = h.sys_flag
        timeout_ms = self._suspend_ms(h) if allow_suspend and sys_flag & FLAG_SUSPEND else 0
        if timeout_ms > 0 and self._caught_up(h):  # nothing to read: hold it, no read built
            self._commit(h)
            return _ParkedPull(self, conn, request, h, sub, timeout_ms / 1000.0)
        result, code, body, lag = self._read(h, sub, record_filter)
        if allow_suspend:
            self._commit(h)
        if code == ResponseCode.PULL_NOT_FOUND and timeout_ms > 0:
            return _ParkedPull(self, conn, request, h, sub, timeout_ms / 1000.0)
        suggest = suggest_broker_id(ctrl, sgc, lag)
        if code == ResponseCode.PULL_OFFSET_MOVED and ctrl.is_slave:
            # 4.x without offsetCheckInSlave: a slave never moves a consumer's offset (it may
            # just be behind its master); retry, at the group's broker
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
            suggest = sgc.broker_id
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            self._offset_moved(h.consumer_group, h.topic, h.queue_id, h.queue_offset,
                               result.next_begin_offset)
        return _PullAnswer(code, result, suggest, body)

    def _suspend_ms(self, h: PullMessageRequestHeader) -> int:
        """How long a pull that finds nothing may be held (0: answered at once)."""
        bcfg = self.ctrl.bcfg
        if bcfg.long_polling_enable:
            return min(h.suspend_timeout_millis, MAX_SUSPEND_TIMEOUT_MS)
        return bcfg.short_polling_time_mills

    def _caught_up(self, h: PullMessageRequestHeader) -> bool:
        """Whether the pull's offset is its queue's end (after dispatching what was sent): the
        read would answer OFFSET_OVERFLOW_ONE, PULL_NOT_FOUND, so the pull is held."""
        store = self.ctrl.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()  # a pull right after a send sees it
        return store.at_queue_end(h.topic, h.queue_id, h.queue_offset)

    def _commit(self, h: PullMessageRequestHeader) -> None:
        """The offset a pull commits (FLAG_COMMIT_OFFSET; a master's only)."""
        ctrl = self.ctrl
        if h.sys_flag & FLAG_COMMIT_OFFSET and not ctrl.is_slave:
            ctrl.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

    def _readable(
        self, conn: Any, request: RemotingCommand, h: PullMessageRequestHeader
    ) -> SubscriptionGroupConfig | RemotingCommand:
        """The consumer group's config when the pull may read its queue, else the refusal."""
        ctrl = self.ctrl
        if not PermName.is_readable(ctrl.bcfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{ctrl.bcfg.broker_ip1}] pulling message is forbidden",
            )
        sgc = ctrl.groups.find(h.consumer_group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group [{h.consumer_group}] does not exist, {FAQ_SUGGEST}",
            )
        if not sgc.consume_enable:
            return request.response(
                ResponseCode.NO_PERMISSION, f"subscription group no permission, {h.consumer_group}"
            )
        tc = ctrl.topics.select(h.topic)
        if tc is None and ctrl.is_slave:
            tc = replicated_topic(ctrl, h.topic, h.queue_id)
        if tc is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{h.topic}] not exist, apply first please! {FAQ_SUGGEST}",
            )
        if not PermName.is_readable(tc.perm):
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden"
            )
        if h.queue_id < 0 or h.queue_id >= tc.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                f"topicConfig.readQueueNums:[{tc.read_queue_nums}] consumer:[/{conn.peer}]",
            )
        return sgc

    def _pull_subscription(
        self, request: RemotingCommand, h: PullMessageRequestHeader, sgc: SubscriptionGroupConfig
    ) -> SubscriptionData | RemotingCommand:
        """The pull's own subscription (FLAG_SUBSCRIPTION), or the one its consumer group
        registered; else the refusal."""
        if h.sys_flag & FLAG_SUBSCRIPTION:
            try:
                return self._subscription(h)
            except ValueError as exc:
                return request.response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    f"parse the consumer's subscription failed: {exc}",
                )
        group = self.ctrl.clients.consumer_group(h.consumer_group)
        if group is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's group info not exist{FAQ_SUGGEST}",
            )
        if group.message_model == "BROADCASTING" and not sgc.consume_broadcast_enable:
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the consumer group[{h.consumer_group}] can not consume by broadcast way",
            )
        found = group.find_subscription(h.topic)
        if found is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                f"the consumer's subscription not exist{FAQ_SUGGEST}",
            )
        if found.sub_version < h.sub_version:
            return request.response(
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                "the consumer's subscription not latest",
            )
        return found

    def _record_filter(
        self, request: RemotingCommand, sub: SubscriptionData
    ) -> RecordFilter | RemotingCommand | None:
        """The SQL92 filter of a property-filtered subscription (None: tags only), or the
        refusal."""
        if sub.is_tag_type:
            return None
        if not self.ctrl.bcfg.enable_property_filter:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by "
                f"{sub.expression_type}",
            )
        if sub.selector is None:
            return request.response(
                ResponseCode.FILTER_DATA_NOT_EXIST,
                "The broker's consumer filter data is not exist!Your expression may be "
                f"wrong! {sub.filter_error or ''}".rstrip(),
            )
        return functools.partial(_sql92_matches, sub.selector)

    def _read(
        self, h: PullMessageRequestHeader, sub: SubscriptionData,
        record_filter: RecordFilter | None,
    ) -> tuple[_PullRead, int, bytes, int]:
        """Read the queue: what was read (offsets, status), the answer's code, its body and the
        consumer's lag in CommitLog bytes (0 unless slaveReadEnable: only
        ``suggest_broker_id`` reads it, and only then)."""
        ctrl = self.ctrl
        store = ctrl.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()  # a pull right after a send sees it
        max_nums = max(1, min(h.max_msg_nums, MAX_PULL_MSG_NUMS))
        result = store.get_message(
            h.topic,
            h.queue_id,
            h.queue_offset,
            max_nums,
            message_filter=None if sub.matches_all else sub.is_matched_by_tags_code,
            record_filter=record_filter,
        )
        status = result.status
        if status is _S.NO_MATCHED_LOGIC_QUEUE:
            # a queue of a known topic never written yet: RocketMQ creates its ConsumeQueue on
            # the first look and answers NO_MESSAGE_IN_QUEUE
            status = _S.NO_MESSAGE_IN_QUEUE
        read = _PullRead(result.next_begin_offset, result.min_offset, result.max_offset,
                         status.value)
        if status is _S.FOUND:
            lag = (  # (before the copy)
                store.max_phys_offset - _last_phys_offset(result.buffers)
                if ctrl.bcfg.slave_read_enable else 0
            )
            body = result.copy_body()
            ctrl.stats.get(h.topic, (result.queue_offsets and len(result.queue_offsets)) or 0)
            return read, ResponseCode.SUCCESS, body, lag
        result.release()
        if status in (_S.MESSAGE_WAS_REMOVING, _S.NO_MATCHED_MESSAGE):
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in (_S.NO_MATCHED_LOGIC_QUEUE, _S.NO_MESSAGE_IN_QUEUE):
            code = (
                ResponseCode.PULL_OFFSET_MOVED
                if h.queue_offset != 0
                else ResponseCode.PULL_NOT_FOUND
            )
        elif status in (_S.OFFSET_FOUND_NULL, _S.OFFSET_OVERFLOW_ONE):
            code = ResponseCode.PULL_NOT_FOUND
        else:  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL
            code = ResponseCode.PULL_OFFSET_MOVED
        return read, code, b"", 0

    def _offset_moved(
        self, group: str, topic: str, queue_id: int, requested: int, new: int
    ) -> None:
        """A master records each offset it moves (OFFSET_MOVED_EVENT), as RocketMQ does; a
        failed put is logged and the pull answered all the same."""
        ctrl = self.ctrl
        msg = offset_moved_message(
            group, topic, ctrl.bcfg.broker_name, queue_id, requested, new, ctrl.store_host,
            ctrl.now_ms(),
        )
        try:
            result = ctrl.store.append_message(msg)
        except Exception:  # the answer matters more than the bookkeeping record
            log.exception("offset_moved_event_failed", topic=topic, group=group)
            return
        if result.result is None or not result.status.stored:
            log.warning("offset_moved_event_refused", topic=topic, group=group,
                        status=result.status.value)


def replicated_topic(ctrl: BrokerContext, topic: str, queue_id: int) -> TopicConfig | None:
    """A slave's stand-in config for a topic whose messages it replicated before it copied the
    master's topic configs (SlaveSynchronize runs every 10 s; a master dying in between would
    leave the topic unreadable here, where RocketMQ answers TOPIC_NOT_EXIST). Its ConsumeQueues
    prove the topic exists: read-only, not stored; the next sync brings the real config."""
    qids = [qid for (t, qid) in list(ctrl.store.cqs.queues) if t == topic]
    if not qids:
        return None
    nums = max(max(qids), queue_id) + 1
    return TopicConfig(topic, read_queue_nums=nums, write_queue_nums=nums,
                       perm=PermName.PERM_READ)


def _sql92_matches(selector: Selector, record: memoryview) -> bool:
    """RocketMQ ``ExpressionMessageFilter.isMatchedByCommitLog``: evaluate on the record's
    properties; a record that cannot be read does not match."""
    try:
        props = record_properties(record)
    except (struct.error, RecordError):
        return False
    return selector.matches(props)


def _last_phys_offset(buffers: list[memoryview]) -> int:
    """CommitLog offset of the last record pulled (its PHYSICALOFFSET field)."""
    if not buffers:
        return 0
    return peek_field(buffers[-1], "PHYSICALOFFSET")


def suggest_broker_id(ctrl: BrokerContext, sgc: SubscriptionGroupConfig, lag: int) -> int:
    """``suggestWhichBrokerId`` (RocketMQ 4.9 PullMessageProcessor + DefaultMessageStore):
    without slaveReadEnable always the master; with it, the group's whichBrokerWhenConsumeSlowly
    when the consumer is more than accessMessageInMemoryMaxRatio % of RAM behind the CommitLog's
    end (a slave: 10 points less), else the group's brokerId (0: back to the master). A slave
    without slaveReadEnable still serves the pull (4.x overwrites its PULL_RETRY_IMMEDIATELY with
    the store status' code), so consumers read there when the master is gone."""
    bcfg = ctrl.bcfg
    if not bcfg.slave_read_enable:
        return MASTER_ID
    ratio = bcfg.access_message_in_memory_max_ratio - (SLAVE_RATIO_DISCOUNT if ctrl.is_slave else 0)
    if lag > TOTAL_MEMORY_BYTES * (ratio / 100.0):
        return sgc.which_broker_when_consume_slowly
    return sgc.broker_id
