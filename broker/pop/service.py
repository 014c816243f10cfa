"""The broker's POP consumption (RocketMQ 5 ``PopMessageProcessor`` and friends): popping
messages with a checkpoint, acks, invisible-time changes and the revive scan.

A pop of a queue reads from the group's consumer offset, writes one checkpoint record (``ck``)
into the revive log topic ``rmq_sys_REVIVE_LOG_<cluster>`` (queue ``reviveQid``) and only then
moves the consumer offset past the popped messages. An ack writes an ``ack`` record into the
same revive queue. Both are ordinary CommitLog records: they survive a kill -9 as any message
does and reach slaves (HA, DLedger) with the CommitLog.

``revive_once`` is the revive scan: it reads the revive log from where it got (in memory; at
boot the ``CID_RMQ_SYS_REVIVE_GROUP`` offsets), keeps every unfinished checkpoint in a
``ReviveLedger`` and, for each whose invisible time ran out, re-puts its unacked messages into
the pop retry topic ``%RETRY%<group>_<topic>`` (one more reconsume time) -- or into
``%DLQ%<group>`` once they were consumed ``retryMaxTimes`` times --, acks what it revived in the
revive log (after the copies: a scan that reads the checkpoint again, after a restart or on a
promoted slave, finds it finished and does not revive it twice), and then commits the revive
offset, which names (as Apache's does) the record before its queue's oldest unfinished
checkpoint. Apache delays each ``ck`` record through its timer store to 1 s before the revive
time (and each ack to that time) instead; the scan reads the same records either way (on a
store Apache wrote, our timer delivers them), and a checkpoint that came through the timer
is revived only once the timer has delivered every message due up to its revive time, its acks
among them, and the scan has read what it delivered (``TimerStore.delivered_through_ms``).

The revive loop (``wiring.py``) runs a round only when there is something to do: new revive log
records (the store's arrival hook), a checkpoint whose invisible time ran out, a recovery; a
broker without POP consumers never scans.

Orderly pops (``order=true``) write no checkpoint, as Apache's do: ``OrderBlocks`` keeps one
batch per queue in flight until acked, and the broker writes the blocks to
``config/consumerOrderInfo.json`` with the consumer offsets (Apache's ``ConsumerOrderInfoManager``
file, persisted periodically there too). After a restart or a kill -9 a batch in flight stays
blocked until its invisible time runs out and keeps its counts; a pop newer than the last write
is popped again from the consumer offset (at least once, still in order). Slaves get neither
file nor blocks: a promoted slave pops again from the offset, as Apache's does.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from ...cluster.logging import get_logger
from ...cluster.protocol import pop as wire
from ...cluster.protocol.message import (
    Message,
    MessageConst,
    RecordError,
    StoredMessage,
    decode_record,
    encode_record,
)
from ...cluster.protocol.route import PermName
from ...store.commitlog import PutMessageStatus
from ...store.config import TIMER_TOPIC
from ...store.message_store import GetMessageStatus, MessageFilter
from ...store.timer.hook import TIMER_DELIVER_MS, TIMER_OUT_MS
from ..topic_config import dlq_topic
from .state import OrderBlocks, ReviveLedger

if TYPE_CHECKING:
    from ..context import BrokerContext
    from .state import PendingCheckpoint

#: Queues of a pop retry topic (Apache's PopAckConstants.retryQueueNum).
RETRY_QUEUE_NUMS: Final = 1
#: DLQ queues per group (RocketMQ's DLQ_NUMS_PER_GROUP).
DLQ_NUMS: Final = 1
#: Revive log records read per queue and scan round.
REVIVE_READ_BATCH: Final = 256
#: Messages re-put per scan round at most (the rest waits for the next round).
MAX_REVIVE_PER_ROUND: Final = 4096
_S = GetMessageStatus
log = get_logger(role="pop")


@attrs.define
class PopBatch:
    """What one pop request collected, and the answer header's info fields."""

    max_nums: int
    bodies: list[bytes] = attrs.field(factory=list)
    start_info: list[str] = attrs.field(factory=list)
    msg_info: list[str] = attrs.field(factory=list)
    order_info: list[str] = attrs.field(factory=list)
    rest: int = 0

    @property
    def room(self) -> int:
        return self.max_nums - len(self.bodies)


@attrs.frozen
class PopRequest:
    group: str
    topic: str
    queue_id: int
    max_nums: int
    invisible_ms: int
    init_mode: int
    order: bool
    attempt_id: str | None
    message_filter: MessageFilter | None


