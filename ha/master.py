"""The master's replication state, pure (no trio): the ack table of connected slaves,
push2SlaveMaxOffset, the in-sync judgement and the SYNC_MASTER wait decision.

The Trio shell (``ha/service.py``) feeds it what it reads and asks it what to do; every
method takes the current time explicitly.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from typing import Any, Final

import attrs

#: Window over which a slave's transfer speed (acked bytes per second) is measured.
SPEED_WINDOW_MS: Final = 1000


class SyncDecision(enum.Enum):
    """What a SYNC_MASTER put whose data ends at ``end_offset`` does."""

    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # no slave, or the slaves are too far behind
    ACKED = "ACKED"  # a slave already acked past it
    WAIT = "WAIT"  # wait for the ack watermark (up to the timeout -> FLUSH_SLAVE_TIMEOUT)


class ReportOutcome(enum.Enum):
    ACCEPTED = "ACCEPTED"
    BEYOND_MASTER = "BEYOND_MASTER"  # the slave claims more than we have: close it (4.x rule)
    BEYOND_SENT = "BEYOND_SENT"  # an ack past what this connection was sent: close it (ours)
    UNKNOWN_SLAVE = "UNKNOWN_SLAVE"


def transfer_start_offset(requested: int, master_max: int, file_size: int) -> int:
    """Where the write side starts: the slave's offset, or for an empty slave (0) the start of
    the master's last CommitLog file."""
    if requested != 0:
        return requested
    return max(0, master_max - master_max % file_size)


@attrs.frozen
class SlaveStatus:
    conn_id: int
    address: str
    ack_offset: int  # -1 until the first report
    diff_bytes: int  # master max offset - ack offset
    in_sync: bool
    transfer_bytes_per_s: float
    last_report_ms: int


@attrs.define
class _Slave:
    conn_id: int
    address: str
    connected_ms: int
    ack: int = -1
    last_report_ms: int = 0
    speed_base_ms: int = 0
    speed_base_ack: int = -1
    bytes_per_s: float = 0.0


class AckTable:
    """Connected slaves and their acks. ``push_to_slave_max_offset`` is the highest offset any
    slave has acked (RocketMQ's push2SlaveMaxOffset: one slave suffices, it never decreases)."""

    def __init__(self, slave_fallbehind_max: int) -> None:
        self.slave_fallbehind_max = slave_fallbehind_max
        self.push_to_slave_max_offset = 0
        #: connected slaves by connection id (read it; change it through add/remove/on_report)
        self.slaves: dict[int, _Slave] = {}

    @property
    def connection_count(self) -> int:
        return len(self.slaves)

    def add(self, conn_id: int, address: str, now_ms: int) -> None:
        self.slaves[conn_id] = _Slave(conn_id, address, now_ms, last_report_ms=now_ms)

    def remove(self, conn_id: int) -> None:
        self.slaves.pop(conn_id, None)

    def ack_of(self, conn_id: int) -> int:
        slave = self.slaves.get(conn_id)
        return slave.ack if slave is not None else -1

    def on_report(self, conn_id: int, offset: int, master_max: int, now_ms: int) -> ReportOutcome:
        """A slave reported ``offset`` (its CommitLog max). Raises push2SlaveMaxOffset."""
        slave = self.slaves.get(conn_id)
        if slave is None:
            return ReportOutcome.UNKNOWN_SLAVE
        if offset > master_max:
            return ReportOutcome.BEYOND_MASTER
        slave.last_report_ms = now_ms
        if slave.speed_base_ack < 0:
            slave.speed_base_ack, slave.speed_base_ms = offset, now_ms
        elif now_ms - slave.speed_base_ms >= SPEED_WINDOW_MS:
            elapsed = now_ms - slave.speed_base_ms
            slave.bytes_per_s = max(0, offset - slave.speed_base_ack) * 1000 / elapsed
            slave.speed_base_ack, slave.speed_base_ms = offset, now_ms
        slave.ack = max(slave.ack, offset)
        if offset > self.push_to_slave_max_offset:
            self.push_to_slave_max_offset = offset
        return ReportOutcome.ACCEPTED

    def note_report(
        self, conn_id: int, offset: int, master_max: int, now_ms: int
    ) -> ReportOutcome:
        """A report that is not an ack of bytes sent on this connection (the slave's first
        report = where it starts, or a repeat of it): the slave is alive and at ``offset``, but
        push2SlaveMaxOffset does not move -- only bytes the master shipped can release SYNC
        puts (our rule; RocketMQ counts any report, so a peer's claim released them)."""
        slave = self.slaves.get(conn_id)
        if slave is None:
            return ReportOutcome.UNKNOWN_SLAVE
        if offset > master_max:
            return ReportOutcome.BEYOND_MASTER
        slave.last_report_ms = now_ms
        slave.ack = max(slave.ack, offset)
        return ReportOutcome.ACCEPTED

    def is_slave_ok(self, master_put_where: int) -> bool:
        """RocketMQ isSlaveOK: a slave is connected and the acks are not too far behind."""
        return (
            bool(self.slaves)
            and master_put_where - self.push_to_slave_max_offset < self.slave_fallbehind_max
        )

    def sync_decision(self, end_offset: int) -> SyncDecision:
        acked = self.push_to_slave_max_offset
        # is_slave_ok(end_offset), inlined: this runs once per SYNC_MASTER put
        if not self.slaves or end_offset - acked >= self.slave_fallbehind_max:
            return SyncDecision.SLAVE_NOT_AVAILABLE
        return SyncDecision.ACKED if acked >= end_offset else SyncDecision.WAIT

    def in_sync(self, conn_id: int, master_max: int) -> bool:
        slave = self.slaves.get(conn_id)
        return (
            slave is not None
            and slave.ack >= 0
            and master_max - slave.ack < self.slave_fallbehind_max
        )

    def status(self, master_max: int) -> tuple[SlaveStatus, ...]:
        return tuple(
            SlaveStatus(
                conn_id=s.conn_id,
                address=s.address,
                ack_offset=s.ack,
                diff_bytes=master_max - max(s.ack, 0),
                in_sync=self.in_sync(s.conn_id, master_max),
                transfer_bytes_per_s=s.bytes_per_s,
                last_report_ms=s.last_report_ms,
            )
            for s in self.slaves.values()
        )


