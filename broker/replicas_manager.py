"""Controller mode on a broker (RocketMQ 5.x ``ReplicasManager``): the controller decides who is
master; this broker follows.

    enableControllerMode=true
    controllerAddr=127.0.0.1:9878;127.0.0.1:9888;127.0.0.1:9898
    brokerId=1            # this replica's identity (>= 1)

``BrokerNode.run`` hands over to :meth:`ReplicasManager.run`, which for the whole life of
the process:

* registers the replica with the controller (CONTROLLER_REGISTER_BROKER 1003) and heartbeats
  (BROKER_HEARTBEAT 904: epoch, CommitLog max offset) every ``brokerHeartbeatInterval``;
* reads the group's replica info (CONTROLLER_GET_REPLICA_INFO 1004: master id, address, epoch,
  SyncStateSet) every ``syncControllerMetadataPeriod``;
* runs the broker proper (an inner ``BrokerNode``) in the role the controller names:
  **master** = brokerId 0 in routes, SYNC_MASTER (ASYNC_MASTER if so configured); **slave** =
  its own brokerId, SLAVE, replicating from the master.  A new master or a new epoch restarts
  the inner broker in its new role (the store is closed and reopened, as a manual 4.x
  promotion does; topics and offsets stay in memory and on disk);
* before serving as master: appends (new epoch, its CommitLog end) to the epoch file; before
  serving as slave: reads the master's epoch cache (GET_BROKER_EPOCH_CACHE 1007, which every
  broker in controller mode answers), cuts its CommitLog at the consistent point (a tail an
  old master wrote after it lost its role is never kept) and takes the master's epochs --
  unless that cut would drop data this replica knows was acknowledged (its acked mark: as
  master, what a slave acked; as slave, what it acked to its master; kept in
  ``ackedOffsetCheckpoint``): then the named master lacks acked data (a wrong election, e.g. a
  forged one), so this replica does not follow it, cuts nothing, logs an error and waits for
  the controller to name another master (``refused_masters`` counts it);
* as master: asks each replica for its epoch cache every period and reports the SyncStateSet
  (CONTROLLER_ALTER_SYNC_STATE_SET 1001): a slave whose log reached where the master was one
  round earlier, in the master's epoch, joins; one that did not for
  ``haMaxTimeSlaveNotCatchup`` leaves;
* as slave: registers with the NameServers until their answer names the controller's master,
  which points the HA client at it;
* calls the controllers with the cluster secret (``clusterSecret``: every connection proves it
  first, ``peer_handshake``) and the other replicas (epoch caches) with the ACL account when
  ``aclEnable`` is on (their remoting port checks signatures);
* as master, a lease (``masterLeaseMills``): without a successful heartbeat to the controller
  for that long (cut off from the controllers: they will elect another master after
  ``controllerHeartBeatTimeoutMills``) the master fences itself: its broker permission loses
  WRITE (sends answer NO_PERMISSION, routes say read-only) until a heartbeat succeeds again.
  RocketMQ 5 has no such lease (it fences only while a role is undecided and relies on
  SyncStateSet acks); with it an old master stops acknowledging before a new one exists.

Safety with SYNC replication: a SYNC_MASTER answers SEND_OK only after a slave acked the
message, so with one slave per group (the ``2m-2s-controller`` layout) every acknowledged
message is on the slave, and only SyncStateSet members can be elected.  With several slaves per
group the SYNC ack comes from any one of them, which the SyncStateSet cannot tell apart: not a
guarantee this layout gives (RocketMQ's allAckInSyncStateSet is not implemented).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..cluster.acl.signing import credentials_from
from ..cluster.logging import get_logger
from ..cluster.protocol.controller import (
    NO_MASTER,
    AlterSyncStateSetRequestHeader,
    BrokerHeartbeatRequestHeader,
    ControllerBodyError,
    ControllerRequestCode,
    ControllerResponseCode,
    EpochEntryCache,
    GetReplicaInfoRequestHeader,
    RegisterBrokerToControllerRequestHeader,
    ReplicaInfoResponseHeader,
    SyncStateSet,
    decode_replicas_table,
    encode_broker_names,
)
from ..cluster.protocol.controller_client import ControllerClient, is_host_port
from ..cluster.protocol.route import PermName
from ..cluster.remoting.address import format_address
from ..cluster.remoting.client_pool import open_remoting_client
from ..cluster.remoting.codec import RemotingCommand
from ..cluster.remoting.codes import ResponseCode
from ..cluster.remoting.errors import RemotingError
from ..cluster.remoting.headers import HeaderError
from ..cluster.remoting.peer_auth import peer_handshake
from ..ha.master import InSyncState
from ..store.config import BrokerRole, MessageStoreConfig
from ..store.epoch_file import (
    AckedMark,
    EpochFile,
    cut_is_safe,
    find_consistent_point,
    truncate_commitlog,
)
from ..store.message_store import MessageStore
from .processors.broker_config import install_settings

if TYPE_CHECKING:
    from .config import BrokerSettings
    from .context import BrokerHost

#: A broker call (epoch cache of a peer) gives up after this.
PEER_CALL_TIMEOUT_S: Final = 1.0
#: Pause between retries of a registration or a master's epoch cache.
RETRY_INTERVAL_S: Final = 0.1
#: How often a slave re-registers until the NameServers name its master.
FOLLOW_INTERVAL_S: Final = 0.3
#: The master's lease is checked this often (at most; a quarter of the lease when shorter).
LEASE_CHECK_S: Final = 0.05
#: How often the acked mark is read from the HA service and saved when it grew.
ACKED_MARK_INTERVAL_S: Final = 0.5


@attrs.frozen
class Target:
    master_id: int
    master_address: str
    epoch: int


NO_TARGET: Final = Target(NO_MASTER, "", 0)


def adopt_logged_topics(ctrl: BrokerHost) -> list[str]:
    """A new master serves every topic its log holds: topics created on the old master after
    this replica's last SlaveSynchronize get a config (queues = highest queue id seen + 1)."""
    adopted = ctrl.topics.adopt_stored(list(ctrl.store.cqs.queues))
    if adopted:
        ctrl.topic_created(adopted[0])  # persist and re-register
    return adopted


