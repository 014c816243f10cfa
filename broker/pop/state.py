"""What POP consumption remembers, as plain data (no Trio, no store): the revive ledger and the
orderly blocks.

``ReviveLedger`` is the revive scan's view of the revive log: every checkpoint read and not yet
finished, with the messages of it acked so far. A checkpoint finishes when all its messages are
acked, or when its invisible time ran out and the scan re-put the rest into the pop retry topic.
The revive offset of a revive queue (how far a restarted scan must go back) is the log offset
of its oldest unfinished checkpoint.

``OrderBlocks`` is the orderly pop's rule: one batch in flight per (topic, group, queue) until
every message of it is acked; a batch whose invisible time ran out is popped again from its
first unacked message, each message counting how often it was handed out (a pop retrying the
attempt id of the batch in flight gets that batch again, its counts unchanged: ``next_counts``).
The blocks are kept in ``config/consumerOrderInfo.json`` in the layout of Apache's
``ConsumerOrderInfoManager`` (persisted with the consumer offsets, as Apache persists its own
periodically), so a batch in flight stays in flight, and its counts and attempt id stay, across
a restart or a kill -9.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from ...cluster.protocol import fastjson
from ...cluster.protocol.pop import MAX_POP_MSG_NUMS, AckRecord, Checkpoint

#: (group, topic, queueId, startOffset, popTime): a checkpoint's identity, as an ack names it.
CkKey = tuple[str, str, int, int, int]
#: Checkpoints the ledger holds at most (older unfinished ones are revived first when full).
MAX_PENDING_CHECKPOINTS: Final = 1_000_000
#: Receipt handles one orderly batch honours (each change-invisible adds one).
MAX_HANDLES_PER_BLOCK: Final = 64
#: Apache's file of orderly pops in flight (``BrokerPathConfigHelper.getConsumerOrderInfoPath``).
ORDER_INFO_FILE: Final = "consumerOrderInfo.json"
#: Blocks the order info file may hold (one per topic, group and queue popped orderly).
MAX_ORDER_BLOCKS: Final = 1_000_000
#: Longest attempt id an orderly pop's block keeps (the 5.x SDKs send a UUID: 36 characters;
#: the proxy passes on at most as many as this).
MAX_ATTEMPT_ID_CHARS: Final = 128


def attempt_or_none(value: object) -> str | None:
    """An orderly pop's attempt id (client text: from a request, or from the order info file)
    as the blocks take it: printable ASCII of 1 to ``MAX_ATTEMPT_ID_CHARS`` characters, else
    None: no attempt, whose pops are counted and blocked as new ones (an empty id retrying
    itself would pass every block)."""
    if isinstance(value, str) and 0 < len(value) <= MAX_ATTEMPT_ID_CHARS \
            and value.isascii() and value.isprintable():
        return value
    return None


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
    #: the record came through a timer (Apache writes them so: the checkpoint due 1 s before
    #: its revive time, its acks at it): it waits until the timer delivered its acks too
    delayed: bool = False

    def unacked(self) -> list[int]:
        return [o for o in self.ck.offsets if o not in self.acked]

    def is_due(self, now_ms: int, timer_through_ms: int) -> bool:
        revive_time = self.ck.revive_time
        return revive_time <= now_ms and (not self.delayed or revive_time <= timer_through_ms)


class ReviveLedger:
    def __init__(self) -> None:
        self._pending: dict[CkKey, PendingCheckpoint] = {}
        #: acks read before their checkpoint (another broker's log order, a replayed log)
        self._early_acks: dict[CkKey, set[int]] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add_checkpoint(
        self, ck: Checkpoint, revive_qid: int, log_offset: int, delayed: bool = False
    ) -> None:
        key = ck_key(ck)
        if key in self._pending:
            return
        pending = PendingCheckpoint(ck, revive_qid, log_offset, delayed=delayed)
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

    def due(self, now_ms: int, timer_through_ms: int = -1) -> list[PendingCheckpoint]:
        """Unfinished checkpoints whose invisible time ran out, oldest first; one that came
        through a timer only once the timer delivered every message due up to its revive
        time (``timer_through_ms``: its acks are among them)."""
        out = [p for p in self._pending.values() if p.is_due(now_ms, timer_through_ms)]
        out.sort(key=lambda p: p.ck.revive_time)
        return out

    def earliest_revive_time(self) -> int | None:
        """When the first unfinished checkpoint's invisible time runs out (None: none)."""
        return min((p.ck.revive_time for p in self._pending.values()), default=None)

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
    #: the pop's invisible time (a message's deadline unless change-invisible moved it)
    invisible_ms: int = 0

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def to_json_obj(self) -> dict[str, Any]:
        """Apache's ``OrderInfo`` under the names its fastjson annotations give the fields
        (``o`` offsets as the first one and the others' distances from it, ``cm`` acks as
        bits by position, ``oc`` counts and ``ot`` moved deadlines only where they differ,
        keyed by offset; ``l`` last consume time, ``i`` invisible time, ``a`` attempt id)."""
        first = self.offsets[0]
        default = self.pop_time + self.invisible_ms
        moved = {o: d for o, d in self.deadlines.items() if d != default}
        counts = {o: c for o, c in self.counts.items() if c > 0}
        return {
            "popTime": self.pop_time,
            "i": self.invisible_ms,
            "o": [first] + [o - first for o in self.offsets[1:]],
            "ot": moved or None,
            "oc": counts or None,
            "l": self.pop_time,
            "cm": sum(1 << i for i, o in enumerate(self.offsets) if o in self.acked),
            "a": self.attempt_id,
        }

    @classmethod
    def from_json_obj(cls, obj: Mapping[str, Any]) -> OrderBlock:
        """One ``OrderInfo`` (Apache's short names, or the long ones our earlier versions
        wrote); ValueError for anything malformed."""
        def field(short: str, long: str) -> Any:
            return obj.get(short, obj.get(long))

        pop_time, invisible = _int(obj.get("popTime")), _int(field("i", "invisibleTime") or 0)
        raw = field("o", "offsetList")
        if not isinstance(raw, list) or not 0 < len(raw) <= MAX_POP_MSG_NUMS:
            raise ValueError("offsetList must list 1 to 32 offsets")
        first = _int(raw[0])
        offsets = [first] + [first + _int(d) for d in raw[1:]]
        bits = _int(field("cm", "commitOffsetBit") or 0)
        moved = _int_map(field("ot", "offsetNextVisibleTime"))
        counted = _int_map(field("oc", "offsetConsumedCount"))
        return cls(
            offsets=offsets, pop_time=pop_time,
            deadlines={o: moved.get(o, pop_time + invisible) for o in offsets},
            acked={o for i, o in enumerate(offsets) if bits >> i & 1},
            # a message of the batch without a count was handed out once (count 0), as
            # Apache's file leaves it: its next pop counts 1
            counts={o: counted.get(o, 0) for o in offsets},
            attempt_id=attempt_or_none(field("a", "attemptId")),
            handles={pop_time}, invisible_ms=invisible,
        )


