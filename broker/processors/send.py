"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

The checks and answers of RocketMQ 4.9's ``SendMessageProcessor`` (remoting-protocol.md §3.2):
topic validation, auto-create from TBW102, queue id range, retry topics past maxReconsumeTimes
to ``%DLQ%<group>``, transactional half messages, and responses that always carry ``msgId``,
``queueId``, ``queueOffset``, ``MSG_REGION`` and ``TRACE_ON``.

One send form, ``SendProcessor.process`` (plain ``def``, no task or object per send), for every
store: check, append, and answer at once -- or, when the put must pass a watermark first, hold
the encoded answer on it (``store/watermark.py``), which sends it once it reaches the put's key,
or its expired form after the deadline. The store's backend names the watermark and the key
(``MessageStore.append_marked``): the flush under SYNC_FLUSH, a slave's ack under SYNC_MASTER,
both, keyed by the message's end offset (expired: ``timeout_answer``); DLedger's quorum commit,
keyed by its last entry's index + 1 (expired or overtaken by a term change: ``refused_answer``).
"""

from __future__ import annotations

import functools
import operator
import random
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from ...cluster.acl.permission import SUB
from ...cluster.protocol.message import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
    HostAddr,
    Message,
    MessageConst,
    StoredMessage,
    decode_properties,
    java_map_order,
    new_message,
)
from ...cluster.protocol.route import PermName, TopicConfig
from ...cluster.protocol.topic_attributes import (
    DeclaredTypes,
    message_type,
    type_mismatch,
)
from ...cluster.remoting.address import parse_address
from ...cluster.remoting.codec import RemotingCommand
from ...cluster.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode, Version
from ...cluster.remoting.headers import (
    SEND_V2_LETTER,
    ConsumerSendMsgBackRequestHeader,
    HeaderError,
    parse_send_header,
)
from ...cluster.remoting.processors import Later
from ...store.commitlog import PutMessageResult, PutMessageStatus
from ...store.config import TIMER_TOPIC, MessageStoreConfig
from ...store.timer.hook import (
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TimerRefusal,
    timer_put,
)
from ...store.watermark import ExpiredAnswer
from ..topic_config import (
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    is_not_allowed_send_topic,
    retry_topic,
    validate_topic,
)
from ..transaction import HALF_TOPIC, prepare_half_message
from .common import (
    FAQ_SUGGEST,
    MSG_REGION_DEFAULT,
    TRACE_ON_DEFAULT,
    message_topics,
    put_status_code,
)

if TYPE_CHECKING:
    from ..context import BrokerContext

DLQ_NUMS_PER_GROUP: Final = 1
#: Client addresses whose parsed form is remembered (bornHost of sends).
PEER_HOST_CACHE_SIZE: Final = 4096
#: Validated topic names remembered by a send processor.
MAX_VALID_TOPIC_CACHE: Final = 100_000
_WAIT: Final = MessageConst.PROPERTY_WAIT_STORE_MSG_OK
_REAL_QID: Final = MessageConst.PROPERTY_REAL_QUEUE_ID
_ILLEGAL: Final = frozenset(
    {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}
)
_CLUSTER: Final = MessageConst.PROPERTY_CLUSTER
_PUT_OK: Final = PutMessageStatus.PUT_OK
_TRAN: Final = MessageConst.PROPERTY_TRANSACTION_PREPARED
_PERM_WRITE: Final = PermName.PERM_WRITE
#: What every send answer carries, refusals too (Java's ``preSend`` adds them first).
_SEND_EXT: Final = {"MSG_REGION": MSG_REGION_DEFAULT, "TRACE_ON": TRACE_ON_DEFAULT}
_T_SEC: Final = TIMER_DELAY_SEC
_T_MS: Final = TIMER_DELAY_MS
_T_AT: Final = TIMER_DELIVER_MS
#: what the names of the three timer properties start with
_TIMER: Final = "TIMER_"
#: Java's remark for a send without a topic (its msgCheck validates the blank topic).
BLANK_TOPIC_REMARK: Final = "The specified topic is blank."


def refuse(request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
    """A send refused: Java's answer still carries MSG_REGION and TRACE_ON."""
    return request.response(code, remark, dict(_SEND_EXT))