@attrs.define(eq=False)
class WaitGroup:
    """SYNC puts that wait for the same ack: released together once ``target`` is acked, or
    timed out together at ``deadline`` (the last joiner's deadline: nobody gives up early)."""

    target: int
    deadline: float
    token: Any  # the shell's wakeup (a trio.Event), set once for the whole group
    members: int = 1
    timed_out: bool = False


class GroupTransfer:
    """Group transfer (RocketMQ GroupTransferService), pure. Puts join the *open* group; the
    write side ``seal``s it when it ships the bytes those puts wrote, so the open group cannot
    grow forever. Sealed groups have rising targets and deadlines: an ack releases a prefix of
    them, a clock tick expires a prefix of them. One wakeup token per group, not per put."""

    def __init__(self, new_token: Callable[[], object]) -> None:
        self._new_token = new_token
        #: the group puts join now (None: the next join opens one); read it, do not assign
        self.open_group: WaitGroup | None = None
        self._sealed: collections.deque[WaitGroup] = collections.deque()

    def __len__(self) -> int:
        return len(self._sealed) + (self.open_group is not None)

    @property
    def waiting_puts(self) -> int:
        g = self.open_group
        return sum(s.members for s in self._sealed) + (g.members if g is not None else 0)

    def join(self, end_offset: int, deadline: float) -> WaitGroup:
        g = self.open_group
        if g is None:
            g = self.open_group = WaitGroup(end_offset, deadline, self._new_token())
        else:
            g.members += 1
            g.target = max(g.target, end_offset)
            g.deadline = max(g.deadline, deadline)
        return g

    def seal(self) -> None:
        if self.open_group is not None:
            self._sealed.append(self.open_group)
            self.open_group = None

    def release_upto(self, acked: int) -> list[WaitGroup]:
        out: list[WaitGroup] = []
        sealed = self._sealed
        while sealed and sealed[0].target <= acked:
            out.append(sealed.popleft())
        if not sealed and self.open_group is not None and self.open_group.target <= acked:
            out.append(self.open_group)
            self.open_group = None
        return out

    def next_deadline(self) -> float | None:
        if self._sealed:
            return self._sealed[0].deadline
        return self.open_group.deadline if self.open_group is not None else None

    def expire(self, now: float) -> list[WaitGroup]:
        out: list[WaitGroup] = []
        sealed = self._sealed
        while sealed and sealed[0].deadline <= now:
            out.append(sealed.popleft())
        if not sealed and self.open_group is not None and self.open_group.deadline <= now:
            out.append(self.open_group)
            self.open_group = None
        for g in out:
            g.timed_out = True
        return out

    def drain(self) -> list[WaitGroup]:
        """Every pending group, marked timed out (the service is stopping)."""
        out = [*self._sealed, *([self.open_group] if self.open_group is not None else [])]
        self._sealed.clear()
        self.open_group = None
        for g in out:
            g.timed_out = True
        return out
