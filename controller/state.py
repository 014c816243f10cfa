"""The controller's replicated state machine and its decisions (pure: no trio, no clock).

State, per broker group (brokerName): the registered replicas (brokerId -> address), the master
(brokerId, or NO_MASTER), the master epoch, the SyncStateSet (brokerIds) and its epoch.  It
changes only by applying **events** in Raft log order (``ReplicasState.apply``), so every
controller holds the same state (RocketMQ's ``ReplicasInfoManager`` + ``EventMessage``s).

The leader *decides* (``decide_*``) against its applied state and the brokers' liveness
(``Liveness``: heartbeats, kept on the leader only, not replicated), proposes the event, and
answers once it is committed and applied.  Applying re-checks what the decision assumed (the
epochs), so an event decided on a stale view is a no-op: each election bumps the master epoch
exactly once, and an ALTER_SYNC_STATE_SET from a fenced master changes nothing.

Election (``decide_elect``, RocketMQ's DefaultElectPolicy in spirit): candidates are the alive
members of the SyncStateSet that this leader heard heartbeat (any alive member with
``enableElectUncleanMaster``, or while the group never had a master); the one with the highest
reported CommitLog max offset wins, ties to the lower brokerId.  No candidate: the master is
cleared (NO_MASTER) and the epoch bumped, so the old master is fenced; a SyncStateSet member
that comes back is elected then.

Whoever sends a request (even an authenticated broker that misbehaves), the controller only
trusts what it saw itself (defence in depth under the cluster secret of the peer ports):

* ALTER_SYNC_STATE_SET comes from the current master at the current epochs; it may drop
  members, and it may add only a replica that heartbeats (heard, alive), at the master's epoch,
  and *caught up* as the heartbeats show it: its reported max offset reaches what the master
  reported ``CATCHUP_SLACK_MS`` before (``Liveness.caught_up``);
* a designated ELECT_MASTER elects only a heard, alive SyncStateSet member, and moves the role
  away from a live master only to such a member that is caught up (an admin transfer);
* a REGISTER never moves a live replica (one heartbeating from its registered address) to
  another address, and a heartbeat from another address than the registered one is refused;
* applying an event never moves an epoch backwards: an election applies only at epoch + 1, a
  SyncStateSet change only at the current master epoch and SyncStateSet epoch + 1.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs
import orjson

from ..cluster.protocol.controller import (
    MAX_BROKER_ID,
    MAX_REPLICAS_PER_GROUP,
    NO_MASTER,
    ControllerResponseCode,
    ReplicasInfo,
    ReplicaView,
    SyncStateSet,
    broker_id_set,
)
from ..cluster.protocol.names import node_name_problem

MAX_GROUPS: Final = 10_000
#: Controllers whose listen address the state keeps (a Raft group is a handful).
MAX_CONTROLLERS: Final = 64
MAX_ADDRESS_CHARS: Final = 255
DEFAULT_HEARTBEAT_TIMEOUT_MS: Final = 1_000
#: Largest master epoch (an int on the wire); an election past it is refused.
MAX_EPOCH: Final = 2**31 - 1
#: Heartbeats the leader keeps per replica (to know where the master was a moment ago).
HEARTBEAT_HISTORY: Final = 64
#: A replica is caught up when its reported max offset reaches what the master reported this
#: long before the replica's heartbeat (brokers beat every 200 ms; SYNC keeps slaves close).
CATCHUP_SLACK_MS: Final = 1_000


class EventError(ValueError):
    """An event body that does not decode (never applied)."""


def _check_name(value: Any, what: str) -> str:
    if node_name_problem(value) is not None:
        raise EventError(f"{what}: {value!r} is not a usable name")
    return value


def check_address(value: Any, what: str = "brokerAddress") -> str:
    if type(value) is not str or not 0 < len(value) <= MAX_ADDRESS_CHARS:
        raise EventError(f"{what}: {value!r} is not an address")
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EventError(f"{what}: {value!r} is not host:port")
    return value


def _check_id(value: Any, what: str, lo: int = 0) -> int:
    if type(value) is not int or not lo <= value <= MAX_BROKER_ID:
        raise EventError(f"{what}: {value!r} is not a broker id")
    return value


def _check_epoch(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < 2**31:
        raise EventError(f"{what}: {value!r} is not an epoch")
    return value


# ----------------------------------------------------------------------------- events


@attrs.frozen
class RegisterEvent:
    cluster: str
    group: str
    broker_id: int
    address: str


@attrs.frozen
class ElectEvent:
    group: str
    master_id: int
    """NO_MASTER: no candidate; the epoch is bumped all the same (fences the old master)."""
    new_epoch: int
    """Applied only if it is the group's epoch + 1."""