def timer_refusal_answer(why: TimerRefusal, scfg: MessageStoreConfig) -> tuple[int, str]:
    """RocketMQ 5's answer to a timer message it does not store (SendMessageProcessor)."""
    if why is TimerRefusal.NOT_ENABLED:
        return ResponseCode.SYSTEM_ERROR, (
            "accurate timer message is not enabled, timerWheelEnable is "
            f"{str(scfg.timer_wheel_enable).lower()}"
        )
    return ResponseCode.MESSAGE_ILLEGAL, (
        "timer message illegal, the delay time should not be bigger than the max delay "
        f"{scfg.timer_max_delay_sec * 1000}ms; or if set del msg, the delay time should be "
        "bigger than the current time"
    )


def java_topic_config(tc: TopicConfig) -> str:
    """``TopicConfig.toString()`` as RocketMQ prints it in remarks (perm as ``RW-``)."""
    perm = "".join((
        "R" if PermName.is_readable(tc.perm) else "-",
        "W" if PermName.is_writeable(tc.perm) else "-",
        "X" if PermName.is_inherited(tc.perm) else "-",
    ))
    return (
        f"TopicConfig [topicName={tc.topic_name}, readQueueNums={tc.read_queue_nums}, "
        f"writeQueueNums={tc.write_queue_nums}, perm={perm}, "
        f"topicFilterType={tc.topic_filter_type}, topicSysFlag={tc.topic_sys_flag}, "
        f"order={'true' if tc.order else 'false'}]"
    )


def message_illegal_remark(max_size: int) -> str:
    """Java's MESSAGE_ILLEGAL remark (SendMessageProcessor.handlePutMessageResult)."""
    return (
        "the message is illegal, maybe msg body or properties length not matched. "
        f"msg body length limit {max_size}B, msg properties length limit 32KB."
    )


@functools.lru_cache(maxsize=PEER_HOST_CACHE_SIZE)
def peer_host(peer: str) -> HostAddr:
    """``"ip:port"`` of a connection -> (ip, port) for bornHost (IPv4 only; else 0.0.0.0)."""
    try:
        host, port = parse_address(peer)
    except ValueError:
        return ("0.0.0.0", 0)
    if ":" in host:
        return ("0.0.0.0", 0)
    return (host, port)


_TRUE: Final = frozenset({"true", "1", "TRUE", "True"})