def in_sync_size(my_id: int, sss: SyncStateSet) -> int:
    """The SyncStateSet size a master's SYNC puts count on: 0 unless this replica is in the
    set (a master the controller has replaced counts no replica, so it takes no put alone)."""
    return len(sss.broker_ids) if my_id in sss.broker_ids else 0


def next_sync_state_set(
    master_id: int, caught_now: dict[int, bool], current: set[int],
    last_caught: dict[int, float], now: float, keep_s: float,
) -> set[int]:
    """The SyncStateSet a master reports after a round: itself; each replica that caught up
    this round (its log reached where the master was a round earlier, in the master's epoch);
    and each current member that caught up less than ``keep_s`` ago (haMaxTimeSlaveNotCatchup).
    ``last_caught`` (replica -> time it last caught up) is updated."""
    wanted = {master_id}
    for bid, caught in caught_now.items():
        if bid == master_id:
            continue
        if caught:
            last_caught[bid] = now
            wanted.add(bid)
        elif bid in current and now - last_caught.get(bid, -float("inf")) < keep_s:
            wanted.add(bid)
    return wanted


def lease_expired(last_renewed: float | None, now: float, lease_s: float) -> bool:
    """A master's lease (seconds since its last successful heartbeat, measured from when that
    heartbeat was *sent*, so never later than the controller's own clock starts): expired
    when ``lease_s`` > 0 and it has not renewed for that long (or ever)."""
    if lease_s <= 0:
        return False
    return last_renewed is None or now - last_renewed >= lease_s


def fenced_permission(perm: int, fenced: bool) -> int:
    """The broker permission while fenced (no WRITE) or not (as configured)."""
    return perm & ~PermName.PERM_WRITE if fenced else perm


