"""What POP consumption remembers, as plain data (no Trio, no store): the revive ledger and the
orderly blocks.

``ReviveLedger`` is the revive scan's view of the revive log: every checkpoint read and not yet
finished, with the messages of it acked so far. A checkpoint finishes when all its messages are
acked, or when its invisible time ran out and the scan re-put the rest into the pop retry topic.
The revive offset of a revive queue (how far a restarted scan must go back) is the log offset
of its oldest unfinished checkpoint.

``OrderBlocks`` is the orderly pop's rule: one batch in flight per (topic, group, queue) until
every message of it is acked; a batch whose invisible time ran out is popped again from its
first unacked message, each message counting how often it was handed out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import attrs

from ...cluster.protocol.pop import AckRecord, Checkpoint

#: (group, topic, queueId, startOffset, popTime): a checkpoint's identity, as an ack names it.
CkKey = tuple[str, str, int, int, int]
#: Checkpoints the ledger holds at most (older unfinished ones are revived first when full).
MAX_PENDING_CHECKPOINTS: Final = 1_000_000
#: Receipt handles one orderly batch honours (each change-invisible adds one).
MAX_HANDLES_PER_BLOCK: Final = 64


def ck_key(ck: Checkpoint) -> CkKey:
    return (ck.cid, ck.topic, ck.queue_id, ck.start_offset, ck.pop_time)


def ack_key(ack: AckRecord) -> CkKey:
    return (ack.consumer_group, ack.topic, ack.queue_id, ack.start_offset, ack.pop_time)


@attrs.define
class PendingCheckpoint:
    ck: Checkpoint
    revive_qid: int
    #: where the checkpoint record sits in its revive queue
    log_offset: int
    acked: set[int] = attrs.field(factory=set)

    def unacked(self) -> list[int]:
        return [o for o in self.ck.offsets if o not in self.acked]


class ReviveLedger:
    def __init__(self) -> None:
        self._pending: dict[CkKey, PendingCheckpoint] = {}
        #: acks read before their checkpoint (another broker's log order, a replayed log)
        self._early_acks: dict[CkKey, set[int]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add_checkpoint(self, ck: Checkpoint, revive_qid: int, log_offset: int) -> None:
        key = ck_key(ck)
        if key in self._pending:
            return
        pending = PendingCheckpoint(ck, revive_qid, log_offset)
        pending.acked |= self._early_acks.pop(key, set())
        if not pending.unacked():
            return
        self._pending[key] = pending

    def add_ack(self, ack: AckRecord) -> None:
        key = ack_key(ack)
        pending = self._pending.get(key)
        if pending is None:
            if len(self._early_acks) < MAX_PENDING_CHECKPOINTS:
                self._early_acks.setdefault(key, set()).add(ack.ack_offset)
            return
        pending.acked.add(ack.ack_offset)
        if not pending.unacked():
            del self._pending[key]

    def due(self, now_ms: int) -> list[PendingCheckpoint]:
        """Unfinished checkpoints whose invisible time ran out, oldest first."""
        out = [p for p in self._pending.values() if p.ck.revive_time <= now_ms]
        out.sort(key=lambda p: p.ck.revive_time)
        return out

    def finish(self, pending: PendingCheckpoint) -> None:
        self._pending.pop(ck_key(pending.ck), None)

    def revive_offset(self, revive_qid: int, scanned: int) -> int:
        """How far back a restarted scan of ``revive_qid`` must start."""
        lowest = scanned
        for p in self._pending.values():
            if p.revive_qid == revive_qid and p.log_offset < lowest:
                lowest = p.log_offset
        return lowest

    def forget_early_acks(self) -> None:
        """Acks whose checkpoint never came (after a full scan round): drop them."""
        self._early_acks.clear()

    def pending(self) -> Iterator[PendingCheckpoint]:
        return iter(self._pending.values())


# =========================================================================== orderly


OrderKey = tuple[str, str, int]  # (topic, group, queueId)


@attrs.define
class OrderBlock:
    offsets: list[int]
    pop_time: int
    #: the deadline per message (change-invisible moves one message's)
    deadlines: dict[int, int]
    acked: set[int] = attrs.field(factory=set)
    #: how often each message was handed out before this batch (its reconsume count)
    counts: dict[int, int] = attrs.field(factory=dict)
    attempt_id: str | None = None
    #: pop times a receipt handle of this batch may carry (change-invisible issues new ones)
    handles: set[int] = attrs.field(factory=set)

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]


class OrderBlocks:
    def __init__(self) -> None:
        self._blocks: dict[OrderKey, OrderBlock] = {}

    def blocked(self, key: OrderKey, now_ms: int, attempt_id: str | None = None) -> bool:
        """True while a batch of this queue is in flight (some message unacked and still
        invisible). The same attempt id retrying gets its batch again (not blocked)."""
        block = self._blocks.get(key)
        if block is None:
            return False
        rest = block.unacked()
        if not rest:
            return False
        if attempt_id is not None and attempt_id == block.attempt_id:
            return False
        return any(block.deadlines.get(o, 0) > now_ms for o in rest)

    def popped(
        self, key: OrderKey, offsets: list[int], pop_time: int, invisible_ms: int,
        attempt_id: str | None = None,
    ) -> dict[int, int]:
        """Record a batch handed out; -> each message's count (0 the first time)."""
        old = self._blocks.get(key)
        counts: dict[int, int] = {}
        for o in offsets:
            before = old.counts.get(o, -1) if old is not None else -1
            counts[o] = before + 1
        self._blocks[key] = OrderBlock(
            offsets=list(offsets), pop_time=pop_time,
            deadlines={o: pop_time + invisible_ms for o in offsets},
            counts=counts, attempt_id=attempt_id, handles={pop_time},
        )
        return counts

    def ack(self, key: OrderKey, offset: int, pop_time: int) -> int | None:
        """Ack one message of the batch popped at ``pop_time``; -> the offset to commit
        (the first message not yet acked, or past the batch), None for a stale handle."""
        block = self._blocks.get(key)
        if block is None or pop_time not in block.handles or offset not in block.deadlines:
            return None
        block.acked.add(offset)
        rest = block.unacked()
        if rest:
            return rest[0]
        del self._blocks[key]
        return block.offsets[-1] + 1

    def change_invisible(
        self, key: OrderKey, offset: int, pop_time: int, new_pop_time: int, invisible_ms: int
    ) -> bool:
        block = self._blocks.get(key)
        if block is None or pop_time not in block.handles or offset not in block.deadlines:
            return False
        if len(block.handles) < MAX_HANDLES_PER_BLOCK:
            block.handles.add(new_pop_time)
        block.deadlines[offset] = new_pop_time + invisible_ms
        return True

    def next_deadline(self, topic: str, group: str) -> int | None:
        """The earliest time an in-flight batch of (topic, group) becomes visible again."""
        best: int | None = None
        for (t, g, _q), block in self._blocks.items():
            if t != topic or g != group:
                continue
            for o in block.unacked():
                d = block.deadlines.get(o, 0)
                best = d if best is None or d < best else best
        return best

    def count(self, key: OrderKey, offset: int) -> int:
        block = self._blocks.get(key)
        return block.counts.get(offset, 0) if block is not None else 0

    def reset(self, key: OrderKey) -> None:
        self._blocks.pop(key, None)
