"""The timer store's byte layouts, written in one place (pure; no trio).

RocketMQ 5 keeps timer messages in three files under the store root, and so do we, byte for
byte where a 5.x broker reads them:

* ``timerwheel``: ``2 * TIMER_SLOTS_TOTAL`` slots of 32 bytes (slot time / precision, first and
  last TimerLog position of the slot's chain, unit count, magic), indexed by
  ``time / precision % (2 * TIMER_SLOTS_TOTAL)``;
* ``timerlog/``: 20-digit-named segments of 52-byte units (size, previous unit of the same slot,
  magic, enqueue time, delay from that time, CommitLog offset and size of the message, hash of
  its real topic, 8 reserved bytes); a segment's unused tail starts with a 16-byte blank marker;
* ``config/timercheck``: a 4 KiB page whose first 56 bytes are RocketMQ's checkpoint (last read
  time, TimerLog flush position, timer queue offset, master's timer queue offset, data
  version). Bytes 64.. hold our own delivery mark (what RocketMQ leaves zero and never reads):
  where in the CommitLog the delivery of the slot in progress began, so a recovery after a
  kill -9 skips what was already delivered.

Every integer is big-endian.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

#: Slots of the wheel (RocketMQ: 7 days of seconds, whatever the precision); the file holds
#: twice as many.
TIMER_SLOTS_TOTAL: Final = 7 * 24 * 3600
TIMER_BLANK_SLOTS: Final = 60
SLOT: Final = struct.Struct(">qqqii")
SLOT_SIZE: Final = SLOT.size  # 32
WHEEL_BYTES: Final = 2 * TIMER_SLOTS_TOTAL * SLOT_SIZE

UNIT: Final = struct.Struct(">iqiqiqiiq")
UNIT_SIZE: Final = UNIT.size  # 52
#: size, 0, magic: what fills a segment's tail (RocketMQ's TimerLog.BLANK_MAGIC_CODE)
BLANK: Final = struct.Struct(">iqi")
BLANK_MAGIC: Final = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)  # as a signed int32
MIN_BLANK_BYTES: Final = BLANK.size  # 16

MAGIC_DEFAULT: Final = 1
MAGIC_ROLL: Final = 1 << 1
MAGIC_DELETE: Final = 1 << 2

CHECKPOINT: Final = struct.Struct(">qqqqqqq")
CHECKPOINT_PAGE_BYTES: Final = 4096
#: our delivery mark at byte 64: tag, slot time in progress, CommitLog offset its delivery began
DELIVERY_MARK: Final = struct.Struct(">4sqq")
DELIVERY_MARK_AT: Final = 64
DELIVERY_MARK_TAG: Final = b"RQTD"


def is_magic_ok(magic: int) -> bool:
    return (magic | 0xF) == 0xF


class Slot(NamedTuple):
    time_ms: int  # -1: no chain for the asked time
    first_pos: int
    last_pos: int
    num: int
    magic: int


EMPTY_SLOT: Final = Slot(-1, -1, -1, 0, 0)


class Unit(NamedTuple):
    size: int
    prev_pos: int
    magic: int
    enqueue_ms: int
    delay_ms: int  # from enqueue_ms: the delivery time is their sum
    phys_offset: int
    phys_size: int
    topic_hash: int
    reserved: int

    @property
    def delivery_ms(self) -> int:
        return self.enqueue_ms + self.delay_ms


class Checkpoint(NamedTuple):
    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp: int = 0
    counter: int = 0
    #: our delivery mark: slot in progress (-1: none) and the CommitLog offset it began at
    delivering_slot_ms: int = -1
    delivering_from_phys: int = -1


def slot_index(time_ms: int, precision_ms: int) -> int:
    return time_ms // precision_ms % (2 * TIMER_SLOTS_TOTAL)


def read_slot(buf: memoryview | bytes, time_ms: int, precision_ms: int) -> Slot:
    """The slot of ``time_ms``, or EMPTY_SLOT when the wheel's entry belongs to another time."""
    at = slot_index(time_ms, precision_ms) * SLOT_SIZE
    t, first, last, num, magic = SLOT.unpack_from(buf, at)
    if t != time_ms // precision_ms:
        return EMPTY_SLOT
    return Slot(t * precision_ms, first, last, num, magic)


def write_slot(
    buf: memoryview, time_ms: int, precision_ms: int, first: int, last: int, num: int, magic: int
) -> None:
    SLOT.pack_into(
        buf, slot_index(time_ms, precision_ms) * SLOT_SIZE, time_ms // precision_ms, first, last,
        num, magic,
    )


def decode_checkpoint(page: bytes | memoryview) -> Checkpoint:
    read, flush_pos, queue_offset, master_offset, version, stamp, counter = (
        CHECKPOINT.unpack_from(page, 0)
    )
    tag, slot_ms, phys = DELIVERY_MARK.unpack_from(page, DELIVERY_MARK_AT)
    if tag != DELIVERY_MARK_TAG:
        slot_ms, phys = -1, -1
    return Checkpoint(
        read, flush_pos, queue_offset, master_offset, version, stamp, counter, slot_ms, phys
    )


def encode_checkpoint_into(page: memoryview, cp: Checkpoint) -> None:
    CHECKPOINT.pack_into(page, 0, *cp[:7])
    DELIVERY_MARK.pack_into(
        page, DELIVERY_MARK_AT, DELIVERY_MARK_TAG, cp.delivering_slot_ms, cp.delivering_from_phys
    )