class ReplicasManager:
    def __init__(
        self, outer: BrokerHost, factory: Callable[[BrokerSettings], BrokerHost]
    ) -> None:
        self.outer = outer
        self.factory = factory
        self.settings = outer.settings
        self.cm = outer.settings.controller_mode
        b = outer.settings.broker
        self.my_id = b.broker_id
        self.group = b.broker_name
        self.cluster = b.broker_cluster_name
        # the address others dial (advertisedListenPort behind a proxy): what the controller
        # names as master, what the NameServers list (so a slave sees its master named there)
        self.address = format_address(b.broker_ip1, b.advertised_listen_port or b.listen_port)
        self.log = get_logger(node=outer.node, role="replicas-manager")
        self.epoch_file: EpochFile | None = None
        self.acked: AckedMark | None = None
        #: masters this replica refused to follow: they lack data it knows was acked
        self.refused_masters = 0
        self.inner: BrokerHost | None = None
        self.target = NO_TARGET
        self.running: Target | None = None
        self.is_master = False
        self._sync_state_set = SyncStateSet(frozenset(), 0)
        #: as master: the SYNC put rule and the SyncStateSet size its HA service reads
        self.in_sync: InSyncState | None = None
        self.last_max_offset = 0
        self.switches = 0
        self.truncated_bytes = 0
        #: trio time the last successful heartbeat was sent (the master's lease)
        self.last_renewed: float | None = None
        self.fenced = False
        self.fences = 0
        self._changed = trio.Event()
        self._register_needed = trio.Event()
        self.cc: ControllerClient | None = None
        self._client: Any = None

    # ------------------------------------------------------------------ observing

    @property
    def sync_state_set(self) -> SyncStateSet:
        """The group's SyncStateSet as the controller last reported it."""
        return self._sync_state_set

    @sync_state_set.setter
    def sync_state_set(self, sss: SyncStateSet) -> None:
        self._sync_state_set = sss
        if self.in_sync is not None:
            self.in_sync.sync_state_set_size = in_sync_size(self.my_id, sss)

    @property
    def epoch(self) -> int:
        return self.epoch_file.last_epoch if self.epoch_file is not None else 0

    def max_offset(self) -> int:
        inner = self.inner
        store = inner._store if inner is not None else None
        if store is not None:
            self.last_max_offset = store.max_phys_offset
        return self.last_max_offset

    # ------------------------------------------------------------------ main

    async def run(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        root = self.settings.store.store_path_root_dir
        self.epoch_file = await trio.to_thread.run_sync(EpochFile, root)
        self.acked = await trio.to_thread.run_sync(AckedMark, root)
        b = self.settings.broker
        creds = credentials_from(b.acl_access_key, b.acl_secret_key)
        handshake = peer_handshake(b.cluster_secret) if b.cluster_secret else None
        async with open_remoting_client(
            node=f"{self.outer.node}-controller", handshake=handshake
        ) as controllers, open_remoting_client(
            node=f"{self.outer.node}-replicas", rpc_hook=creds.sign if creds else None
        ) as client:
            self._client = client
            self.cc = ControllerClient(controllers, self.cm.addrs)
            async with trio.open_nursery() as nursery:
                await self._register()
                nursery.start_soon(self._heartbeat_loop)
                nursery.start_soon(self._watch_loop)
                await self._role_loop(task_status)

    async def _role_loop(self, task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        started = False
        while True:
            target = await self._wait_for_master()
            is_master = target.master_id == self.my_id
            if is_master:
                await trio.to_thread.run_sync(self._prepare_master, target.epoch)
            else:
                cache = await self._master_epochs(target)
                if cache is None:
                    continue  # the target changed meanwhile
                if not await trio.to_thread.run_sync(self._prepare_slave, cache):
                    await self._wait_target_change(target)
                    continue
            inner = self.factory(self._role_settings(is_master))
            self.in_sync = (
                InSyncState(self.cm.in_sync_rule, in_sync_size(self.my_id, self.sync_state_set))
                if is_master else None
            )
            inner.in_sync = self.in_sync
            inner.epoch_file = self.epoch_file
            inner.replica_id = self.my_id
            self.is_master = is_master
            self.running = target
            self.switches += 1
            self.log.info("replica role", broker_role="MASTER" if is_master else "SLAVE",
                          replica_id=self.my_id, master=target.master_id, epoch=target.epoch)
            async with trio.open_nursery() as nursery:
                address = await nursery.start(inner.run)
                self.inner = inner
                if not started:
                    started = True
                    self.outer.broker_addr = inner.broker_addr
                    self.outer.address = address
                    task_status.started(address)
                nursery.start_soon(self._acked_loop, inner)
                if is_master:
                    adopt_logged_topics(inner)
                    nursery.start_soon(self._sync_state_loop, inner, target)
                    nursery.start_soon(self._lease_loop, inner, target)
                else:
                    nursery.start_soon(self._follow_master, inner, target)
                await self._wait_role_change(target, is_master)
                self.max_offset()
                self._note_acked(inner)
                nursery.cancel_scope.cancel()
            self.fenced = False
            self.inner = None
            self.running = None
            self.in_sync = None

    def _role_settings(self, is_master: bool) -> BrokerSettings:
        s = self.settings
        if is_master:
            role = (BrokerRole.ASYNC_MASTER if s.store.broker_role is BrokerRole.ASYNC_MASTER
                    else BrokerRole.SYNC_MASTER)
            broker_id = 0
        else:
            role, broker_id = BrokerRole.SLAVE, self.my_id
        return attrs.evolve(
            s, broker=attrs.evolve(s.broker, broker_id=broker_id),
            store=attrs.evolve(s.store, broker_role=role),
        )

    # ------------------------------------------------------------------ store preparation

    def _store_config(self) -> MessageStoreConfig:
        return self.settings.store

    def _prepare_master(self, epoch: int) -> None:
        """Blocking: the new epoch begins at this store's CommitLog end."""
        assert self.epoch_file is not None
        store = MessageStore.open(self._store_config())
        try:
            end = store.max_phys_offset
        finally:
            store.close()
        self.last_max_offset = end
        if epoch > self.epoch_file.last_epoch:
            self.epoch_file.append(epoch, end)
        self.log.info("master epoch begins", epoch=epoch, start_offset=end)

    def _prepare_slave(self, cache: EpochEntryCache) -> bool:
        """Blocking: cut a divergent tail, then take the master's epochs; False (nothing cut or
        taken) when the cut would drop data this replica knows was acknowledged."""
        assert self.epoch_file is not None and self.acked is not None
        self.acked.save()
        store = MessageStore.open(self._store_config())
        try:
            local_max = store.max_phys_offset
            point = find_consistent_point(
                self.epoch_file.entries, local_max, cache.entries, cache.max_offset
            )
            if not cut_is_safe(point, local_max, self.acked.offset):
                self.refused_masters += 1
                self.last_max_offset = local_max
                self.log.error("refusing to follow a master that lacks acknowledged data: "
                               "nothing cut, waiting for another election",
                               master=cache.broker_id, master_max_offset=cache.max_offset,
                               consistent_point=point, acked_offset=self.acked.offset,
                               local_max_offset=local_max)
                return False
            if point < local_max:
                cut = truncate_commitlog(store, point)
                self.truncated_bytes += cut
                self.log.warning("divergent tail truncated", from_offset=point,
                                 bytes=cut, master=cache.broker_id)
            self.last_max_offset = min(point, local_max)
        finally:
            store.close()
        self.epoch_file.truncate_after(self.last_max_offset)
        self.epoch_file.replace(cache.entries)
        return True

    def _note_acked(self, inner: BrokerHost) -> bool:
        """Raise the acked mark to what ``inner``'s HA service knows was acked: as master the
        highest offset a slave acked, as slave the highest it reported to its master."""
        ha = inner.ha
        if ha is None or self.acked is None:
            return False
        if ha.client is not None:
            acked = ha.client.last_reported_offset
        else:
            acked = ha.table.push_to_slave_max_offset
        return self.acked.raise_to(acked)

    async def _acked_loop(self, inner: BrokerHost) -> None:
        assert self.acked is not None
        while True:
            await trio.sleep(ACKED_MARK_INTERVAL_S)
            if self._note_acked(inner):
                await trio.to_thread.run_sync(self.acked.save)

    async def _master_epochs(self, target: Target) -> EpochEntryCache | None:
        """The master's epoch cache once it serves its epoch (None: the target changed)."""
        request = RemotingCommand.request(ControllerRequestCode.GET_BROKER_EPOCH_CACHE)
        while self.target == target:
            try:
                r = await self._client.invoke(target.master_address, request, PEER_CALL_TIMEOUT_S)
                if r.code == ResponseCode.SUCCESS:
                    cache = EpochEntryCache.decode(r.body or b"")
                    if cache.entries and cache.entries[-1].epoch >= target.epoch:
                        return cache
            except (RemotingError, OSError, ValueError) as exc:
                self.log.debug("master epoch cache not yet", master=target.master_address,
                               error=str(exc))
            await self._pause(RETRY_INTERVAL_S)
        return None

    # ------------------------------------------------------------------ following the controller

    async def _pause(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._changed.wait()

    async def _wait_for_master(self) -> Target:
        while self.target.master_id == NO_MASTER:
            await self._changed.wait()
        return self.target

    async def _wait_target_change(self, target: Target) -> None:
        while self.target == target:
            await self._changed.wait()

    async def _wait_role_change(self, running: Target, is_master: bool) -> None:
        """Until the controller names another master or epoch (a slave keeps following while
        the group has no master at all)."""
        while True:
            t = self.target
            moved = (t.master_id, t.epoch) != (running.master_id, running.epoch)
            if moved and (is_master or t.master_id != NO_MASTER):
                return
            await self._changed.wait()

    def _set_target(self, t: Target) -> None:
        if t != self.target:
            self.target = t
            self._changed.set()
            self._changed = trio.Event()

    async def _register(self) -> None:
        assert self.cc is not None
        h = RegisterBrokerToControllerRequestHeader(
            cluster_name=self.cluster, broker_name=self.group, broker_id=self.my_id,
            broker_address=self.address,
        )
        request = RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_REGISTER_BROKER, h.to_ext_fields()
        )
        while True:
            sent_at = trio.current_time()
            try:
                r = await self.cc.call(request)
                if r.code == ResponseCode.SUCCESS:
                    self.last_renewed = sent_at  # registration counts as a heartbeat
                    self._take_replica_info(r)
                    self.log.info("registered with the controller", replica_id=self.my_id)
                    return
                self.log.warning("controller registration refused", code=r.code,
                                 remark=r.remark)
            except RemotingError as exc:
                self.log.info("controller not reachable", error=str(exc))
            await trio.sleep(RETRY_INTERVAL_S * 5)

    def _take_replica_info(self, r: RemotingCommand) -> None:
        try:
            h = ReplicaInfoResponseHeader.from_ext_fields(r.ext_fields)
            sss = SyncStateSet.decode(r.body) if r.body else SyncStateSet(frozenset(), 0)
        except (HeaderError, ControllerBodyError) as exc:
            self.log.warning("controller answer unreadable", error=str(exc))
            return
        master = h.master_broker_id if h.master_broker_id is not None else NO_MASTER
        if master != NO_MASTER and not is_host_port(h.master_address or ""):
            self.log.warning("controller named a master without an address",
                             master=master, address=h.master_address)
            return
        self.sync_state_set = sss
        self._set_target(Target(master, h.master_address or "", h.master_epoch or 0))

    async def _heartbeat_loop(self) -> None:
        assert self.cc is not None
        interval = self.cm.heartbeat_interval_ms / 1000.0
        while True:
            h = BrokerHeartbeatRequestHeader(
                cluster_name=self.cluster, broker_addr=self.address, broker_name=self.group,
                broker_id=self.my_id, epoch=self.epoch, max_offset=self.max_offset(),
                heartbeat_timeout_mills=self.cm.heartbeat_timeout_ms,
            )
            request = RemotingCommand.request(
                ControllerRequestCode.BROKER_HEARTBEAT, h.to_ext_fields()
            )
            sent_at = trio.current_time()
            try:
                r = await self.cc.call(request, interval * 2)
                if r.code == ResponseCode.SUCCESS:
                    self.last_renewed = sent_at
                elif r.code == ControllerResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    await self._register()
            except RemotingError as exc:
                self.log.debug("controller heartbeat failed", error=str(exc))
            await trio.sleep(interval)

    async def _watch_loop(self) -> None:
        assert self.cc is not None
        period = self.cm.sync_metadata_period_ms / 1000.0
        request = RemotingCommand.request(
            ControllerRequestCode.CONTROLLER_GET_REPLICA_INFO,
            GetReplicaInfoRequestHeader(broker_name=self.group).to_ext_fields(),
        )
        while True:
            try:
                r = await self.cc.call(request)
                if r.code == ResponseCode.SUCCESS:
                    self._take_replica_info(r)
                elif r.code == ControllerResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                    await self._register()
            except RemotingError as exc:
                self.log.debug("replica info failed", error=str(exc))
            await trio.sleep(period)

    # ------------------------------------------------------------------ master: SyncStateSet

    async def _peer_max_offset(self, addr: str) -> tuple[int, int] | None:
        """(last epoch, max offset) of the replica at ``addr``, None if it does not answer."""
        request = RemotingCommand.request(ControllerRequestCode.GET_BROKER_EPOCH_CACHE)
        try:
            r = await self._client.invoke(addr, request, PEER_CALL_TIMEOUT_S)
            if r.code != ResponseCode.SUCCESS:
                return None
            cache = EpochEntryCache.decode(r.body or b"")
        except (RemotingError, OSError, ValueError):
            return None
        return (cache.entries[-1].epoch if cache.entries else 0), cache.max_offset

    async def _sync_state_loop(self, inner: BrokerHost, target: Target) -> None:
        assert self.cc is not None
        period = max(self.cm.sync_metadata_period_ms, self.cm.heartbeat_interval_ms) / 1000.0
        keep_s = self.cm.max_time_slave_not_catchup_ms / 1000.0
        last_caught: dict[int, float] = {}
        prev_max = self.max_offset()
        names = encode_broker_names([self.group])
        while True:
            await trio.sleep(period)
            now_max = self.max_offset()
            try:
                r = await self.cc.call(RemotingCommand.request(
                    ControllerRequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, names))
                info = decode_replicas_table(r.body or b"").get(self.group)
            except (RemotingError, ControllerBodyError) as exc:
                self.log.debug("sync state data failed", error=str(exc))
                continue
            if r.code != ResponseCode.SUCCESS or info is None:
                continue
            if (info.master_broker_id, info.master_epoch) != (self.my_id, target.epoch):
                continue  # fenced: the watch loop restarts us
            now = trio.current_time()
            members = {v.broker_id: v.address for v in (*info.in_sync, *info.not_in_sync)}
            current = {v.broker_id for v in info.in_sync}
            caught_now = {}
            for bid, addr in members.items():
                if bid == self.my_id or not addr:
                    continue
                peer = await self._peer_max_offset(addr)
                caught_now[bid] = (
                    peer is not None and peer[0] == target.epoch and peer[1] >= prev_max
                )
            wanted = next_sync_state_set(
                self.my_id, caught_now, current, last_caught, now, keep_s
            )
            prev_max = now_max
            if wanted == current:
                continue
            h = AlterSyncStateSetRequestHeader(
                broker_name=self.group, master_broker_id=self.my_id, master_epoch=target.epoch
            )
            body = SyncStateSet(frozenset(wanted), info.sync_state_set_epoch).encode()
            try:
                r = await self.cc.call(RemotingCommand.request(
                    ControllerRequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, h.to_ext_fields(), body))
            except RemotingError as exc:
                self.log.info("alter SyncStateSet failed", error=str(exc))
                continue
            if r.code == ResponseCode.SUCCESS:
                with contextlib.suppress(ControllerBodyError):
                    self.sync_state_set = SyncStateSet.decode(r.body)
                self.log.info("SyncStateSet reported", sync_state_set=sorted(wanted))
            else:
                self.log.info("alter SyncStateSet refused", code=r.code, remark=r.remark)

    # ------------------------------------------------------------------ master: the lease

    async def _lease_loop(self, inner: BrokerHost, target: Target) -> None:
        """Fence this master (no WRITE permission) while its lease is expired; unfence once
        a heartbeat succeeds again (the controller still names it: else the watch loop
        restarts it in its new role)."""
        lease_s = self.cm.lease_ms / 1000.0
        if lease_s <= 0:
            return
        configured = inner.bcfg.broker_permission
        check_s = min(LEASE_CHECK_S, lease_s / 4)
        while True:
            expired = lease_expired(self.last_renewed, trio.current_time(), lease_s)
            if expired != self.fenced:
                self.fenced = expired
                self.fences += expired
                perm = fenced_permission(configured, expired)
                s = inner.settings
                install_settings(inner, attrs.evolve(
                    s, broker=attrs.evolve(s.broker, broker_permission=perm)))
                self.log.warning("master fenced: no controller renewal" if expired
                                 else "master lease renewed", epoch=target.epoch,
                                 lease_ms=self.cm.lease_ms)
                # as a brokerPermission update does: a new topic data version, registered
                # at once, so the routes say read-only (or writable again)
                topics = inner.topics
                topics.data_version = topics.data_version.next_version(inner.now_ms())
                with trio.move_on_after(max(lease_s, 1.0)):
                    await inner.register_all()
            await trio.sleep(check_s)  # the lease is a deadline on the trio clock

    # ------------------------------------------------------------------ slave: find the master

    async def _follow_master(self, inner: BrokerHost, target: Target) -> None:
        """Register with the NameServers until they name the controller's master (their
        answer points the HA client at its HA port)."""
        while inner.master_addr != target.master_address:
            await inner.register_all()
            if inner.master_addr == target.master_address:
                break
            await trio.sleep(FOLLOW_INTERVAL_S)
        self.log.info("following master", master=target.master_address, epoch=target.epoch)
