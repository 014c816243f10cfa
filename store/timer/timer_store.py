"""The timer store (RocketMQ 5 ``TimerMessageStore``), the synchronous part (pure; no trio).

Timer messages are stored to ``rmq_sys_wheel_timer`` queue 0 by the put path
(``store/timer/hook.py``). This store indexes them and delivers them:

* ``enqueue`` reads that queue from where it left off and appends, per message, one TimerLog
  unit to the chain of the wheel slot of its ``TIMER_OUT_MS`` (a time already past goes to the
  next slot to be read; a time beyond ``timerRollWindowSlot`` slots is parked in the window's
  slot with the ROLL magic and put back into the timer topic when that slot comes, as RocketMQ
  does);
* ``deliver_due`` walks, in time order, every slot whose time is over (a slot is delivered when
  the next one begins) and puts each message of its chain, in arrival order, into its real topic
  and queue (``REAL_TOPIC``/``REAL_QID`` and ``TIMER_OUT_MS`` kept, ``TIMER_ENQUEUE_MS``,
  ``TIMER_DEQUEUE_MS`` added, as 5.x consumers see them). It says when the next slot is due, so
  the shell sleeps until then: an idle wheel costs nothing.

Which slots are pending is kept in a heap, rebuilt at ``open`` from the wheel file.

**Exactly once across kill -9 and failover.** The files live in mmap'd pages (a kill -9 loses
none of them; ``flush`` msyncs them for a power loss, every ``timerFlushIntervalMs``). The
checkpoint's delivery mark holds the CommitLog offset before which every delivery is reflected
in the checkpoint (the start of the slot in progress, or the end of the last one). At ``open``
every delivery made after that offset, by this broker before a crash or by another master of
the group while this one was a slave, is found in the consume queues of the topics it went to
(delivered records carry ``TIMER_DEQUEUE_MS``, their ``UNIQ_KEY`` and ``TIMER_OUT_MS``), and
the walk skips them until every slot known at ``open`` is delivered. A store without timer
files (a slave promoted) starts from the head of the timer queue and skips in the same way; a
checkpoint without the mark (Apache's broker wrote the store) has every delivery since the
timer queue's oldest message looked for.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable
from typing import Final

from ...cluster.logging import get_logger
from ...cluster.protocol.message import (
    HostAddr,
    Message,
    MessageConst,
    RecordError,
    StoredMessage,
    decode_record,
    java_map_order,
    tags_code,
)
from ..commitlog import PutMessageStatus
from ..config import TIMER_TOPIC, MessageStoreConfig
from ..mapped_file import MappedFile, MappedFileQueue, run_flush_plan
from ..message_store import GetMessageStatus, MessageStore
from . import layout as L
from .hook import (
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_OUT_MS,
    TIMER_ROLL_TIMES,
    parse_java_long,
    timer_precision,
)

#: Timer-topic messages indexed per ``enqueue`` call before the caller yields.
MAX_ENQUEUE_PER_ROUND: Final = 2048
#: Messages delivered per ``deliver_due`` call before the caller yields.
MAX_DELIVER_PER_ROUND: Final = 2048
READ_BATCH: Final = 32
#: A put the store refused is tried again after this long.
RETRY_AFTER_FAILED_PUT_MS: Final = 1000
#: Consume-queue entries read per queue when looking for deliveries made before a recovery;
#: past this (a promoted slave far behind) a delivery may be repeated, and it is logged.
MAX_RECOVERY_SCAN_ENTRIES: Final = 1_000_000
#: Units walked per slot at most (a damaged chain must not loop).
MAX_CHAIN_UNITS: Final = 10_000_000
_SCAN_CHUNK_BYTES: Final = 64 * 1024  # a multiple of the slot size
_ZERO_CHUNK: Final = bytes(_SCAN_CHUNK_BYTES)
_NAME_RE: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,255}")
_MAX_QUEUE_ID: Final = 1024
_REAL_TOPIC: Final = MessageConst.PROPERTY_REAL_TOPIC
_REAL_QID: Final = MessageConst.PROPERTY_REAL_QUEUE_ID
_UNIQ: Final = MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
_NO_RETRY: Final = frozenset(
    {PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}
)

#: what a delivery is known by: (kind "D" delivered / "R" rolled, UNIQ_KEY, TIMER_OUT_MS, rolls)
Identity = tuple[str, str, str, int]


def _rolls(props: dict[str, str]) -> int:
    value = parse_java_long(props.get(TIMER_ROLL_TIMES, "0"))
    return value if value is not None and value >= 0 else 0


def delivered_identity(rec: StoredMessage) -> Identity | None:
    """The identity of a record a timer delivery wrote (None: not such a record)."""
    props = rec.properties
    uniq = props.get(_UNIQ)
    if TIMER_DEQUEUE_MS not in props or uniq is None:
        return None
    kind = "R" if rec.topic == TIMER_TOPIC else "D"
    return kind, uniq, props.get(TIMER_OUT_MS, ""), _rolls(props)


class _DeliveredBefore:
    """Deliveries written after CommitLog offset ``since`` (found per target queue, lazily)."""

    def __init__(self, store: MessageStore, since: int) -> None:
        self.store = store
        self.since = since
        self._found: dict[tuple[str, int], set[Identity]] = {}

    def contains(self, ident: Identity, topic: str, queue_id: int) -> bool:
        found = self._found.get((topic, queue_id))
        if found is None:
            found = self._found[(topic, queue_id)] = self._scan(topic, queue_id)
        return ident in found

    def _scan(self, topic: str, queue_id: int) -> set[Identity]:
        store = self.store
        lo = store.get_min_offset_in_queue(topic, queue_id)
        hi = store.get_max_offset_in_queue(topic, queue_id)
        while lo < hi:  # first entry at or after ``since``
            mid = (lo + hi) // 2
            if store.get_commitlog_offset_in_queue(topic, queue_id, mid) < self.since:
                lo = mid + 1
            else:
                hi = mid
        end = store.get_max_offset_in_queue(topic, queue_id)
        if end - lo > MAX_RECOVERY_SCAN_ENTRIES:
            get_logger(component="timer").warning(
                "timer recovery scan cut short: deliveries may repeat",
                topic=topic, queue_id=queue_id, entries=end - lo,
            )
            end = lo + MAX_RECOVERY_SCAN_ENTRIES
        found: set[Identity] = set()
        for offset in range(lo, end):
            phys = store.get_commitlog_offset_in_queue(topic, queue_id, offset)
            rec = store.lookup_message_by_offset(phys)
            ident = delivered_identity(rec) if rec is not None else None
            if ident is not None:
                found.add(ident)
        return found


#: TimerLog blocks reserved ahead of its writer at a time (posix_fallocate)
LOG_RESERVE_CHUNK: Final = 1024 * 1024


class TimerStore:
    """The timer wheel, TimerLog and checkpoint of one broker's store (module docstring)."""

    def __init__(
        self,
        store: MessageStore,
        cfg: MessageStoreConfig,
        store_host: HostAddr,
        now_ms: Callable[[], int],
    ) -> None:
        self.store = store
        self.cfg = cfg
        self.store_host = store_host
        self.now_ms = now_ms
        self.precision = timer_precision(cfg.timer_precision_ms)
        roll = cfg.timer_roll_window_slot
        if roll < 2 or roll > L.TIMER_SLOTS_TOTAL - L.TIMER_BLANK_SLOTS:
            roll = L.TIMER_SLOTS_TOTAL - L.TIMER_BLANK_SLOTS
        self.roll_window_ms = roll * self.precision
        self.log = get_logger(component="timer")
        self.read_ms = 0  # every slot before this one is delivered
        self.queue_offset = 0  # next timer-topic offset to index
        self.delivered = 0
        self.rolled = 0
        self.writes = 0  # checkpoint writes: the shell flushes when this moved
        self._pending: list[int] = []  # slot times with a chain not yet delivered
        #: pending slot time -> the earliest TIMER_OUT_MS of a message indexed into it late
        #: (its time was already read: it waits in a later slot than its own)
        self._late: dict[int, int] = {}
        self._done: set[Identity] = set()  # delivered from the slot in progress
        self._before: _DeliveredBefore | None = None
        self._before_until_ms = -1  # ... consulted until this slot is delivered
        self._before_queue_end = 0  # ... and the timer queue indexed up to here
        self._safe_phys = 0
        self._cp: MappedFile | None = None
        self._wheel: MappedFile | None = None
        self._log: MappedFileQueue | None = None
        self._cp_fields = L.Checkpoint()

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        cfg = self.cfg
        os.makedirs(os.path.dirname(cfg.timer_check_path), exist_ok=True)
        fresh = not os.path.exists(cfg.timer_check_path)
        self._cp = MappedFile(cfg.timer_check_path, 0, L.CHECKPOINT_PAGE_BYTES, create=fresh)
        cp = L.decode_checkpoint(self._cp.view)
        self._cp_fields = cp
        self._wheel = MappedFile(
            cfg.timer_wheel_path, 0, L.WHEEL_BYTES, create=not os.path.exists(cfg.timer_wheel_path)
        )
        # blocks for the whole checkpoint page and wheel now: a write through their mappings
        # must never meet a full disk (SIGBUS); ENOSPC here is an OSError the caller retries
        self._cp.reserve(L.CHECKPOINT_PAGE_BYTES)
        self._wheel.reserve(L.WHEEL_BYTES)
        self._log = MappedFileQueue(cfg.timer_log_dir, cfg.mapped_file_size_timer_log)
        self._log.load()
        end, last_unit = self._recover_log(cp.last_timer_log_flush_pos)
        self.queue_offset = self._resume_offset(cp, last_unit)
        now = self.now_ms()
        floor_now = now - now % self.precision
        oldest = floor_now - (L.TIMER_SLOTS_TOTAL - L.TIMER_BLANK_SLOTS) * self.precision
        self.read_ms = max(cp.last_read_time_ms - cp.last_read_time_ms % self.precision, oldest)
        if fresh or cp.last_read_time_ms <= 0:
            self.read_ms = floor_now - self.precision
        self._pending = self._scan_wheel()
        self._start_recovery(cp, fresh)
        self._write_cp()
        self.log.info(
            "timer store open", read_ms=self.read_ms, queue_offset=self.queue_offset,
            timer_log_end=end, pending_slots=len(self._pending),
            recovery_since=self._before.since if self._before else None,
        )

    def _start_recovery(self, cp: L.Checkpoint, fresh: bool) -> None:
        store = self.store
        queue_end = store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        if fresh:
            since = store.get_commitlog_offset_in_queue(TIMER_TOPIC, 0, self.queue_offset)
            if self.queue_offset >= queue_end:
                since = store.max_phys_offset
        elif cp.delivering_from_phys < 0:
            # a checkpoint without our delivery mark: Apache's broker wrote it, and its read
            # time may be far behind what it delivered (5.3.1 killed -9 left the values of its
            # boot): any message still in the timer queue may have been delivered already
            low = store.get_min_offset_in_queue(TIMER_TOPIC, 0)
            since = (store.get_commitlog_offset_in_queue(TIMER_TOPIC, 0, low)
                     if low < queue_end else store.max_phys_offset)
        else:
            since = cp.delivering_from_phys
        self._safe_phys = since
        if since >= store.max_phys_offset:
            return  # nothing was written since: nothing to skip
        self._before = _DeliveredBefore(store, since)
        self._before_until_ms = max(self._pending, default=self.read_ms)
        self._before_queue_end = queue_end

    def close(self) -> None:
        if self._cp is None:
            return
        self.flush()
        for mf in (self._cp, self._wheel):
            if mf is not None:
                mf.close()
        if self._log is not None:
            self._log.close()
        self._cp = self._wheel = None
        self._log = None

    def flush(self) -> None:
        """msync the TimerLog, the wheel and the checkpoint (blocking: a worker thread may
        run it; ``flush_plan`` first, on the caller's thread)."""
        log_, wheel, cp = self._log, self._wheel, self._cp
        if log_ is None or wheel is None or cp is None:
            return
        upto = log_.max_offset
        plan = log_.flush_plan(upto)
        run_flush_plan(plan)
        log_.mark_flushed(plan, upto)
        wheel.flush_range(0, L.WHEEL_BYTES)
        self._cp_fields = self._cp_fields._replace(last_timer_log_flush_pos=upto)
        self._encode_cp()
        cp.flush_range(0, L.CHECKPOINT_PAGE_BYTES)

    def _write_cp(self) -> None:
        """Write the checkpoint page (counted in ``writes``: the shell flushes after)."""
        self._encode_cp()
        self.writes += 1

    def _encode_cp(self) -> None:
        if self._cp is None:
            return
        self._cp_fields = self._cp_fields._replace(
            last_read_time_ms=self.read_ms,
            last_timer_queue_offset=self.queue_offset,
            master_timer_queue_offset=self.queue_offset,
            delivering_slot_ms=-1,
            delivering_from_phys=self._safe_phys,
        )
        L.encode_checkpoint_into(self._cp.view, self._cp_fields)

    # ------------------------------------------------------------------ recovery

    def _recover_log(self, flush_pos: int) -> tuple[int, L.Unit | None]:
        """Re-apply the units written since (about) the last flush to the wheel and cut the
        TimerLog after its last whole unit. -> (end of the log, its last unit)."""
        log_ = self._log
        assert log_ is not None and self._wheel is not None
        files = log_.files
        if not files:
            return 0, None
        begin = max(0, flush_pos - log_.file_size)
        index = next((i for i, mf in enumerate(files) if mf.file_from <= begin < mf.file_end), 0)
        end = files[index].file_from
        last: L.Unit | None = None
        for mf in files[index:]:
            pos, stop = 0, False
            while pos + L.UNIT_SIZE <= mf.file_size:
                size, _prev, magic = L.BLANK.unpack_from(mf.mm, pos)
                if magic == L.BLANK_MAGIC:
                    pos = mf.file_size
                    break
                if size != L.UNIT_SIZE or not L.is_magic_ok(magic) or magic == 0:
                    stop = True
                    break
                unit = L.Unit(*L.UNIT.unpack_from(mf.mm, pos))
                self._revise_slot(unit.delivery_ms, mf.file_from + pos)
                last = unit
                pos += L.UNIT_SIZE
            end = mf.file_from + pos
            if stop:
                break
        log_.truncate_dirty(end)
        return end, last

    def _revise_slot(self, time_ms: int, pos: int) -> None:
        wheel = self._wheel
        assert wheel is not None
        slot = L.read_slot(wheel.view, time_ms, self.precision)
        if slot.time_ms == -1:
            L.write_slot(wheel.view, time_ms, self.precision, pos, pos, 1, 0)
        elif pos > slot.last_pos:
            L.write_slot(
                wheel.view, time_ms, self.precision, slot.first_pos, pos, slot.num, slot.magic
            )

    def _resume_offset(self, cp: L.Checkpoint, last_unit: L.Unit | None) -> int:
        store = self.store
        offset = cp.last_timer_queue_offset
        if last_unit is not None:
            rec = store.lookup_message_by_offset(last_unit.phys_offset)
            if rec is not None and rec.topic == TIMER_TOPIC:
                offset = max(offset, rec.queue_offset + 1)
        low = store.get_min_offset_in_queue(TIMER_TOPIC, 0)
        high = store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        return min(max(offset, low), high)

    def _scan_wheel(self) -> list[int]:
        """Times of the wheel's slots from ``read_ms`` on that hold a chain (a heap)."""
        wheel = self._wheel
        assert wheel is not None
        p = self.precision
        span = 2 * L.TIMER_SLOTS_TOTAL
        first_t = self.read_ms // p
        times: list[int] = []
        mm = wheel.mm
        for chunk_at in range(0, L.WHEEL_BYTES, _SCAN_CHUNK_BYTES):
            chunk = mm[chunk_at : chunk_at + _SCAN_CHUNK_BYTES]
            if chunk == _ZERO_CHUNK[: len(chunk)]:
                continue  # (nearly all of it: memcmp speed)
            for at in range(0, len(chunk), L.SLOT_SIZE):
                t, _first, last, _num, _magic = L.SLOT.unpack_from(chunk, at)
                index = (chunk_at + at) // L.SLOT_SIZE
                if first_t <= t < first_t + span and t % span == index and last >= 0:
                    times.append(t * p)
        heapq.heapify(times)
        return times

    # ------------------------------------------------------------------ enqueue

    @property
    def pending_slots(self) -> int:
        return len(self._pending)

    def enqueue(self) -> int:
        """Index the timer-topic messages stored since the last call (at most
        MAX_ENQUEUE_PER_ROUND). -> how many were read."""
        store = self.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()
        read = 0
        while read < MAX_ENQUEUE_PER_ROUND:
            result = store.get_message(TIMER_TOPIC, 0, self.queue_offset, READ_BATCH)
            if result.status is not GetMessageStatus.FOUND:
                result.release()
                if result.status in (
                    GetMessageStatus.OFFSET_TOO_SMALL,
                    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                ) and result.next_begin_offset != self.queue_offset:
                    self.queue_offset = result.next_begin_offset
                    continue
                break
            try:
                for view, qo in zip(result.buffers, result.queue_offsets, strict=True):
                    try:
                        rec = decode_record(view, check_crc=False)
                    except RecordError:
                        rec = None
                    if rec is not None:
                        self._index(rec)
                    self.queue_offset = qo + 1
                    read += 1
                if result.next_begin_offset > self.queue_offset:
                    self.queue_offset = result.next_begin_offset
            finally:
                result.release()
        if read:
            self._write_cp()
        return read

    def _index(self, rec: StoredMessage) -> None:
        """One TimerLog unit for ``rec`` (RocketMQ ``doEnqueue``)."""
        props = rec.properties
        out = parse_java_long(props.get(TIMER_OUT_MS, ""))
        real_topic = props.get(_REAL_TOPIC, "")
        if out is None or not _NAME_RE.fullmatch(real_topic):
            self.log.warning("timer message without a valid TIMER_OUT_MS or REAL_TOPIC skipped",
                             offset=rec.commitlog_offset)
            return
        p = self.precision
        now = self.now_ms()
        write_ms = now - now % p
        delayed = max(out, self.read_ms)
        magic = L.MAGIC_DEFAULT
        window = self.roll_window_ms
        if delayed - write_ms >= window:
            magic |= L.MAGIC_ROLL
            if delayed - write_ms - window < window // p // 3 * p:
                delayed = write_ms + window // p // 2 * p
            else:
                delayed = write_ms + window
        wheel = self._wheel
        assert wheel is not None
        slot = L.read_slot(wheel.view, delayed, p)
        unit = L.UNIT.pack(
            L.UNIT_SIZE, slot.last_pos, magic, write_ms, delayed - write_ms,
            rec.commitlog_offset, rec.store_size, tags_code(real_topic), 0,
        )
        pos = self._append_unit(unit)
        if not magic & L.MAGIC_ROLL and delayed > out:
            at = delayed - delayed % p
            self._late[at] = min(out, self._late.get(at, out))
        if slot.time_ms == -1:
            L.write_slot(wheel.view, delayed, p, pos, pos, 1, 0)
            heapq.heappush(self._pending, delayed - delayed % p)
        else:
            L.write_slot(wheel.view, delayed, p, slot.first_pos, pos, slot.num + 1, slot.magic)
        if self._before is not None and rec.queue_offset < self._before_queue_end:
            self._before_until_ms = max(self._before_until_ms, delayed - delayed % p)

    def _append_unit(self, unit: bytes) -> int:
        log_ = self._log
        assert log_ is not None
        mf = log_.last_file_for_write()
        if mf.remaining < L.UNIT_SIZE + L.MIN_BLANK_BYTES:
            mf.reserve(mf.file_size)
            mf.append(L.BLANK.pack(mf.remaining, 0, L.BLANK_MAGIC))
            mf.wrote = mf.file_size
            mf = log_.last_file_for_write()
        # blocks before bytes (ENOSPC raises here, before anything is written: the record is
        # indexed again next round; a write through the mapping never meets a full disk)
        mf.reserve(mf.wrote + len(unit), LOG_RESERVE_CHUNK)
        pos = mf.file_from + mf.wrote
        mf.append(unit)
        return pos

    # ------------------------------------------------------------------ deliver

    def deliver_due(self) -> int | None:
        """Deliver the slots whose time is over (at most about MAX_DELIVER_PER_ROUND messages).
        -> when to call again (ms; ``now`` when there is more to do), or None: nothing
        pending (an ``enqueue`` may add some)."""
        p = self.precision
        moved = 0
        while self._pending:
            now = self.now_ms()
            t = self._pending[0]
            if t + p > now:
                self._advance_idle(now)
                return t + p
            if moved >= MAX_DELIVER_PER_ROUND or self.cfg.timer_stop_dequeue:
                return now if not self.cfg.timer_stop_dequeue else now + RETRY_AFTER_FAILED_PUT_MS
            count = self._deliver_slot(t)
            if count is None:
                return now + RETRY_AFTER_FAILED_PUT_MS
            moved += count
            while self._pending and self._pending[0] == t:
                heapq.heappop(self._pending)
            self._late.pop(t, None)
            self.read_ms = t + p
            self._done.clear()
            self._maybe_end_recovery()
            self._safe_phys = self._known_upto()
            self._write_cp()
        self._advance_idle(self.now_ms())
        return None

    def delivered_through_ms(self, now: int) -> int | None:
        """A time up to which every message of the timer queue is delivered: each one whose
        ``TIMER_OUT_MS`` is at or before it was put where it goes (never past ``now``).
        None while the queue holds messages not indexed yet (their times are unknown). POP's
        revive waits on it for the acks Apache's broker sends through the timer."""
        if self.queue_offset < self.store.get_max_offset_in_queue(TIMER_TOPIC, 0):
            return None
        through = now
        if self._pending:  # a slot's own messages are due at or after its time
            through = min(through, self._pending[0] - 1)
        if self._late:
            through = min(through, min(self._late.values()) - 1)
        return through

    def _advance_idle(self, now: int) -> None:
        """No slot before ``now`` is pending: what is due at once goes to the previous slot."""
        p = self.precision
        idle_read = now - now % p - p
        if idle_read > self.read_ms:
            self.read_ms = idle_read
            self._maybe_end_recovery()
            self._encode_cp()  # (not worth a flush of its own: a recovery walks empty slots)

    def _known_upto(self) -> int:
        """The CommitLog offset before which every delivery is reflected in the checkpoint:
        the log's end, or while deliveries from before ``open`` may be ahead, where they
        may begin."""
        before = self._before
        return self.store.max_phys_offset if before is None else before.since

    def _maybe_end_recovery(self) -> None:
        if (
            self._before is not None
            and self.read_ms > self._before_until_ms
            and self.queue_offset >= self._before_queue_end
        ):
            self._before = None

    def _deliver_slot(self, t: int) -> int | None:
        """Deliver slot ``t``'s chain in arrival order. -> messages put, or None: a put was
        refused for now (the slot stays pending; what was put is not put again)."""
        wheel = self._wheel
        assert wheel is not None
        slot = L.read_slot(wheel.view, t, self.precision)
        if slot.time_ms == -1:
            return 0
        if not self._done:
            self._safe_phys = self._known_upto()
            self._write_cp()
        units = self._chain(slot.last_pos)
        count = 0
        for unit in reversed(units):
            outcome = self._deliver_unit(unit)
            if outcome is None:
                return None
            count += outcome
        return count

    def _chain(self, last_pos: int) -> list[L.Unit]:
        log_ = self._log
        assert log_ is not None
        units: list[L.Unit] = []
        pos = last_pos
        while pos >= 0 and len(units) < MAX_CHAIN_UNITS:
            view = log_.read(pos, L.UNIT_SIZE)
            if view is None:
                break
            unit = L.Unit(*L.UNIT.unpack_from(view, 0))
            view.release()
            if unit.size != L.UNIT_SIZE or unit.prev_pos >= pos:
                break
            units.append(unit)
            pos = unit.prev_pos
        return units

    def _deliver_unit(self, unit: L.Unit) -> int | None:
        """Put one unit's message where it goes. -> 1 put, 0 skipped, None refused for now."""
        rec = self.store.lookup_message_by_offset(unit.phys_offset)
        if rec is None or rec.topic != TIMER_TOPIC or rec.store_size != unit.phys_size:
            self.log.warning("timer unit points at no timer message", offset=unit.phys_offset)
            return 0
        roll = bool(unit.magic & L.MAGIC_ROLL)
        msg = self._converted(rec, unit, roll)
        if msg is None:
            self.log.warning("timer message with a bad REAL_TOPIC/REAL_QID skipped",
                             offset=rec.commitlog_offset)
            return 0
        uniq = rec.properties.get(_UNIQ, "")
        out = rec.properties.get(TIMER_OUT_MS, "")
        rolls = _rolls(rec.properties)
        ident: Identity = ("R", uniq, out, rolls + 1) if roll else ("D", uniq, out, rolls)
        if uniq and ident in self._done:
            return 0
        before = self._before
        if uniq and before is not None and before.contains(ident, msg.topic, msg.queue_id):
            self._done.add(ident)
            return 0
        put = self.store.append_message(msg)
        if put.result is None or not put.status.stored:
            if put.status in _NO_RETRY:
                self.log.warning("timer message refused by the store, dropped",
                                 offset=rec.commitlog_offset, status=put.status.value)
                return 0
            return None
        if uniq:
            self._done.add(ident)
        if roll:
            self.rolled += 1
        else:
            self.delivered += 1
        return 1

    def _converted(self, rec: StoredMessage, unit: L.Unit, roll: bool) -> Message | None:
        """The message a delivery (or a roll) puts (RocketMQ ``convert``)."""
        props = dict(rec.properties)
        props[TIMER_ENQUEUE_MS] = str(unit.enqueue_ms)
        if roll:
            props[TIMER_ROLL_TIMES] = str(_rolls(props) + 1)
        props[TIMER_DEQUEUE_MS] = str(self.now_ms())
        if roll:
            topic, queue_id = TIMER_TOPIC, 0
        else:
            # REAL_TOPIC / REAL_QID stay on the delivered message, as Apache leaves them
            topic = props.get(_REAL_TOPIC, "")
            qid = parse_java_long(props.get(_REAL_QID, ""))
            if not _NAME_RE.fullmatch(topic) or qid is None or not 0 <= qid < _MAX_QUEUE_ID:
                return None
            queue_id = qid
        return Message(
            topic=topic,
            body=rec.body,
            queue_id=queue_id,
            flag=rec.flag,
            properties=java_map_order(props),
            sys_flag=rec.sys_flag,
            born_timestamp=rec.born_timestamp,
            born_host=rec.born_host,
            store_host=self.store_host,
            reconsume_times=rec.reconsume_times,
        )
