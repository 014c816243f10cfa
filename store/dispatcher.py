"""Reput: turn CommitLog records into ConsumeQueue units and IndexFile entries (pure).

``Dispatcher.dispatch()`` reads from ``reput_from`` up to the CommitLog's readable end without
CRC checks, stops before an incomplete record (a slave may hold half a record from a master
frame), follows blanks to the next file, and calls ``on_arrival(topic, queue_id, next_offset,
tags_code, store_timestamp)`` per dispatched message for long polling. The Trio shell
(``store/flush.py``) calls it whenever new bytes arrive.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import structlog

from store.commitlog import (
    REC_BLANK,
    REC_CORRUPT,
    CommitLog,
    DispatchRequest,
    is_dispatchable,
)
from store.config import MAX_DISPATCH_BYTES_PER_ROUND, MessageStoreConfig
from store.consume_queue import ConsumeQueue
from store.index_file import IndexService

log = structlog.get_logger(component="dispatcher")

ArrivalListener = Callable[[str, int, int, int, int], None]


class ConsumeQueueTable:
    """Every ConsumeQueue, created on first use: ``consumequeue/<topic>/<queueId>/``."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.root = config.consume_queue_dir
        self.file_size = config.cq_file_size
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        if not os.path.isdir(self.root):
            return
        for topic in sorted(os.listdir(self.root)):
            tdir = os.path.join(self.root, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.lstrip("-").isdigit():
                    continue
                cq = ConsumeQueue(self.root, topic, int(qid), self.file_size)
                cq.load()
                self.queues[(topic, int(qid))] = cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.root, topic, queue_id, self.file_size)
            self.queues[key] = cq
        return cq

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues.values()), default=-1)

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()


class Dispatcher:
    def __init__(
        self,
        commitlog: CommitLog,
        cqs: ConsumeQueueTable,
        index: IndexService | None,
        *,
        on_arrival: ArrivalListener | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.cqs = cqs
        self.index = index
        self.on_arrival = on_arrival
        self.reput_from = 0
        self.last_store_timestamp = 0  # of the newest dispatched record (logicsMsgTimestamp)
        self.stuck_at: int | None = None  # offset of a corrupt record the dispatcher stopped at

    @property
    def behind(self) -> int:
        """Dispatch lag in bytes."""
        return max(0, self.commitlog.max_offset - self.reput_from)

    def dispatch_request(self, req: DispatchRequest) -> None:
        if is_dispatchable(req.sys_flag):
            cq = self.cqs.find_or_create(req.topic, req.queue_id)
            cq.put(req.queue_offset, req.commitlog_offset, req.msg_size, req.tags_code)
        if self.index is not None:
            self.index.build_index(req)
        self.last_store_timestamp = req.store_timestamp

    def dispatch(self, max_bytes: int = MAX_DISPATCH_BYTES_PER_ROUND) -> int:
        """Dispatch up to about ``max_bytes``; returns how many records were dispatched."""
        cl = self.commitlog
        queue = cl.queue
        if self.reput_from < cl.min_offset:
            self.reput_from = cl.min_offset
        count = 0
        budget = max_bytes
        end = cl.max_offset
        arrival = self.on_arrival
        while self.reput_from < end and budget > 0:
            mf = queue.find(self.reput_from)
            if mf is None:
                break
            buf = mf.view[: mf.wrote]
            pos = self.reput_from - mf.file_from
            base = mf.file_from
            while budget > 0:
                size, req = cl.check_record(buf, pos, base, check_crc=False, strict=False)
                if size > 0 and req is not None:
                    self.dispatch_request(req)
                    if arrival is not None and is_dispatchable(req.sys_flag):
                        arrival(
                            req.topic, req.queue_id, req.queue_offset + 1, req.tags_code,
                            req.store_timestamp,
                        )
                    pos += size
                    budget -= size
                    count += 1
                    continue
                if size == REC_BLANK:
                    pos = mf.file_size
                elif size == REC_CORRUPT:
                    if self.stuck_at != base + pos:
                        log.error("dispatch_corrupt_record", offset=base + pos)
                        self.stuck_at = base + pos
                    buf.release()
                    self.reput_from = base + pos
                    return count
                break
            buf.release()
            new_from = base + pos
            if new_from == self.reput_from:
                break  # incomplete record: wait for more bytes
            self.reput_from = new_from
        return count
