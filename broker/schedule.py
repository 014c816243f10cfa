"""Delay levels (RocketMQ ``ScheduleMessageService``), the synchronous part.

The store puts a message with ``DELAY=n`` into ``SCHEDULE_TOPIC_XXXX`` queue n-1 (keeping
``REAL_TOPIC``/``REAL_QID``). ``deliver_due(level)`` walks that queue from the level's offset and
re-puts every message whose time has come (store time + the level's delay) into its real topic,
its ``DELAY`` kept as a record of the level (``DueProperties``: not scheduled again); it stops
at the first message not yet due and says when it will be. The shell (``broker/node.py``)
calls it when a level is due or a scheduled message arrives.
Offsets per level persist in ``delayOffset.json``.
"""

from __future__ import annotations

from typing import Final

from ..cluster.protocol.message import (
    Message,
    MessageConst,
    RecordError,
    decode_record,
)
from ..store.message_store import GetMessageStatus, MessageStore
from ..store.record import DueProperties, parse_delay_levels
from .offsets import DelayOffsetTable
from .topic_config import SCHEDULE_TOPIC

#: Messages moved per call and level before yielding.
MAX_DELIVER_PER_ROUND: Final = 256
#: Scheduled messages read per store call.
READ_BATCH: Final = 32
#: A re-put the store refused is tried again after this long.
RETRY_AFTER_FAILED_PUT_MS: Final = 1000


class ScheduleMessageService:
    def __init__(self, store: MessageStore, delay_levels: str, store_host: tuple[str, int]):
        self.store = store
        self.levels_ms = parse_delay_levels(delay_levels)
        self.offsets = DelayOffsetTable()
        self.store_host = store_host

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def deliver_due(self, level: int, now_ms: int) -> tuple[int, int | None]:
        """Move due messages of ``level``. -> (moved, ms of the next due message or None)."""
        store = self.store
        if store.dispatch_behind_bytes > 0:
            store.dispatch()
        delay = self.levels_ms[level - 1]
        offset = self.offsets.get(level)
        queue_id = level - 1
        moved = 0
        while moved < MAX_DELIVER_PER_ROUND:
            result = store.get_message(SCHEDULE_TOPIC, queue_id, offset, READ_BATCH)
            if result.status is not GetMessageStatus.FOUND:
                result.release()
                if result.status in (
                    GetMessageStatus.OFFSET_TOO_SMALL,
                    GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                ):
                    offset = result.next_begin_offset
                    self.offsets.set(level, offset)
                    continue
                return moved, None
            try:
                for view, qo in zip(result.buffers, result.queue_offsets, strict=True):
                    try:
                        rec = decode_record(view, check_crc=False)
                    except RecordError:
                        offset = qo + 1
                        continue
                    due = rec.store_timestamp + delay
                    if due > now_ms:
                        self.offsets.set(level, offset)
                        return moved, due
                    # REAL_TOPIC/REAL_QID and DELAY stay on the delivered message, as
                    # RocketMQ's ScheduleMessageService stores them (Java consumers read
                    # getDelayTimeLevel()); DueProperties keep the store from scheduling it again
                    props = DueProperties(rec.properties)
                    topic = props.get(MessageConst.PROPERTY_REAL_TOPIC)
                    qid = props.get(MessageConst.PROPERTY_REAL_QUEUE_ID)
                    if topic:
                        put = store.append_message(
                            Message(
                                topic=topic,
                                body=rec.body,
                                queue_id=int(qid or 0),
                                flag=rec.flag,
                                properties=props,
                                sys_flag=rec.sys_flag,
                                born_timestamp=rec.born_timestamp,
                                born_host=rec.born_host,
                                store_host=self.store_host,
                                reconsume_times=rec.reconsume_times,
                            )
                        )
                        if put.result is None or not put.status.stored:
                            # not stored (disk full, shutting down): try again later
                            self.offsets.set(level, offset)
                            return moved, now_ms + RETRY_AFTER_FAILED_PUT_MS
                    moved += 1
                    offset = qo + 1
                if result.next_begin_offset > offset:
                    offset = result.next_begin_offset
            finally:
                result.release()
            self.offsets.set(level, offset)
        return moved, now_ms
