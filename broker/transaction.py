"""Transactional messages (RocketMQ 4.x ``TransactionalMessageBridge``), the pure parts.

* A half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with its real topic and
  queue in ``REAL_TOPIC`` / ``REAL_QID`` and its transaction type cleared (so it is dispatched to
  the half queue and invisible to consumers).
* END_TRANSACTION commit re-puts it to the real topic; commit or rollback writes an op record to
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` whose body is the half message's queue offset and tag ``d``.
* The check service walks half messages without an op record, older than transactionTimeOut,
  and asks the producer group (CHECK_TRANSACTION_STATE) up to transactionCheckMax times.
* A check carries the half message's body, so it goes only to a producer connection that could
  end the transaction itself: under ACL, one whose account may publish (PUB) to the message's
  real topic, as END_TRANSACTION requires (``check_recipient``). With none, the check is
  withheld for the round, and said at most every ``WITHHELD_CHECK_LOG_INTERVAL_MS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, Protocol

import attrs

from ..cluster.protocol.message import (
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT_TYPE,
    Message,
    MessageConst,
    RecordError,
    StoredMessage,
    decode_record,
    encode_record,
    java_map_order,
)
from ..store.message_store import MessageStore
from .clients import ClientChannelInfo

HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
REMOVETAG: Final = "d"
#: The property a Java producer sets on a transaction message it sends (never the broker).
TRANSACTION_ID_PROPERTY: Final = "__transactionId__"
#: Half / op records read per store call.
READ_BATCH: Final = 32
#: Check-backs sent per round of the check service at most.
MAX_CHECKS_PER_ROUND: Final = 256
#: Checks withheld (no producer of the group may publish to the topic) are logged at most
#: this often, with how many were withheld since the last line.
WITHHELD_CHECK_LOG_INTERVAL_MS: Final = 10_000


class HalfTopicsOwner(Protocol):
    """What storing a half message needs of the broker: its two transaction topics exist."""

    def ensure_transaction_topics(self) -> None: ...


def prepare_half_message(
    ctrl: HalfTopicsOwner, msg: Message, wait: str | None = None
) -> Message:
    """The half message RocketMQ's ``TransactionalMessageBridge.parseHalfMessageInner`` stores:
    the real topic and queue in REAL_TOPIC / REAL_QID, the transaction type cleared, and the
    properties written again from the whole map (so the producer's WAIT, which a plain send
    does not store, is kept), in Java's HashMap order."""
    ctrl.ensure_transaction_topics()
    props = dict(msg.properties)
    if wait is not None:
        props[MessageConst.PROPERTY_WAIT_STORE_MSG_OK] = wait
    props[MessageConst.PROPERTY_REAL_TOPIC] = msg.topic
    props[MessageConst.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return attrs.evolve(
        msg,
        topic=HALF_TOPIC,
        queue_id=0,
        properties=java_map_order(props),
        sys_flag=(msg.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_NOT_TYPE,
    )


def end_message(half: StoredMessage, commit_sys_flag: int, store_host: tuple[str, int]) -> Message:
    """The message a commit stores in the real topic: RocketMQ 4.9's ``endMessageTransaction``
    writes the half message's properties string as it was (REAL_TOPIC, REAL_QID, TRAN_MSG and
    WAIT included; it clears them from the map only after)."""
    props = half.properties
    topic = props.get(MessageConst.PROPERTY_REAL_TOPIC) or half.topic
    try:
        queue_id = int(props.get(MessageConst.PROPERTY_REAL_QUEUE_ID, "0") or 0)
    except ValueError:
        queue_id = 0
    return Message(
        topic=topic,
        body=half.body,
        queue_id=queue_id,
        flag=half.flag,
        properties=dict(props),
        sys_flag=(half.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | commit_sys_flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        store_host=store_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.commitlog_offset,
    )


def op_message(half_queue_offset: int, store_host: tuple[str, int], now_ms: int) -> Message:
    """The op record (RocketMQ ``putOpMessage``): a ``Message`` (so WAIT=true) tagged ``d``,
    born in the broker itself."""
    return Message(
        topic=OP_HALF_TOPIC,
        body=str(half_queue_offset).encode(),
        queue_id=0,
        properties=java_map_order({
            MessageConst.PROPERTY_WAIT_STORE_MSG_OK: "true",
            MessageConst.PROPERTY_TAGS: REMOVETAG,
        }),
        born_timestamp=now_ms,
        born_host=store_host,
        store_host=store_host,
    )


@attrs.define
class HalfCheck:
    """One half message to ask its producer group about."""

    group: str
    #: the topic the half message is bound for (its REAL_TOPIC)
    topic: str
    queue_offset: int
    commitlog_offset: int
    body: bytes
    msg_id: str | None
    transaction_id: str | None
    offset_msg_id: str


class TransactionState:
    """Which half messages are resolved (op records seen) and how often each was checked."""

    def __init__(self) -> None:
        self.removed: set[int] = set()
        self.op_offset = 0  # next op-topic queue offset to read
        self.half_offset = 0  # every half message below this is resolved or given up
        self.check_times: dict[int, int] = {}
        #: checks withheld since the broker started (no producer may publish to the topic)
        self.withheld_checks = 0
        self._withheld_unlogged = 0
        self._withheld_logged_ms: int | None = None

    def is_resolved(self, half_queue_offset: int) -> bool:
        return half_queue_offset in self.removed or half_queue_offset < self.half_offset

    def resolved(self, half_queue_offset: int) -> None:
        self.removed.add(half_queue_offset)
        self.check_times.pop(half_queue_offset, None)

    def withhold(self, now_ms: int) -> int:
        """Count a check withheld; the number to log now (withheld since the last line), or 0
        while the last line is younger than ``WITHHELD_CHECK_LOG_INTERVAL_MS``."""
        self.withheld_checks += 1
        self._withheld_unlogged += 1
        last = self._withheld_logged_ms
        if last is not None and 0 <= now_ms - last < WITHHELD_CHECK_LOG_INTERVAL_MS:
            return 0
        count, self._withheld_unlogged = self._withheld_unlogged, 0
        self._withheld_logged_ms = now_ms
        return count

    def read_ops(self, store: MessageStore) -> None:
        """Fold op records written since the last call into ``removed``."""
        while True:
            result = store.get_message(OP_HALF_TOPIC, 0, self.op_offset, READ_BATCH)
            if not result.buffers:
                result.release()
                if result.next_begin_offset > self.op_offset and result.status.name in (
                    "OFFSET_TOO_SMALL",
                ):
                    self.op_offset = result.next_begin_offset
                    continue
                return
            for view in result.buffers:
                try:
                    rec = decode_record(view, check_crc=False)
                    self.removed.add(int(rec.body.decode() or -1))
                except (RecordError, ValueError):
                    pass
            self.op_offset = result.next_begin_offset
            result.release()

    def due_checks(
        self,
        store: MessageStore,
        now_ms: int,
        timeout_ms: int,
        check_max: int,
        limit: int = MAX_CHECKS_PER_ROUND,
    ) -> list[HalfCheck]:
        """Half messages older than ``timeout_ms`` still unresolved and checked fewer than
        ``check_max`` times; advances ``half_offset`` past resolved or abandoned ones."""
        if store.dispatch_behind_bytes > 0:
            store.dispatch()
        self.read_ops(store)
        out: list[HalfCheck] = []
        offset = self.half_offset
        contiguous = True
        max_off = store.get_max_offset_in_queue(HALF_TOPIC, 0)
        offset = max(offset, store.get_min_offset_in_queue(HALF_TOPIC, 0))
        while offset < max_off and len(out) < limit:
            result = store.get_message(HALF_TOPIC, 0, offset, READ_BATCH)
            if not result.buffers:
                result.release()
                break
            stop = False
            for view, qo in zip(result.buffers, result.queue_offsets, strict=True):
                try:
                    rec = decode_record(view, check_crc=False)
                except RecordError:
                    continue
                done = qo in self.removed or self.check_times.get(qo, 0) >= check_max
                if done:
                    if contiguous:
                        self.half_offset = qo + 1
                    continue
                contiguous = False
                if now_ms - rec.store_timestamp < timeout_ms:
                    stop = True
                    break
                self.check_times[qo] = self.check_times.get(qo, 0) + 1
                props = dict(rec.properties)
                real = Message(
                    topic=props.get(MessageConst.PROPERTY_REAL_TOPIC, rec.topic),
                    body=rec.body,
                    queue_id=int(props.get(MessageConst.PROPERTY_REAL_QUEUE_ID, "0") or 0),
                    flag=rec.flag,
                    properties=props,
                    sys_flag=rec.sys_flag,
                    born_timestamp=rec.born_timestamp,
                    born_host=rec.born_host,
                    store_host=rec.store_host,
                    reconsume_times=rec.reconsume_times,
                )
                body = encode_record(
                    real,
                    queue_offset=qo,
                    phys_offset=rec.commitlog_offset,
                    store_timestamp=rec.store_timestamp,
                )
                uniq = props.get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                out.append(
                    HalfCheck(
                        group=props.get(MessageConst.PROPERTY_PRODUCER_GROUP, ""),
                        topic=real.topic,
                        queue_offset=qo,
                        commitlog_offset=rec.commitlog_offset,
                        body=body,
                        msg_id=uniq,
                        transaction_id=props.get(TRANSACTION_ID_PROPERTY, uniq),
                        offset_msg_id=rec.msg_id,
                    )
                )
            offset = result.next_begin_offset
            result.release()
            if stop:
                break
        return out


def check_recipient(
    producers: Iterable[ClientChannelInfo],
    topic: str,
    may_publish: Callable[[ClientChannelInfo, str], bool] | None,
) -> ClientChannelInfo | None:
    """The producer to ask about a half message bound for ``topic``: the first of its group's
    ``producers`` that ``may_publish`` to it (None: ACL off, any producer), else None."""
    for info in producers:
        if may_publish is None or may_publish(info, topic):
            return info
    return None
