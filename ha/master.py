"""The master's replication state, pure (no trio): the ack table of connected slaves,
push2SlaveMaxOffset, the in-sync judgement and the SYNC_MASTER wait decision.

The Trio shell (``ha/service.py``) feeds it what it reads and asks it what to do; every
method takes the current time explicitly.
"""

from __future__ import annotations

import enum
from typing import Final

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
class InSyncRule:
    """RocketMQ 5 controller mode's rule for a SYNC put (``inSyncReplicas``,
    ``minInSyncReplicas``, ``allAckInSyncStateSet``; the master counts as one replica):

    * fewer SyncStateSet members than ``min_in_sync_replicas``: refused
      (IN_SYNC_REPLICAS_NOT_ENOUGH);
    * ``all_ack_in_sync_state_set``: every other member must ack, so a master alone in its
      SyncStateSet answers at once;
    * else ``in_sync_replicas`` - 1 slaves must ack (1, RocketMQ's default: none).
    """

    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False

    def slave_acks_needed(self, sync_state_set_size: int) -> int | None:
        """How many slave acks a SYNC put waits for with a SyncStateSet of this many members
        (0: answer at once); None: refuse it."""
        if sync_state_set_size < self.min_in_sync_replicas:
            return None
        if self.all_ack_in_sync_state_set:
            return max(0, sync_state_set_size - 1)
        return max(0, self.in_sync_replicas - 1)


@attrs.define
class InSyncState:
    """The rule and the SyncStateSet size it is applied to now: the replicas manager updates
    the size as the controller reports the set (0 when this broker is not in it)."""

    rule: InSyncRule
    sync_state_set_size: int = 0


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