@attrs.frozen
class AlterEvent:
    group: str
    master_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    new_sse_epoch: int
    """Applied only if it is the group's SyncStateSet epoch + 1."""


@attrs.frozen
class LeaderEvent:
    """A controller that became the ready leader names its listen address (the one brokers
    and admin tools call), so every controller can answer GET_METADATA_INFO with the leader's
    listen address, not its Raft peer address."""

    controller_id: str
    address: str


Event = RegisterEvent | ElectEvent | AlterEvent | LeaderEvent


def encode_event(ev: Event) -> bytes:
    if isinstance(ev, RegisterEvent):
        obj: dict[str, Any] = {"t": "register", "cluster": ev.cluster, "group": ev.group,
                               "id": ev.broker_id, "addr": ev.address}
    elif isinstance(ev, LeaderEvent):
        obj = {"t": "leader", "id": ev.controller_id, "addr": ev.address}
    elif isinstance(ev, ElectEvent):
        obj = {"t": "elect", "group": ev.group, "master": ev.master_id, "epoch": ev.new_epoch}
    else:
        obj = {"t": "alter", "group": ev.group, "master": ev.master_id,
               "epoch": ev.master_epoch, "set": sorted(ev.sync_state_set),
               "sseEpoch": ev.new_sse_epoch}
    return orjson.dumps(obj)