def next_counts(
    old: OrderBlock | None, offsets: list[int], attempt_id: str | None
) -> dict[int, int]:
    """How often each message of a batch about to be handed out was handed out before, given
    the queue's block (None: no batch of it in flight or unacked).

    A message of the block's batch counts once more; any other counts 0. But a pop that
    retries the attempt of the block (the same attempt id, not None) keeps the block's counts:
    its client never got that batch (its receive was lost, or its deadline passed), so the
    messages were not delivered again. Apache's ``OrderInfo.mergeOffsetConsumedCount`` does
    the same (5.3.1: its previous attempt id equal to the new one, not null, keeps the
    previous counts as they are), whether or not the batch turned visible meanwhile."""
    if old is None:
        return {o: 0 for o in offsets}
    if attempt_id is not None and attempt_id == old.attempt_id:
        return {o: old.counts.get(o, 0) for o in offsets}
    return {o: old.counts[o] + 1 if o in old.counts else 0 for o in offsets}


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"not a non-negative long: {value!r}")
    return value


def _int_map(value: Any) -> dict[int, int]:
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_POP_MSG_NUMS:
        raise ValueError("not a map of at most 32 offsets")
    return {_int(int(k)) if isinstance(k, str) and k.isdigit() else _int(k): _int(v)
            for k, v in value.items()}


class OrderBlocks:
    def __init__(self) -> None:
        self._blocks: dict[OrderKey, OrderBlock] = {}
        #: a block changed since the file was last written
        self.changed = False

    def encode(self) -> bytes:
        """``consumerOrderInfo.json``: ``{"table": {"<topic>@<group>": {<queueId>: info}}}``
        (the queue id an unquoted integer key, as fastjson writes Apache's)."""
        table: dict[str, dict[int, Any]] = {}
        for (topic, group, qid), block in self._blocks.items():
            table.setdefault(f"{topic}@{group}", {})[qid] = block.to_json_obj()
        return fastjson.dumps({"table": table})

    def load(self, data: bytes) -> int:
        """Read the blocks of ``consumerOrderInfo.json``; -> entries skipped as malformed."""
        if not data.strip():
            return 0
        obj = fastjson.loads(data)
        table = obj.get("table") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise ValueError(f"{ORDER_INFO_FILE}: no table")
        skipped = 0
        for key, queues in table.items():
            topic, sep, group = str(key).partition("@")
            if not sep or not topic or not group or not isinstance(queues, dict):
                skipped += 1
                continue
            for qid, info in queues.items():
                if len(self._blocks) >= MAX_ORDER_BLOCKS:
                    return skipped + 1
                try:
                    block = OrderBlock.from_json_obj(info if isinstance(info, dict) else {})
                    self._blocks[(topic, group, _int(int(qid)))] = block
                except (ValueError, TypeError):
                    skipped += 1
        self.changed = False
        return skipped

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
        """Record a batch handed out; -> each message's count (``next_counts``)."""
        counts = next_counts(self._blocks.get(key), offsets, attempt_id)
        self._blocks[key] = OrderBlock(
            offsets=list(offsets), pop_time=pop_time,
            deadlines={o: pop_time + invisible_ms for o in offsets},
            counts=counts, attempt_id=attempt_id, handles={pop_time}, invisible_ms=invisible_ms,
        )
        self.changed = True
        return counts

    def ack(self, key: OrderKey, offset: int, pop_time: int) -> int | None:
        """Ack one message of the batch popped at ``pop_time``; -> the offset to commit
        (the first message not yet acked, or past the batch), None for a stale handle."""
        block = self._blocks.get(key)
        if block is None or pop_time not in block.handles or offset not in block.deadlines:
            return None
        block.acked.add(offset)
        self.changed = True
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
        self.changed = True
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
        if self._blocks.pop(key, None) is not None:
            self.changed = True