class PopService:
    def __init__(self, ctrl: BrokerContext, *, rng: random.Random | None = None) -> None:
        self.ctrl = ctrl
        self.ledger = ReviveLedger()
        self.order = OrderBlocks()
        self._rng = rng or random.Random()
        self._ck_counter = 0
        #: revive queue -> the next revive log offset the scan reads
        self._scanned: dict[int, int] = {}
        #: the next scan is the first since boot (or since this broker was a slave)
        self._recovering = True
        #: pop offsets the recovery scans moved (logged)
        self._moved = 0
        #: every timer-delivered revive record due up to this time has been read by a scan
        self._timer_through = -1
        #: revived and dead-lettered messages (tests and /metrics read them)
        self.revived = 0
        self.dead_lettered = 0

    # ------------------------------------------------------------------ names

    @property
    def revive_topic(self) -> str:
        return wire.revive_topic(self.ctrl.bcfg.broker_cluster_name)

    @property
    def revive_queue_num(self) -> int:
        return self.ctrl.bcfg.revive_queue_num

    def ensure_topic(self, topic: str, queues: int) -> None:
        _tc, created = self.ctrl.topics.create_in_send_message_back(
            topic, queues, PermName.PERM_RW
        )
        if created:
            self.ctrl.topic_created(topic)

    # ------------------------------------------------------------------ pop

    def next_revive_qid(self, order: bool) -> int:
        """Pops take the revive queues in turn from 0 (as Apache's ck counter does)."""
        if order:
            return wire.ORDER_REVIVE_QID
        qid = self._ck_counter % self.revive_queue_num
        self._ck_counter += 1
        return qid

    def pop(self, req: PopRequest, read_queue_nums: int, batch: PopBatch, pop_time: int,
            revive_qid: int) -> None:
        """Fill ``batch`` from the topic (one queue or all, from a random one) and, unless
        orderly, its pop retry topic (first with popFromRetryProbability %, else after)."""
        if self._recovering:  # the first pop after a restart must not beat the recovery
            self.scan()
        rand = self._rng.randrange(100)
        retry = wire.pop_retry_topic(req.topic, req.group)
        retry_first = rand < self.ctrl.bcfg.pop_from_retry_probability
        if retry_first and not req.order:
            self._pop_topic(req, retry, True, batch, pop_time, revive_qid, rand)
        if req.queue_id < 0:
            for i in range(read_queue_nums):
                qid = (rand + i) % read_queue_nums
                self._pop_queue(req, req.topic, qid, False, batch, pop_time, revive_qid)
        else:
            self._pop_queue(req, req.topic, req.queue_id, False, batch, pop_time, revive_qid)
        if not retry_first and not req.order and batch.room > 0:
            self._pop_topic(req, retry, True, batch, pop_time, revive_qid, rand)

    def _pop_topic(self, req: PopRequest, topic: str, is_retry: bool, batch: PopBatch,
                   pop_time: int, revive_qid: int, rand: int) -> None:
        tc = self.ctrl.topics.select(topic)
        if tc is None:
            return
        n = tc.read_queue_nums
        for i in range(n):
            self._pop_queue(req, topic, (rand + i) % n, is_retry, batch, pop_time, revive_qid)

    def _start_offset(self, req: PopRequest, topic: str, queue_id: int) -> int:
        ctrl = self.ctrl
        offset = ctrl.offsets.query(req.group, topic, queue_id)
        if offset >= 0:
            return offset
        store = ctrl.store
        if req.init_mode == 0 or is_retry_topic(topic):  # ConsumeInitMode.MIN
            offset = store.get_min_offset_in_queue(topic, queue_id)
        else:  # MAX: from the last message on
            offset = max(0, store.get_max_offset_in_queue(topic, queue_id) - 1)
        ctrl.offsets.commit(req.group, topic, queue_id, offset)
        return offset

    def _pop_queue(self, req: PopRequest, topic: str, queue_id: int, is_retry: bool,
                   batch: PopBatch, pop_time: int, revive_qid: int) -> None:
        ctrl = self.ctrl
        store = ctrl.store
        offset = self._start_offset(req, topic, queue_id)
        okey = (topic, req.group, queue_id)
        if req.order and self.order.blocked(okey, pop_time, req.attempt_id):
            return
        if batch.room <= 0:
            batch.rest += max(0, store.get_max_offset_in_queue(topic, queue_id) - offset)
            return
        result = store.get_message(topic, queue_id, offset, batch.room,
                                   message_filter=req.message_filter)
        if result.status in (_S.OFFSET_TOO_SMALL, _S.OFFSET_OVERFLOW_BADLY, _S.OFFSET_FOUND_NULL):
            result.release()
            offset = result.next_begin_offset
            ctrl.offsets.commit(req.group, topic, queue_id, offset)
            result = store.get_message(topic, queue_id, offset, batch.room,
                                       message_filter=req.message_filter)
        try:
            batch.rest += max(0, result.max_offset - result.next_begin_offset)
            if result.status is not _S.FOUND or not result.buffers:
                if result.next_begin_offset > offset and result.status in (
                    _S.NO_MATCHED_MESSAGE, _S.OFFSET_FOUND_NULL, _S.MESSAGE_WAS_REMOVING
                ):
                    # nothing matched the filter up to there: no checkpoint needed
                    ctrl.offsets.commit(req.group, topic, queue_id, result.next_begin_offset)
                return
            offsets = list(result.queue_offsets)
            if req.order:
                counts = self.order.popped(okey, offsets, pop_time, req.invisible_ms,
                                           req.attempt_id)
                batch.order_info.extend(_order_count_info(topic, queue_id, offsets, counts))
            else:
                ck = wire.Checkpoint(
                    topic=topic, cid=req.group, queue_id=queue_id, start_offset=offset,
                    pop_time=pop_time, invisible_time=req.invisible_ms,
                    diffs=tuple(o - offset for o in offsets),
                    broker_name=ctrl.bcfg.broker_name,
                )
                if not self.write_checkpoint(ck, revive_qid):
                    return
                ctrl.offsets.commit(req.group, topic, queue_id, result.next_begin_offset)
            batch.start_info.append(wire.offset_info_item(topic, queue_id, [offset]))
            batch.msg_info.append(wire.offset_info_item(topic, queue_id, offsets))
            for view in result.buffers:
                batch.bodies.append(
                    self._retry_view(req, view, offset, pop_time, revive_qid) if is_retry
                    else bytes(view)
                )
        finally:
            result.release()

    def _retry_view(self, req: PopRequest, view: memoryview, ck_offset: int, pop_time: int,
                    revive_qid: int) -> bytes:
        """A record of the pop retry topic as the client gets it: under its own topic, with
        the receipt handle set (the client cannot build it from the info fields)."""
        rec = decode_record(view, check_crc=False)
        props = dict(rec.properties)
        handle = wire.ReceiptHandle(
            ck_offset, pop_time, req.invisible_ms, revive_qid, wire.retry_flag(rec.topic),
            self.ctrl.bcfg.broker_name, rec.queue_id, rec.queue_offset,
        )
        props.setdefault(wire.PROPERTY_POP_CK, handle.encode())
        msg = Message(
            topic=req.topic, body=rec.body, queue_id=rec.queue_id, flag=rec.flag,
            properties=props, sys_flag=rec.sys_flag, born_timestamp=rec.born_timestamp,
            born_host=rec.born_host, store_host=rec.store_host,
            reconsume_times=rec.reconsume_times,
            prepared_transaction_offset=rec.prepared_transaction_offset,
        )
        return encode_record(msg, queue_offset=rec.queue_offset,
                             phys_offset=rec.commitlog_offset,
                             store_timestamp=rec.store_timestamp)

    # ------------------------------------------------------------------ the revive log

    def _revive_record(self, body: bytes, revive_qid: int, tag: str) -> Message:
        """A ck or ack record. Its ``TIMER_DELIVER_MS`` is the time it is written: when it
        reaches the revive log, as Apache's timer-delivered ones say when they did (Apache's
        revive scan revives nothing until it has read a record delivered 2 s past a
        checkpoint's revive time, so without it an Apache broker booted on this store would
        never revive our checkpoints). The send path's timer rule never sees these records."""
        ctrl = self.ctrl
        topic = self.revive_topic
        self.ensure_topic(topic, self.revive_queue_num)
        now = ctrl.now_ms()
        return Message(
            topic=topic, body=body, queue_id=revive_qid,
            properties={MessageConst.PROPERTY_TAGS: tag, TIMER_DELIVER_MS: str(now)},
            born_timestamp=now, born_host=ctrl.store_host,
            store_host=ctrl.store_host,
        )

    def write_checkpoint(self, ck: wire.Checkpoint, revive_qid: int) -> bool:
        """Append a checkpoint (a pop answers without waiting for flush or replicas: a lost
        checkpoint's messages are popped again from the consumer offset the new master has)."""
        put = self.ctrl.store.append_message(
            self._revive_record(ck.encode(), revive_qid, wire.CK_TAG))
        if put.result is None or not put.status.stored:
            log.warning("revive log write refused", status=put.status.value, tag=wire.CK_TAG)
            return False
        return True

    async def put_revive(self, record: wire.Checkpoint | wire.AckRecord, revive_qid: int) -> bool:
        """Store an ack (or a change-invisible checkpoint) as a send is stored: flushed under
        SYNC_FLUSH, on the slave under SYNC_MASTER, committed under DLedger, before the
        client is told (Apache's acks wait the same way)."""
        tag = wire.CK_TAG if isinstance(record, wire.Checkpoint) else wire.ACK_TAG
        put = await self.ctrl.store.put_message(
            self._revive_record(record.encode(), revive_qid, tag))
        if put.result is None or put.status is not PutMessageStatus.PUT_OK:
            log.warning("revive log write not stored", status=put.status.value, tag=tag)
            return False
        return True

    # ------------------------------------------------------------------ revive scan

    def _scan_start(self, qid: int) -> int:
        """Where a scan of ``qid`` goes on: after the ``CID_RMQ_SYS_REVIVE_GROUP`` offset,
        which names (as Apache's does) the last revive log record done with, not the next --
        unless an earlier version of ours wrote it (below)."""
        start = self._scanned.get(qid)
        if start is None:
            committed = self.ctrl.offsets.query(wire.REVIVE_GROUP, self.revive_topic, qid)
            start = committed + 1 if committed >= 0 else 0
            if committed >= 0 and self._names_the_next_record(qid, committed):
                start = committed
            start = max(start, self.ctrl.store.get_min_offset_in_queue(self.revive_topic, qid))
            self._scanned[qid] = start
        return start

    def _names_the_next_record(self, qid: int, committed: int) -> bool:
        """Whether a revive offset was written by our versions before the meaning changed,
        when it named the next record to read: the end of the queue, or the oldest
        unfinished checkpoint. Those versions wrote their records without
        ``TIMER_DELIVER_MS``; the current meaning never names the end, and names a record
        done with. So: nothing at ``committed``, or a checkpoint of ours without the stamp,
        is read again. (A checkpoint of theirs done with, read again, finds its acks and its
        revive's marks after it: it is not revived twice.)"""
        result = self.ctrl.store.get_message(self.revive_topic, qid, committed, 1)
        try:
            if result.status is not _S.FOUND or not result.buffers:
                return result.status in (_S.OFFSET_OVERFLOW_ONE, _S.NO_MESSAGE_IN_QUEUE)
            rec = decode_record(result.buffers[0], check_crc=False)
        except RecordError:
            return False
        finally:
            result.release()
        return rec.tags == wire.CK_TAG and TIMER_DELIVER_MS not in rec.properties

    def scan(self, *, catch_up: bool = True) -> int:
        """Read new revive log records into the ledger; -> records read. ``catch_up`` first
        dispatches what the reput has not yet (a recovery, a caller that just wrote); the
        revive loop's rounds leave that to the reput, which wakes them."""
        store = self.ctrl.store
        topic = self.revive_topic
        if not self._revive_log_exists(topic):
            self._recovering = False  # no revive log yet: nothing was popped
            return 0
        if (catch_up or self._recovering) and store.dispatch_behind_bytes > 0:
            store.dispatch()
        read = 0
        recovering = self._recovering
        for qid in range(self.revive_queue_num):
            offset = self._scan_start(qid)
            while True:
                result = store.get_message(topic, qid, offset, REVIVE_READ_BATCH)
                try:
                    if result.status in (_S.OFFSET_TOO_SMALL, _S.OFFSET_OVERFLOW_BADLY):
                        offset = result.next_begin_offset
                        continue
                    if result.status is not _S.FOUND:
                        break
                    for view, qo in zip(result.buffers, result.queue_offsets, strict=True):
                        self._read_record(view, qid, qo)
                        read += 1
                    offset = result.next_begin_offset
                finally:
                    result.release()
            self._scanned[qid] = offset
        if recovering:
            log.info("pop recovery: revive log read", records=read, moved=self._moved,
                     scanned=dict(self._scanned), pending=len(self.ledger))
        self._recovering = False
        # checkpoints precede their acks in the log (ours: written first; Apache's: delivered
        # by the timer 1 s before them): an ack whose checkpoint was not read by now belongs
        # to a finished one (late, or a duplicate) and is dropped
        self.ledger.forget_early_acks()
        return read

    def _revive_log_exists(self, topic: str) -> bool:
        """Whether the store holds a revive log queue (its config aside: a promoted slave's
        topic table is a copy up to 10 s old, and the recovery must not hang on it)."""
        if self.ctrl.topics.select(topic) is not None:
            return True
        queues = self.ctrl.store.cqs.queues
        return any((topic, qid) in queues for qid in range(self.revive_queue_num))

    def _read_record(self, view: memoryview, qid: int, log_offset: int) -> None:
        try:
            rec = decode_record(view, check_crc=False)
            if rec.tags == wire.CK_TAG:
                ck = wire.Checkpoint.decode(rec.body)
                if self._recovering:
                    self._recover_pop_offset(ck)
                self.ledger.add_checkpoint(
                    ck, qid, log_offset, delayed=TIMER_OUT_MS in rec.properties)
            elif rec.tags == wire.ACK_TAG:
                self.ledger.add_ack(wire.AckRecord.decode(rec.body))
            elif rec.tags == wire.BATCH_ACK_TAG:  # Apache's batch acks (its revive log)
                for ack in wire.decode_batch_ack_record(rec.body):
                    self.ledger.add_ack(ack)
        except (RecordError, ValueError) as exc:  # PopFormatError is a ValueError
            log.warning("unreadable revive log record", queue=qid, offset=log_offset,
                        error=str(exc))

    def _recover_pop_offset(self, ck: wire.Checkpoint) -> None:
        """A checkpoint read by the first scan after a restart (or a promotion): its pop had
        moved the group's offset past its messages, and that move may not have reached disk
        (offsets are persisted every few seconds; the checkpoint went to the CommitLog before
        the move). Move it again, so what was popped -- and perhaps acked -- is not popped
        afresh from the topic: it comes back only through the revive, if it was not acked.
        (Every checkpoint not yet read lies past the persisted revive offset, which is saved
        with the consumer offsets, so the first scan sees every pop the file may miss.)"""
        if not ck.diffs:
            return
        end = ck.start_offset + max(ck.diffs) + 1
        offsets = self.ctrl.offsets
        if offsets.query(ck.cid, ck.topic, ck.queue_id) < end:
            offsets.commit(ck.cid, ck.topic, ck.queue_id, end)
            self._moved += 1

    def revive_once(self) -> int:
        """Scan, re-put what is due, move the revive offsets; -> messages re-put."""
        ctrl = self.ctrl
        if ctrl.is_slave:  # the master revives; a promoted slave starts from the offsets
            self.ledger = ReviveLedger()
            self._scanned.clear()
            self._recovering = True
            return 0
        store = ctrl.store
        through, upto = self._timer_progress()
        self.scan(catch_up=False)
        if through is not None and store.max_phys_offset - store.dispatch_behind_bytes >= upto:
            self._timer_through = through  # (its deliveries were dispatched, and read)
        now = ctrl.now_ms()
        moved = 0
        for pending in self.ledger.due(now, self._timer_through):
            if moved >= MAX_REVIVE_PER_ROUND:
                break
            if not self._revive(pending):
                break  # the store refused: try again next round
            revived = pending.unacked()
            moved += len(revived)
            self._mark_revived(pending, revived)
            self.ledger.finish(pending)
        for qid, scanned in self._scanned.items():
            done = self.ledger.revive_offset(qid, scanned) - 1  # the last one done with
            if done >= 0:
                ctrl.offsets.commit(wire.REVIVE_GROUP, self.revive_topic, qid, done)
        return moved

    def next_round_ms(self) -> int | None:
        """When the revive loop has work without new records: at once while recovering (or a
        slave: it waits to be promoted), at the first revive time, else never (None)."""
        if self._recovering or self.ctrl.is_slave:
            return 0
        return self.ledger.earliest_revive_time()

    def _timer_progress(self) -> tuple[int | None, int]:
        """(the time up to which the timer has delivered every message due, or None: not
        known; the CommitLog end those deliveries lie before)."""
        ctrl = self.ctrl
        store = ctrl.store
        now = ctrl.now_ms()
        if ctrl.timer is not None:
            through = ctrl.timer.delivered_through_ms(now)
        elif store.get_max_offset_in_queue(TIMER_TOPIC, 0) <= 0:
            through = now  # no timer message at all: none is under way
        else:
            through = None  # the timer is not running (yet): what it holds waits
        return through, store.max_phys_offset

    def _mark_revived(self, pending: PendingCheckpoint, offsets: list[int]) -> None:
        """Ack what was just revived, in the revive log after its retry copies: a scan that
        reads this checkpoint again (a restart from an older revive offset, or a promoted slave
        whose offsets were synced before it) finds it finished instead of reviving it twice --
        the revived copy may already have been popped and acked. Plain ack records, as a
        consumer's: Apache's broker booting this store reads them the same way."""
        ck = pending.ck
        for offset in offsets:
            ack = wire.AckRecord(
                topic=ck.topic, consumer_group=ck.cid, queue_id=ck.queue_id,
                start_offset=ck.start_offset, ack_offset=offset, pop_time=ck.pop_time,
                broker_name=ck.broker_name or self.ctrl.bcfg.broker_name,
            )
            put = self.ctrl.store.append_message(
                self._revive_record(ack.encode(), pending.revive_qid, wire.ACK_TAG))
            if put.result is None or not put.status.stored:  # then it may be revived twice
                log.warning("revive mark refused", status=put.status.value)
                return

    def _revive(self, pending: PendingCheckpoint) -> bool:
        ck = pending.ck
        store = self.ctrl.store
        for offset in pending.unacked():
            result = store.get_message(ck.topic, ck.queue_id, offset, 1)
            try:
                if result.status is not _S.FOUND or not result.buffers:
                    continue  # gone (retention): nothing to redeliver
                rec = decode_record(result.buffers[0], check_crc=False)
            except RecordError:
                continue
            finally:
                result.release()
            if not self._put_retry(ck, rec):
                return False
        return True

    def _put_retry(self, ck: wire.Checkpoint, rec: StoredMessage) -> bool:
        ctrl = self.ctrl
        sgc = ctrl.groups.find(ck.cid)
        max_times = sgc.retry_max_times if sgc is not None else 16
        props = dict(rec.properties)
        props.pop(wire.PROPERTY_POP_CK, None)
        if rec.reconsume_times == 0 or wire.PROPERTY_FIRST_POP_TIME not in props:
            props[wire.PROPERTY_FIRST_POP_TIME] = str(ck.pop_time)
        dead = rec.reconsume_times + 1 > max_times
        if dead:
            topic = dlq_topic(ck.cid)
            self.ensure_topic(topic, DLQ_NUMS)
            props.setdefault(MessageConst.PROPERTY_RETRY_TOPIC, rec.topic)
        else:
            topic = ck.topic if is_retry_topic(ck.topic) else wire.pop_retry_topic(
                ck.topic, ck.cid)
            self.ensure_topic(topic, RETRY_QUEUE_NUMS)
        if dead:  # a retry keeps the message's own properties (Apache adds no origin id)
            props.setdefault(MessageConst.PROPERTY_ORIGIN_MESSAGE_ID, rec.msg_id)
        msg = Message(
            topic=topic, body=rec.body, queue_id=0, flag=rec.flag, properties=props,
            sys_flag=rec.sys_flag, born_timestamp=rec.born_timestamp,
            born_host=ctrl.store_host, store_host=ctrl.store_host,
            reconsume_times=rec.reconsume_times + 1,
        )
        put = ctrl.store.append_message(msg)
        if put.result is None or not put.status.stored:
            log.warning("revive re-put refused", topic=topic, status=put.status.value)
            return False
        if dead:
            self.dead_lettered += 1
        else:
            self.revived += 1
        return True

    def pending_checkpoints(self) -> Iterator[PendingCheckpoint]:
        return self.ledger.pending()


def _order_count_info(topic: str, queue_id: int, offsets: list[int],
                      counts: Mapping[int, int]) -> list[str]:
    """``orderCountInfo`` items of one queue, as Apache writes them: one per message handed
    out before (count > 0), then the queue's item with the smallest count (0 while a message
    of the batch is new), which older clients read."""
    seen = [o for o in offsets if counts.get(o, 0) > 0]
    items = [wire.order_count_item(topic, queue_id, o, counts[o]) for o in seen]
    least = min((counts[o] for o in seen), default=0) if len(seen) == len(offsets) else 0
    items.append(wire.offset_info_item(topic, queue_id, [least]))
    return items


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(wire.RETRY_PREFIX)