def decode_event(body: bytes) -> Event:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EventError(f"event is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise EventError("event is not an object")
    kind = obj.get("t")
    if kind == "leader":
        return LeaderEvent(_check_name(obj.get("id"), "id"), check_address(obj.get("addr")))
    group = _check_name(obj.get("group"), "group")
    if kind == "register":
        return RegisterEvent(
            _check_name(obj.get("cluster"), "cluster"), group,
            _check_id(obj.get("id"), "id"), check_address(obj.get("addr")),
        )
    if kind == "elect":
        return ElectEvent(group, _check_id(obj.get("master"), "master", NO_MASTER),
                          _check_epoch(obj.get("epoch"), "epoch"))
    if kind == "alter":
        try:
            ids = broker_id_set(obj.get("set"), "set")
        except ValueError as exc:
            raise EventError(str(exc)) from None
        return AlterEvent(group, _check_id(obj.get("master"), "master"),
                          _check_epoch(obj.get("epoch"), "epoch"), ids,
                          _check_epoch(obj.get("sseEpoch"), "sseEpoch"))
    raise EventError(f"unknown event kind {kind!r}")


# ----------------------------------------------------------------------------- state


@attrs.frozen
class GroupState:
    cluster: str
    name: str
    members: tuple[tuple[int, str], ...] = ()
    master_id: int = NO_MASTER
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sse_epoch: int = 0

    @property
    def member_map(self) -> dict[int, str]:
        return dict(self.members)

    @property
    def master_address(self) -> str:
        return self.member_map.get(self.master_id, "") if self.master_id != NO_MASTER else ""

    def replicas_info(self, alive: Iterable[int] = ()) -> ReplicasInfo:
        live = set(alive)
        views = [ReplicaView(i, a, i in live) for i, a in self.members]
        return ReplicasInfo(
            self.master_id, self.master_address, self.master_epoch, self.sse_epoch,
            tuple(v for v in views if v.broker_id in self.sync_state_set),
            tuple(v for v in views if v.broker_id not in self.sync_state_set),
        )

    def sync_state(self) -> SyncStateSet:
        return SyncStateSet(self.sync_state_set, self.sse_epoch)


class ApplyOutcome(enum.Enum):
    APPLIED = "APPLIED"
    STALE = "STALE"
    """Valid but decided on an older view (an epoch moved meanwhile): nothing changed."""
    REFUSED = "REFUSED"
    """Would break a bound (too many groups or members): nothing changed."""


class ReplicasState:
    """Every group's state; changed only by :meth:`apply` (deterministic)."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupState] = {}
        #: controller id -> the listen address it announced when it became leader
        self.controllers: dict[str, str] = {}
        self.applied = 0

    def group(self, name: str) -> GroupState | None:
        return self.groups.get(name)

    def apply(self, ev: Event) -> ApplyOutcome:
        self.applied += 1
        if isinstance(ev, LeaderEvent):
            if ev.controller_id not in self.controllers and len(
                    self.controllers) >= MAX_CONTROLLERS:
                return ApplyOutcome.REFUSED
            self.controllers[ev.controller_id] = ev.address
            return ApplyOutcome.APPLIED
        g = self.groups.get(ev.group)
        if isinstance(ev, RegisterEvent):
            if g is None:
                if len(self.groups) >= MAX_GROUPS:
                    return ApplyOutcome.REFUSED
                g = GroupState(ev.cluster, ev.group)
            members = g.member_map
            if ev.broker_id not in members and len(members) >= MAX_REPLICAS_PER_GROUP:
                return ApplyOutcome.REFUSED
            members[ev.broker_id] = ev.address
            self.groups[ev.group] = attrs.evolve(
                g, cluster=ev.cluster, members=tuple(sorted(members.items()))
            )
            return ApplyOutcome.APPLIED
        if g is None:
            return ApplyOutcome.STALE
        if isinstance(ev, ElectEvent):
            if ev.new_epoch != g.master_epoch + 1:
                return ApplyOutcome.STALE
            if ev.master_id == NO_MASTER:
                self.groups[ev.group] = attrs.evolve(
                    g, master_id=NO_MASTER, master_epoch=ev.new_epoch
                )
            else:
                if ev.master_id not in g.member_map:
                    return ApplyOutcome.STALE
                self.groups[ev.group] = attrs.evolve(
                    g, master_id=ev.master_id, master_epoch=ev.new_epoch,
                    sync_state_set=frozenset({ev.master_id}), sse_epoch=g.sse_epoch + 1,
                )
            return ApplyOutcome.APPLIED
        if (
            ev.master_id != g.master_id or ev.master_epoch != g.master_epoch
            or ev.new_sse_epoch != g.sse_epoch + 1
            or ev.master_id not in ev.sync_state_set
            or not ev.sync_state_set <= set(g.member_map)
        ):
            return ApplyOutcome.STALE
        self.groups[ev.group] = attrs.evolve(
            g, sync_state_set=ev.sync_state_set, sse_epoch=ev.new_sse_epoch
        )
        return ApplyOutcome.APPLIED


# ----------------------------------------------------------------------------- liveness


@attrs.frozen
class Heartbeat:
    at_ms: int
    timeout_ms: int
    epoch: int
    max_offset: int
    address: str


class Liveness:
    """Brokers' last heartbeats, on the controller leader (not replicated).  A leader that
    just took over counts everyone alive for one timeout from ``since_ms`` (it has not heard
    anyone yet), but only replicas it *heard* can be elected or join a SyncStateSet."""

    def __init__(self, since_ms: int, default_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS):
        self.since_ms = since_ms
        self.default_timeout_ms = default_timeout_ms
        self.beats: dict[tuple[str, int], collections.deque[Heartbeat]] = {}

    def beat(self, group: str, broker_id: int, hb: Heartbeat) -> None:
        history = self.beats.get((group, broker_id))
        if history is None:
            history = self.beats[(group, broker_id)] = collections.deque(
                maxlen=HEARTBEAT_HISTORY)
        history.append(hb)

    def last(self, group: str, broker_id: int) -> Heartbeat | None:
        history = self.beats.get((group, broker_id))
        return history[-1] if history else None

    def alive(self, group: str, broker_id: int, now_ms: int) -> bool:
        hb = self.last(group, broker_id)
        if hb is None:
            return now_ms - self.since_ms < self.default_timeout_ms
        return now_ms - hb.at_ms < hb.timeout_ms

    def heard(self, group: str, broker_id: int) -> bool:
        return (group, broker_id) in self.beats

    def heard_alive(self, group: str, broker_id: int, now_ms: int) -> bool:
        return self.heard(group, broker_id) and self.alive(group, broker_id, now_ms)

    def max_offset(self, group: str, broker_id: int) -> int:
        hb = self.last(group, broker_id)
        return hb.max_offset if hb is not None else -1

    def offset_before(self, group: str, broker_id: int, at_ms: int) -> int | None:
        """What ``broker_id`` reported in its last heartbeat at or before ``at_ms`` (its
        oldest one kept if all are later: the stricter bound); None if never heard."""
        history = self.beats.get((group, broker_id))
        if not history:
            return None
        older = [hb for hb in history if hb.at_ms <= at_ms]
        return (older[-1] if older else history[0]).max_offset

    def caught_up(self, g: GroupState, broker_id: int, now_ms: int) -> bool:
        """``broker_id`` heartbeats, at the group's master epoch, and its reported max offset
        reaches what the (heard) master reported CATCHUP_SLACK_MS before that heartbeat."""
        hb = self.last(g.name, broker_id)
        if hb is None or not self.alive(g.name, broker_id, now_ms) or hb.epoch != g.master_epoch:
            return False
        if broker_id == g.master_id:
            return True
        floor = self.offset_before(g.name, g.master_id, hb.at_ms - CATCHUP_SLACK_MS)
        return floor is not None and hb.max_offset >= floor

    def alive_ids(self, g: GroupState, now_ms: int) -> set[int]:
        return {i for i, _a in g.members if self.alive(g.name, i, now_ms)}

    def heard_alive_ids(self, g: GroupState, now_ms: int) -> set[int]:
        return {i for i, _a in g.members if self.heard_alive(g.name, i, now_ms)}


# ----------------------------------------------------------------------------- decisions


@attrs.frozen
class Refusal:
    code: int
    remark: str


def decide_register(
    state: ReplicasState, ev: RegisterEvent, live: Liveness, now_ms: int
) -> RegisterEvent | Refusal | None:
    """The event that registers ``ev``'s replica, a refusal, or None (already registered as
    is).  A live replica (heard from its registered address within its timeout) is never moved
    to another address: that would point its group at whoever sent the registration."""
    g = state.group(ev.group)
    if g is None:
        return ev
    current = g.member_map.get(ev.broker_id)
    if current == ev.address and g.cluster == ev.cluster:
        return None
    if current is not None and current != ev.address and live.heard_alive(
            ev.group, ev.broker_id, now_ms):
        return Refusal(ControllerResponseCode.CONTROLLER_INVALID_REQUEST,
                       f"broker {ev.group}/{ev.broker_id} is alive at {current}; "
                       f"not moved to {ev.address}")
    return ev


def check_heartbeat(g: GroupState | None, broker_id: int, address: str) -> Refusal | None:
    """A heartbeat counts only for a registered replica, from its registered address."""
    rc = ControllerResponseCode
    if g is None or broker_id not in g.member_map:
        return Refusal(rc.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                       f"broker {g.name if g else '?'}/{broker_id} is not registered")
    if g.member_map[broker_id] != address:
        return Refusal(rc.CONTROLLER_INVALID_REQUEST,
                       f"broker {g.name}/{broker_id} is registered at "
                       f"{g.member_map[broker_id]}, not {address}")
    return None


def decide_alter(
    state: ReplicasState, group: str, master_id: int, master_epoch: int,
    new_set: frozenset[int], sse_epoch_seen: int | None = None, *,
    live: Liveness, now_ms: int,
) -> AlterEvent | Refusal:
    g = state.group(group)
    rc = ControllerResponseCode
    if g is None:
        return Refusal(rc.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"group {group} is unknown")
    if master_epoch != g.master_epoch:
        return Refusal(rc.CONTROLLER_FENCED_MASTER_EPOCH,
                       f"master epoch {master_epoch} is not the current {g.master_epoch}")
    if master_id != g.master_id:
        return Refusal(rc.CONTROLLER_INVALID_MASTER,
                       f"broker {master_id} is not the master ({g.master_id})")
    if sse_epoch_seen is not None and sse_epoch_seen != g.sse_epoch:
        return Refusal(rc.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                       f"SyncStateSet epoch {sse_epoch_seen} is not the current {g.sse_epoch}")
    if master_id not in new_set or not new_set <= set(g.member_map):
        return Refusal(rc.CONTROLLER_INVALID_REPLICAS,
                       f"SyncStateSet {sorted(new_set)} must hold the master and members only")
    if not live.heard_alive(group, master_id, now_ms):
        return Refusal(rc.CONTROLLER_INVALID_MASTER,
                       f"master {master_id} does not heartbeat to this controller")
    behind = sorted(i for i in new_set - g.sync_state_set if not live.caught_up(g, i, now_ms))
    if behind:
        return Refusal(rc.CONTROLLER_INVALID_REPLICAS,
                       f"brokers {behind} may not join: not alive or not caught up with the "
                       f"master at epoch {g.master_epoch} as their heartbeats show")
    return AlterEvent(group, master_id, master_epoch, new_set, g.sse_epoch + 1)


def _check_designated(
    g: GroupState, designated: int, live: Liveness, now_ms: int, unclean: bool
) -> Refusal | None:
    """Why ``designated`` may not be elected now, or None."""
    rc = ControllerResponseCode
    if designated not in g.member_map or not live.heard_alive(g.name, designated, now_ms):
        return Refusal(rc.CONTROLLER_BROKER_NOT_ALIVE, f"broker {designated} is not alive")
    master_alive = g.master_id != NO_MASTER and live.alive(g.name, g.master_id, now_ms)
    if designated not in g.sync_state_set and g.sync_state_set and (master_alive or not unclean):
        return Refusal(rc.CONTROLLER_INVALID_REPLICAS,
                       f"broker {designated} is not in the SyncStateSet")
    if master_alive and designated != g.master_id and not live.caught_up(g, designated, now_ms):
        return Refusal(rc.CONTROLLER_INVALID_REPLICAS,
                       f"broker {designated} is not caught up with the live master "
                       f"{g.master_id}: the master stays")
    return None


def decide_elect(
    state: ReplicasState, group: str, live: Liveness, now_ms: int, *,
    unclean: bool = False, designated: int | None = None,
) -> ElectEvent | Refusal | None:
    """The event that elects a master for ``group`` now, a refusal, or None (nothing to do:
    the master is alive, or there is no master and still no candidate)."""
    g = state.group(group)
    rc = ControllerResponseCode
    if g is None:
        return Refusal(rc.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"group {group} is unknown")
    if g.master_epoch >= MAX_EPOCH:
        return Refusal(rc.CONTROLLER_INVALID_REQUEST, f"epoch {g.master_epoch} is the last one")
    if designated is not None:
        refusal = _check_designated(g, designated, live, now_ms, unclean)
        if refusal is not None:
            return refusal
        if designated == g.master_id:
            return None
        return ElectEvent(group, designated, g.master_epoch + 1)
    if g.master_id != NO_MASTER and live.alive(group, g.master_id, now_ms):
        return None
    alive = live.heard_alive_ids(g, now_ms)
    never_had_master = g.master_epoch == 0 and not g.sync_state_set
    pool = alive if (unclean or never_had_master) else alive & g.sync_state_set
    if not pool:
        if g.master_id == NO_MASTER:
            return None
        return ElectEvent(group, NO_MASTER, g.master_epoch + 1)
    best = min(pool, key=lambda i: (-live.max_offset(group, i), i))
    return ElectEvent(group, best, g.master_epoch + 1)


def groups_needing_election(
    state: ReplicasState, live: Liveness, now_ms: int, *, unclean: bool = False
) -> list[ElectEvent]:
    out = []
    for name in sorted(state.groups):
        ev = decide_elect(state, name, live, now_ms, unclean=unclean)
        if isinstance(ev, ElectEvent):
            out.append(ev)
    return out


def sync_state_data(
    state: ReplicasState, names: Iterable[str], live: Liveness | None, now_ms: int
) -> Mapping[str, ReplicasInfo]:
    out = {}
    for name in names or sorted(state.groups):
        g = state.group(name)
        if g is None:
            continue
        alive = live.alive_ids(g, now_ms) if live is not None else set()
        out[name] = g.replicas_info(alive)
    return out