class SendHeader(NamedTuple):
    """The send header fields the processor uses (a tuple: cheap on the hot path)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None
    reconsume_times: int | None
    max_reconsume_times: int | None
    batch: bool


_new_header: Final = tuple.__new__


#: the required letters of SEND_V2_LETTER, read in one call
_V2_REQUIRED: Final = operator.itemgetter(*(SEND_V2_LETTER[name] for name in (
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag",
)))  # fmt: skip
_V2_TOPIC: Final = SEND_V2_LETTER["topic"]
_V2_PROPERTIES: Final = SEND_V2_LETTER["properties"]
_V2_RECONSUME_TIMES: Final = SEND_V2_LETTER["reconsumeTimes"]
_V2_MAX_RECONSUME_TIMES: Final = SEND_V2_LETTER["maxReconsumeTimes"]
_V2_BATCH: Final = SEND_V2_LETTER["batch"]


def _fast_v2(request: RemotingCommand) -> SendHeader | None:
    """SEND_MESSAGE_V2's one-letter header read straight from extFields (the hot path); None
    when anything is missing or odd, so the generic parser can name the problem."""
    ext = request.ext_fields
    try:
        group, topic, default_topic, nums, queue_id, sys_flag, born, flag = _V2_REQUIRED(ext)
        j = ext.get(_V2_RECONSUME_TIMES)
        l_ = ext.get(_V2_MAX_RECONSUME_TIMES)
        # tuple.__new__ straight: a NamedTuple's own __new__ is one more Python call per send
        return _new_header(
            SendHeader,
            (
                group,
                topic,
                default_topic,
                int(nums),
                int(queue_id),
                int(sys_flag),
                int(born),
                int(flag),
                ext.get(_V2_PROPERTIES),
                int(j) if j else None,
                int(l_) if l_ else None,
                ext.get(_V2_BATCH) in _TRUE,
            ),
        )
    except (KeyError, ValueError, TypeError):
        return None


def _slow(code: int, ext: Any) -> SendHeader:
    h = parse_send_header(code, ext)
    return SendHeader(
        h.producer_group,
        h.topic,
        h.default_topic,
        h.default_topic_queue_nums,
        h.queue_id,
        h.sys_flag,
        h.born_timestamp,
        h.flag,
        h.properties,
        h.reconsume_times,
        h.max_reconsume_times,
        bool(h.batch),
    )


def timeout_answer(status: PutMessageStatus) -> ExpiredAnswer:
    """How a held send answer reads when the watermark did not pass it in time (``status``:
    FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT): the message is stored, so a SUCCESS answer keeps
    its fields (msgId, queueId, queueOffset, ...) under ``status``'s code, exactly what
    ``answer`` builds for that status; an answer that already says why (SLAVE_NOT_AVAILABLE,
    held only for the flush) stays as it is."""
    code, remark = put_status_code(status)

    def expired(ok: RemotingCommand, key: int) -> RemotingCommand:
        if ok.code != ResponseCode.SUCCESS:
            return ok
        return ok.response(code, remark, ok.ext_fields)

    return expired


def refused_answer(status: PutMessageStatus, detail: str) -> ExpiredAnswer:
    """How a held send answer reads when its message turned out not stored (``status`` is
    not a stored one: a DLedger entry whose quorum commit timed out, or whose leader's term
    ended first): the refusal ``answer`` builds for that status, without msgId and offsets;
    an answer that is already a refusal stays as it is."""
    code, remark = put_status_code(status, detail)

    def refused(ok: RemotingCommand, key: int) -> RemotingCommand:
        if ok.code != ResponseCode.SUCCESS:
            return ok
        return refuse(ok, code, remark)

    return refused


class SendProcessor:
    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl
        # (DLedger mode flips is_slave after this: the store refuses a follower's writes)
        self._role_writable = not ctrl.is_slave
        self._writable = self._role_writable and PermName.is_writeable(
            ctrl.bcfg.broker_permission
        )
        #: topic names already validated (legal and not a system topic)
        self._valid_topics: set[str] = set()
        self._select_topic = ctrl.topics.select  # (bound once: one send, one lookup)
        #: the message type each 5.x topic's attributes declare, remembered
        self._declared_types = DeclaredTypes()
        self._max_size = ctrl.settings.store.max_message_size
        ctrl.config_listeners.append(self.config_changed)

    def config_changed(self) -> None:
        """UPDATE_BROKER_CONFIG installed new settings: re-read the cached ones."""
        ctrl = self.ctrl
        self._writable = self._role_writable and PermName.is_writeable(
            ctrl.bcfg.broker_permission
        )
        self._max_size = ctrl.settings.store.max_message_size

    # ------------------------------------------------------------------ entry points

    def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand | Later:
        """The one send form: check and append now (``store.append_marked``); answer at once
        unless the store names a watermark the put must pass first -- then the answer is
        encoded now and held on it until it reaches the put's key (one advance releases every
        answer it covers, one send per connection; after the deadline, its expired form). No
        task or object per send."""
        prepared = self.prepare(conn, request)
        if isinstance(prepared, RemotingCommand):
            return prepared
        msg, batch, wait = prepared
        result, held, key = self.ctrl.store.append_marked(msg, batch, wait)
        answer = self.answer(request, msg, result)
        if held is None or key <= held.mark or request.flag & FLAG_ONEWAY:
            return answer  # (now: nothing to wait for, passed already, or nobody listens)
        return held.hold(conn, request.opaque, answer, key)

    # ------------------------------------------------------------------ checks

    def prepare(
        self, conn: Any, request: RemotingCommand
    ) -> RemotingCommand | tuple[Message, bool, bool]:
        """The send pipeline's first half: decode and check the request (header, topic,
        queue, permissions, size, retry/DLQ, transaction) and build the message to store.

        Returns the refusal to answer (a ``RemotingCommand``), or ``(msg, batch, wait)``:
        ``batch`` when ``msg`` is a SEND_BATCH_MESSAGE body, ``wait`` unless the producer's WAIT
        property is "false" (the answer may then wait for flush or replicas). Stores nothing."""
        fast = _fast_v2(request) if request.code != RequestCode.SEND_MESSAGE else None
        header = fast if fast is not None else self._slow_header(request)
        if isinstance(header, RemotingCommand):
            return header
        if not self._writable:
            return self._not_writable(request)
        # the usual send, checked here: a topic already validated and known, a queue id in
        # its write range, the topic writeable; anything else (a refusal, a topic to create,
        # a queue to pick) is ``_target``'s
        topic = header.topic
        tc = self._select_topic(topic) if topic in self._valid_topics else None
        queue_id = header.queue_id
        if tc is None or not (0 <= queue_id < tc.write_queue_nums and tc.perm & _PERM_WRITE):
            target = self._target(conn, request, topic, header)
            if isinstance(target, RemotingCommand):
                return target
            queue_id, tc = target  # (no *target: a star call builds its arguments anew)
        return self._message(conn, request, header, queue_id, tc)

    @staticmethod
    def _slow_header(request: RemotingCommand) -> SendHeader | RemotingCommand:
        """The header by the generic parser, or the refusal naming what is wrong with it."""
        try:
            return _slow(request.code, request.ext_fields)
        except HeaderError as exc:
            ext = request.ext_fields
            v2_topic = ext.get(_V2_TOPIC) if request.code != RequestCode.SEND_MESSAGE else None
            if not v2_topic and not ext.get("topic"):
                return refuse(request, ResponseCode.SYSTEM_ERROR, BLANK_TOPIC_REMARK)
            return refuse(request, ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")

    def _not_writable(self, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        if ctrl.is_slave:
            return refuse(
                request,
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"the broker[{ctrl.bcfg.broker_ip1}] is a slave, sending message is forbidden",
            )
        return refuse(
            request,
            ResponseCode.NO_PERMISSION,
            f"the broker[{ctrl.bcfg.broker_ip1}] sending message is forbidden",
        )

    def _target(
        self, conn: Any, request: RemotingCommand, topic: str, header: SendHeader
    ) -> RemotingCommand | tuple[int, TopicConfig]:
        """The queue id to store in and the topic's config (created from the default topic
        when allowed), or the refusal."""
        if topic not in self._valid_topics:
            bad = validate_topic(topic)
            if bad is not None:
                return refuse(request, ResponseCode.SYSTEM_ERROR, bad)
            if is_not_allowed_send_topic(topic):
                return refuse(
                    request,
                    ResponseCode.NO_PERMISSION,
                    f"Sending message to topic[{topic}] is forbidden.",
                )
            if len(self._valid_topics) < MAX_VALID_TOPIC_CACHE:
                self._valid_topics.add(topic)
        tc = self.ctrl.topics.select(topic)
        if tc is None:
            created = self._create_topic(request, topic, header)
            if isinstance(created, RemotingCommand):
                return created
            tc = created
        queue_id = header.queue_id
        if queue_id >= max(tc.write_queue_nums, tc.read_queue_nums):
            return refuse(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {java_topic_config(tc)} "
                f"Producer: {conn.peer}",
            )
        if not PermName.is_writeable(tc.perm):
            return refuse(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{topic}] sending message is forbidden",
            )
        if queue_id < 0:
            queue_id = random.randrange(max(1, tc.write_queue_nums))
        return queue_id, tc

    def _create_topic(
        self, request: RemotingCommand, topic: str, header: SendHeader
    ) -> TopicConfig | RemotingCommand:
        """A send to an unknown topic: its config made from the default topic (or a retry
        topic's), or the refusal."""
        ctrl = self.ctrl
        tc, created, why = ctrl.topics.create_in_send_message(
            topic, header.default_topic, header.default_topic_queue_nums
        )
        if tc is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            tc, created = ctrl.topics.create_in_send_message_back(topic, 1, PermName.PERM_RW)
        if tc is None:
            bad_nums = why.startswith("defaultTopicQueueNums")  # (a bad header field)
            return refuse(
                request,
                ResponseCode.SYSTEM_ERROR if bad_nums else ResponseCode.TOPIC_NOT_EXIST,
                why if bad_nums else f"topic[{topic}] not exist, apply first please! "
                f"{FAQ_SUGGEST}",
            )
        if created:
            ctrl.topic_created(topic)
        return tc

    def _message(
        self, conn: Any, request: RemotingCommand, header: SendHeader, queue_id: int,
        tc: TopicConfig,
    ) -> RemotingCommand | tuple[Message, bool, bool]:
        """The message to store (body size, properties, retry/DLQ, transaction checked)."""
        ctrl = self.ctrl
        body = request.body
        if not isinstance(body, bytes):
            body = bytes(body)
        max_size = self._max_size
        # the body is a batch whenever the header says so, whatever the request code (320 only
        # selects the V2 header): the C++ client sends its batches as SEND_MESSAGE (10) with
        # batch="1"
        batch = header.batch
        if not batch and len(body) > max_size:
            return refuse(request, ResponseCode.MESSAGE_ILLEGAL, message_illegal_remark(max_size))
        # the properties, whether the producer waits, and its WAIT property as sent (inline:
        # every send passes here)
        raw = header.properties or ""
        props = decode_properties(raw) if raw else {}
        if batch:
            # Java appends the batch header's properties (WAIT included) to every item, in
            # its HashMap's order
            wait, wait_prop = props.get(_WAIT, "true") != "false", None
            props[_CLUSTER] = ctrl.bcfg.broker_cluster_name
            props = java_map_order(props)
        else:
            # a single message is stored without WAIT (Java drops it to save 9 bytes)
            wait_prop = props.pop(_WAIT, None)
            wait = wait_prop != "false"
            props[_CLUSTER] = ctrl.bcfg.broker_cluster_name
        if tc.attributes and not batch:  # a 5.x topic declaring message.type takes only that
            declared = self._declared_types.of(tc.attributes)
            wrong = None if declared is None else type_mismatch(declared, message_type(props))
            if wrong is not None and not header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                return refuse(request, ResponseCode.MESSAGE_ILLEGAL, wrong)
        reconsume = header.reconsume_times or 0
        sys_flag = header.sys_flag
        topic = header.topic
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            if batch:
                return refuse(
                    request,
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"batch request does not support retry group {topic}",
                )
            redirected = self._retry_or_dlq(request, header, reconsume)
            if isinstance(redirected, RemotingCommand):
                return redirected
            if redirected is not None:
                topic, queue_id = redirected
        # (the three timer properties' names start with _TIMER: one scan of the raw text first)
        if not batch and _TIMER in raw and (_T_SEC in props or _T_MS in props or _T_AT in props):
            timed = self._timer_put(props, topic, queue_id, sys_flag)
            if isinstance(timed, TimerRefusal):
                return refuse(request, *timer_refusal_answer(timed, ctrl.settings.store))
            topic, queue_id, props = timed
        msg = new_message(
            topic, body, queue_id, header.flag, props, sys_flag, header.born_timestamp,
            peer_host(conn.peer), ctrl.store_host, reconsume,
        )
        if not batch and _TRAN in props and props[_TRAN].lower() == "true":
            if ctrl.bcfg.reject_transaction_message:
                return refuse(
                    request,
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{ctrl.bcfg.broker_ip1}] sending transaction message is forbidden",
                )
            msg = prepare_half_message(ctrl, msg, wait_prop)
        elif sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED_TYPE:
            msg = prepare_half_message(ctrl, msg, wait_prop)
        return msg, batch, wait

    def _timer_put(
        self, props: dict[str, str], topic: str, queue_id: int, sys_flag: int
    ) -> tuple[str, int, Any] | TimerRefusal:
        scfg = self.ctrl.settings.store
        return timer_put(
            props, topic, queue_id, sys_flag, self.ctrl.now_ms(),
            enabled=scfg.timer_wheel_enable, max_delay_sec=scfg.timer_max_delay_sec,
            precision_ms=scfg.timer_precision_ms,
        )

    def _retry_or_dlq(
        self, request: RemotingCommand, header: SendHeader, reconsume: int
    ) -> RemotingCommand | tuple[str, int] | None:
        ctrl = self.ctrl
        group = header.topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
        sgc = ctrl.groups.find(group)
        if sgc is None:
            return refuse(
                request,
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group} {FAQ_SUGGEST}",
            )
        max_times = sgc.retry_max_times
        if request.version >= Version.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if reconsume < max_times:
            return None
        dlq = dlq_topic(group)
        _tc, created = ctrl.topics.create_in_send_message_back(
            dlq, DLQ_NUMS_PER_GROUP, PermName.PERM_RW
        )
        if created:
            ctrl.topic_created(dlq)
        return dlq, random.randrange(DLQ_NUMS_PER_GROUP)

    # ------------------------------------------------------------------ answers

    def answer(
        self, request: RemotingCommand, msg: Message, result: PutMessageResult
    ) -> RemotingCommand:
        """The send pipeline's second half: the response to ``request`` once ``msg`` (from
        ``prepare``) was stored with ``result`` (msgId, queueId, queueOffset, MSG_REGION,
        TRACE_ON; a refusal code and remark when it was not stored). Counts the messages put."""
        status = result.status
        appended = result.result
        if appended is None or (status is not _PUT_OK and not status.stored):
            if status in _ILLEGAL:
                return refuse(request, ResponseCode.MESSAGE_ILLEGAL,
                              message_illegal_remark(self._max_size))
            code, remark = put_status_code(status, result.remark)
            return refuse(request, code, remark)
        self.ctrl.stats.put_total += appended.msg_num
        ext = {
            "msgId": appended.msg_id,
            "queueId": str(msg.queue_id),
            "queueOffset": str(appended.logics_offset),
            "MSG_REGION": MSG_REGION_DEFAULT,
            "TRACE_ON": TRACE_ON_DEFAULT,
        }
        if msg.topic == HALF_TOPIC or msg.topic == TIMER_TOPIC:
            # Java answers the producer's queue (its client builds SendResult.messageQueue
            # from it) and no transactionId (the client uses the UNIQ_KEY)
            ext["queueId"] = msg.properties.get(_REAL_QID) or ext["queueId"]
        if status is _PUT_OK:
            return request.response(ResponseCode.SUCCESS, None, ext)
        code, remark = put_status_code(status)
        return request.response(code, remark, ext)


