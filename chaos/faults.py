"""The fault vocabulary (openmessaging-chaos's, plus restart): each fault injects, then undoes.

=============== ======================================================= ======================
fault           inject                                                   undo (heal)
=============== ======================================================= ======================
kill-master     SIGKILL the live master (DLedger: leader) of a group,    start it again
                found through the NameServers, not the config
minor-kill      SIGKILL a minority of a group's members (at least one)   start them again
random-kill     SIGKILL one random broker                                start it again
restart         SIGTERM the live master (a graceful stop)                start it again
suspend         SIGSTOP the live master                                  SIGCONT
partition       cut the live master off from everyone (proxy)            proxies pass again
partition-group cut the live master off from its group's other members   proxies pass again
                only (clients and NameServers still reach it)
slow-network    delay + emulated loss on every connection to the master  proxies pass again
=============== ======================================================= ======================

Controller mode (``2m-2s-controller``; RocketMQ 5.x RIP-44):

=========================== =========================================== =======================
fault                       inject                                      undo (heal)
=========================== =========================================== =======================
kill-master-in-election     SIGKILL the master, wait until the          start both, the newer
                            controller names a new one (polled every    master first (the only
                            20 ms), SIGKILL that one at once (it is     SyncStateSet member)
                            still switching roles)
partition-master-controller cut the master off from the controllers     proxies pass again
                            only (proxy: clients, NameServers and its
                            slave still reach it)
restart-controller-leader   SIGKILL the controller Raft leader          start it again
=========================== =========================================== =======================

``kill-master`` on a master/slave group records the replication window: the slaves' CommitLog
max offset once the master is dead (an ASYNC master may have acknowledged messages beyond it).
Targets are chosen with the nemesis window's ``pick`` among sorted candidates, so a seed
reproduces the choices when the cluster is in the same state.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import Any, Final

import attrs
import trio

from .cluster import ChaosCluster
from .nemesis import Window

DEFAULT_DELAY_S: Final = 0.2
DEFAULT_DROP_P: Final = 0.3
#: kill-master-in-election: the controller names a new master within this (else no 2nd kill).
ELECTION_WAIT_S: Final = 10.0
ELECTION_POLL_S: Final = 0.02


class FaultError(Exception):
    """A fault that cannot be injected here (no proxy for a partition, no master, ...)."""


@attrs.define
class Injected:
    """What one injection did (becomes the history's fault event) and what heal must undo."""

    fault: str
    group: str | None
    nodes: list[str]
    window: dict[str, int] = attrs.field(factory=dict)
    info: dict[str, Any] = attrs.field(factory=dict)
    #: time.monotonic() when the fault took effect, if ``inject`` went on after it (the
    #: history's start event is dated then)
    at_monotonic: float | None = None

    def event(self) -> dict[str, Any]:
        return {"fault": self.fault, "group": self.group, "nodes": list(self.nodes),
                "window": dict(self.window), **self.info}


class Fault:
    name: str = ""
    needs_proxy: bool = False

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        raise NotImplementedError

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        raise NotImplementedError


async def _pick_master(cc: ChaosCluster, window: Window) -> tuple[str, str]:
    """(group, live master) for the window's pick among groups that have a live master."""
    candidates = {}
    for group in cc.groups():
        master = await cc.live_master(group)
        if master is not None:
            candidates[group] = master
    if not candidates:
        raise FaultError("no group has a live master")
    group = window.choose(list(candidates))
    return group, candidates[group]


async def _restart_all(cc: ChaosCluster, nodes: list[str]) -> dict[str, Any]:
    took = {}
    for node in nodes:
        if not cc.record(node).alive:
            took[node] = round(await cc.start(node), 3)
    return {"restart_s": took}


class KillMaster(Fault):
    name = "kill-master"

    def __init__(self, *, restart: bool = True) -> None:
        self.restart = restart

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        group, master = await _pick_master(cc, window)
        epoch0 = 0
        if cc.controllers():
            before = await cc.controller_master(group)
            epoch0 = before[1] if before is not None else 0
        pid = await cc.kill(master)
        killed_at = time.monotonic()
        done = Injected(self.name, group, [master], info={"pid": pid}, at_monotonic=killed_at)
        for slave in cc.slaves_of(group):
            offset = await cc.max_offset(slave)
            if offset is not None:
                done.window[group] = max(done.window.get(group, 0), offset)
        if cc.controllers():  # controller mode: when was the new master named?
            elected = await _wait_election(cc, group, master, epoch0)
            done.info["elected"] = elected[0] if elected is not None else None
            if elected is not None:
                done.info["elected_after_s"] = round(time.monotonic() - killed_at, 3)
        return done

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        if not self.restart:
            return {"restart_s": {}}
        return await _restart_all(cc, done.nodes)


class MinorKill(Fault):
    name = "minor-kill"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        group = window.choose(cc.groups())
        members = sorted(m for m in cc.members(group) if cc.record(m).alive)
        if not members:
            raise FaultError(f"group {group} has no running member")
        count = max(1, (len(cc.members(group)) - 1) // 2)
        start = int(window.pick * 1_000_003) % len(members)
        victims = [members[(start + i) % len(members)] for i in range(min(count, len(members)))]
        for v in victims:
            await cc.kill(v)
        return Injected(self.name, group, victims)

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        return await _restart_all(cc, done.nodes)


class RandomKill(Fault):
    name = "random-kill"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        alive = [b for b in cc.brokers() if cc.record(b).alive]
        if not alive:
            raise FaultError("no running broker")
        victim = window.choose(alive)
        await cc.kill(victim)
        return Injected(self.name, cc.topology.node(victim).group, [victim])

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        return await _restart_all(cc, done.nodes)


class Restart(Fault):
    name = "restart"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        group, master = await _pick_master(cc, window)
        await cc.kill(master, signal.SIGTERM)
        return Injected(self.name, group, [master])

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        return await _restart_all(cc, done.nodes)


class Suspend(Fault):
    name = "suspend"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        group, master = await _pick_master(cc, window)
        if not cc.pause(master):
            raise FaultError(f"{master} is not running")
        return Injected(self.name, group, [master])

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        for node in done.nodes:
            cc.resume(node)
        return {}


def _proxies(cc: ChaosCluster, fault: str) -> Any:
    if cc.proxies is None:
        raise FaultError(f"{fault} needs the chaos proxy (the cluster runs without it)")
    return cc.proxies


class Partition(Fault):
    name = "partition"
    needs_proxy = True

    def __init__(self, *, group_only: bool = False, blackhole: bool = False) -> None:
        self.group_only = group_only
        self.blackhole = blackhole
        if group_only:
            self.name = "partition-group"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        proxies = _proxies(cc, self.name)
        group, master = await _pick_master(cc, window)
        peers = [m for m in cc.members(group) if m != master] if self.group_only else None
        proxies.partition([master], peers=peers, blackhole=self.blackhole)
        return Injected(self.name, group, [master],
                        info={"from": peers if peers is not None else "everyone"})

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        _proxies(cc, self.name).heal()
        return {}


class SlowNetwork(Fault):
    name = "slow-network"
    needs_proxy = True

    def __init__(self, *, delay_s: float = DEFAULT_DELAY_S, drop_p: float = DEFAULT_DROP_P
                 ) -> None:
        self.delay_s = delay_s
        self.drop_p = drop_p

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        proxies = _proxies(cc, self.name)
        group, master = await _pick_master(cc, window)
        proxies.slow([master], delay_s=self.delay_s, drop_p=self.drop_p)
        return Injected(self.name, group, [master],
                        info={"delay_s": self.delay_s, "drop_p": self.drop_p})

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        _proxies(cc, self.name).heal()
        return {}


def _controller_mode(cc: ChaosCluster, fault: str) -> None:
    if not cc.controllers():
        raise FaultError(f"{fault} needs controller mode (a profile with controllers)")


async def _wait_election(cc: ChaosCluster, group: str, old: str, epoch0: int
                         ) -> tuple[str | None, int] | None:
    """(new master, epoch) once the controller names a master other than ``old`` in a later
    epoch than ``epoch0``; None if it does not within ELECTION_WAIT_S."""
    with trio.move_on_after(ELECTION_WAIT_S):
        while True:
            now = await cc.controller_master(group)
            if now is not None and now[1] > epoch0 and now[0] != old:
                return now
            await trio.sleep(ELECTION_POLL_S)  # the controller elects on its own timer
    return None


class KillMasterInElection(Fault):
    """Kill the master, then the master the controller elects in its place, as soon as the
    controller names it (while that broker still restarts in its new role)."""

    name = "kill-master-in-election"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        _controller_mode(cc, self.name)
        group, master = await _pick_master(cc, window)
        before = await cc.controller_master(group)
        epoch0 = before[1] if before is not None else 0
        pid = await cc.kill(master)
        killed_at = trio.current_time()
        done = Injected(self.name, group, [master], info={"pid": pid, "epoch_before": epoch0})
        elected: tuple[str | None, int] | None = None
        with trio.move_on_after(ELECTION_WAIT_S):
            while True:
                now = await cc.controller_master(group)
                if now is not None and now[1] > epoch0 and now[0] != master:
                    elected = now
                    break
                await trio.sleep(ELECTION_POLL_S)  # the controller elects on its own timer
        new, epoch = elected if elected is not None else (None, 0)
        if new is None:
            done.info["elected"] = None
            return done
        done.info.update(elected=new, epoch=epoch,
                         elected_after_s=round(trio.current_time() - killed_at, 3))
        done.info["pid2"] = await cc.kill(new)
        done.nodes.append(new)
        return done

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        # the newest master first: it is the SyncStateSet's only member, the only one the
        # controller may elect (the older one waits for a master to follow)
        return await _restart_all(cc, list(reversed(done.nodes)))


class PartitionMasterController(Fault):
    """The master loses the controllers (through their proxies: it cannot heartbeat, read the
    replica info or alter the SyncStateSet) but still reaches clients, NameServers and its
    slave; the controller elects the slave, the old master must not keep acknowledging."""

    name = "partition-master-controller"
    needs_proxy = True

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        _controller_mode(cc, self.name)
        proxies = _proxies(cc, self.name)
        group, master = await _pick_master(cc, window)
        proxies.partition([master], peers=cc.controllers())
        return Injected(self.name, group, [master], info={"from": cc.controllers()})

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        _proxies(cc, self.name).heal()
        return {}


class RestartControllerLeader(Fault):
    name = "restart-controller-leader"

    async def inject(self, cc: ChaosCluster, window: Window) -> Injected:
        _controller_mode(cc, self.name)
        leader = await cc.controller_leader()
        if leader is None:
            raise FaultError("no controller answers as the leader")
        pid = await cc.kill(leader)
        return Injected(self.name, None, [leader], info={"pid": pid})

    async def heal(self, cc: ChaosCluster, done: Injected) -> dict[str, Any]:
        return await _restart_all(cc, done.nodes)


FAULTS: Final[Mapping[str, type[Fault]]] = {
    "kill-master": KillMaster,
    "minor-kill": MinorKill,
    "random-kill": RandomKill,
    "restart": Restart,
    "suspend": Suspend,
    "partition": Partition,
    "partition-group": Partition,
    "slow-network": SlowNetwork,
    "kill-master-in-election": KillMasterInElection,
    "partition-master-controller": PartitionMasterController,
    "restart-controller-leader": RestartControllerLeader,
}


def make_fault(name: str) -> Fault:
    """A fault by its CLI name; ValueError names the known ones."""
    if name == "partition-group":
        return Partition(group_only=True)
    cls = FAULTS.get(name)
    if cls is None:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(FAULTS)})")
    return cls()