class SendBackProcessor:
    """CONSUMER_SEND_MSG_BACK: a consumer gives a message back for later redelivery."""

    def __init__(self, ctrl: BrokerContext) -> None:
        self.ctrl = ctrl

    def process(self, conn: Any, request: RemotingCommand) -> RemotingCommand:
        ctrl = self.ctrl
        try:
            header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"bad request header: {exc}")
        group = header.group
        sgc = ctrl.groups.find(group)
        if sgc is None:
            return request.response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                f"subscription group not exist, {group} {FAQ_SUGGEST}",
            )
        if ctrl.is_slave or not PermName.is_writeable(ctrl.bcfg.broker_permission):
            return request.response(
                ResponseCode.NO_PERMISSION,
                f"the broker[{ctrl.bcfg.broker_ip1}] sending message is forbidden",
            )
        if sgc.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)
        target = self._retry_queue(request, group, sgc.retry_queue_nums)
        if isinstance(target, RemotingCommand):
            return target
        new_topic, queue_id = target
        ext = ctrl.store.lookup_message_by_offset(header.offset)
        if ext is None:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}"
            )
        access = ctrl.topic_access
        if access is not None:  # aclEnable: the consumer must be able to read what it returns
            denial = access(conn, request, message_topics(ext), SUB)
            if denial is not None:
                return denial
        props = dict(ext.properties)
        props.setdefault(MessageConst.PROPERTY_RETRY_TOPIC, ext.topic)
        props[_WAIT] = "false"  # Java: setWaitStoreMsgOK(false), stored with the record
        max_times = sgc.retry_max_times
        if request.version >= Version.V3_4_9 and header.max_reconsume_times is not None:
            max_times = header.max_reconsume_times
        if ext.reconsume_times >= max_times or header.delay_level < 0:
            new_topic, queue_id = self._dead_letter_queue(group)
            props.pop(MessageConst.PROPERTY_DELAY_TIME_LEVEL, None)
        else:
            delay_level = header.delay_level
            if delay_level == 0:
                delay_level = 3 + ext.reconsume_times
            props[MessageConst.PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
        return self._store(request, _redelivery(ext, new_topic, queue_id, props, ctrl.store_host))

    def _retry_queue(
        self, request: RemotingCommand, group: str, retry_queue_nums: int
    ) -> tuple[str, int] | RemotingCommand:
        """The group's retry topic (created if missing) and a random queue of it, or the
        refusal to answer when its name is refused or the topic is not writeable."""
        ctrl = self.ctrl
        try:
            new_topic = retry_topic(group)
        except ValueError as exc:  # the name gate refuses it first; never build a path from it
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        tc, created = ctrl.topics.create_in_send_message_back(
            new_topic, retry_queue_nums, PermName.PERM_RW
        )
        if created:
            ctrl.topic_created(new_topic)
        if not PermName.is_writeable(tc.perm):
            return request.response(
                ResponseCode.NO_PERMISSION, f"the topic[{new_topic}] sending message is forbidden"
            )
        return new_topic, random.randrange(max(1, min(retry_queue_nums, tc.write_queue_nums)))

    def _dead_letter_queue(self, group: str) -> tuple[str, int]:
        """The group's DLQ topic (created if missing) and a random queue of it."""
        new_topic = dlq_topic(group)
        queue_id = random.randrange(DLQ_NUMS_PER_GROUP)
        _tc, created = self.ctrl.topics.create_in_send_message_back(
            new_topic, DLQ_NUMS_PER_GROUP, PermName.PERM_RW
        )
        if created:
            self.ctrl.topic_created(new_topic)
        return new_topic, queue_id

    def _store(self, request: RemotingCommand, msg: Message) -> RemotingCommand:
        """Append the redelivered message; the store's verdict as the answer."""
        result = self.ctrl.store.append_message(msg)
        if result.result is not None and result.status.stored:
            return request.response(ResponseCode.SUCCESS)
        code, remark = put_status_code(result.status, result.remark)
        return request.response(
            ResponseCode.SYSTEM_ERROR if code == ResponseCode.SUCCESS else code,
            remark or result.status.value,
        )


def _redelivery(
    ext: StoredMessage,
    topic: str,
    queue_id: int,
    props: dict[str, str],
    store_host: tuple[str, int],
) -> Message:
    """The message given back, as it is stored again: the same body and birth, one more
    reconsume, its first message id kept in ORIGIN_MESSAGE_ID."""
    origin = props.get(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID) or ext.msg_id
    props[MessageConst.PROPERTY_ORIGIN_MESSAGE_ID] = origin
    # a record read back from SCHEDULE_TOPIC_XXXX carries its last real topic; the store
    # sets them again if the message is delayed once more
    props.pop(MessageConst.PROPERTY_REAL_TOPIC, None)
    props.pop(MessageConst.PROPERTY_REAL_QUEUE_ID, None)
    return Message(
        topic=topic,
        body=ext.body,
        queue_id=queue_id,
        flag=ext.flag,
        properties=props,
        sys_flag=ext.sys_flag,
        born_timestamp=ext.born_timestamp,
        born_host=ext.born_host,
        store_host=store_host,
        reconsume_times=ext.reconsume_times + 1,
    )
