"""The NameServer's route tables (RocketMQ's ``RouteInfoManager``) as pure state.

No trio, no I/O, no clock: every call that needs the time takes ``now`` (seconds on any monotonic
clock; the shell passes ``trio.current_time()``). Connections are identified by an opaque id
(``Connection.id`` in the shell).

Tables (docs/protocol/remoting.md, "Broker <-> NameServer"):

* ``clusterAddrTable``   cluster name -> broker names
* ``brokerAddrTable``    broker name -> BrokerData (cluster, {brokerId: addr}); id 0 is the master
* ``topicQueueTable``    topic -> {broker name -> QueueData}, in registration order
* ``brokerLiveTable``    broker addr -> BrokerLiveInfo (last update, DataVersion, connection,
                         HA address)
* ``filterServerTable``  broker addr -> filter server addresses

Where RocketMQ can leave the tables inconsistent this class is stricter, so that every address in
a BrokerData is live and every live address is in exactly one BrokerData:

* an address is held by one (broker name, id) at a time: registering it anywhere drops every other
  id holding it, in any group (RocketMQ only does so within the group);
* an id re-registered with a new address forgets the old address's liveness;
* a group that registers under another cluster moves to it;
* UNREGISTER_BROKER acts only if that name and id hold that address (RocketMQ removes the id and
  the address independently, and removes from the cluster named in the request).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import attrs

from ..cluster.protocol.route import (
    MASTER_ID,
    BrokerData,
    ClusterInfo,
    DataVersion,
    PermName,
    QueueData,
    RegisterBrokerResult,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    TopicSysFlag,
)

#: RocketMQ's ``BROKER_CHANNEL_EXPIRED_TIME``: a broker silent this long is removed.
DEFAULT_BROKER_EXPIRED_S: Final = 120.0
#: How often the NameServer looks for silent brokers (``scanNotActiveBroker`` period).
DEFAULT_SCAN_INTERVAL_S: Final = 10.0
#: Encoded route answers kept between table changes; past this the cache starts over.
ROUTE_CACHE_MAX_ENTRIES: Final = 4096


@attrs.frozen
class BrokerLiveInfo:
    last_update: float
    data_version: DataVersion
    conn_id: int | None
    ha_server_addr: str


@attrs.frozen
class RemovedBroker:
    """A broker address dropped by expiry or by its connection closing."""

    broker_addr: str
    broker_name: str | None
    broker_id: int | None
    conn_id: int | None


class _Group:
    __slots__ = ("addrs", "cluster", "name")

    def __init__(self, cluster: str, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.addrs: dict[int, str] = {}

    def snapshot(self) -> BrokerData:
        return BrokerData(self.cluster, self.name, dict(sorted(self.addrs.items())))


class RouteInfoManager:
    """Mutable route state; every method is synchronous and deterministic."""

    def __init__(self, *, broker_expired_s: float = DEFAULT_BROKER_EXPIRED_S) -> None:
        self.broker_expired_s = broker_expired_s
        self._clusters: dict[str, set[str]] = {}
        self._groups: dict[str, _Group] = {}
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._live: dict[str, BrokerLiveInfo] = {}
        self._filters: dict[str, tuple[str, ...]] = {}
        #: Bumped by every change a route or cluster answer can see (not by liveness refreshes).
        self.generation = 0
        self._cache_generation = -1
        self._route_cache: dict[tuple[str, bool, str | None], bytes | None] = {}
        self._cluster_cache: bytes | None = None

    # ------------------------------------------------------------------ read-only views

    @property
    def live_brokers(self) -> Mapping[str, BrokerLiveInfo]:
        return self._live

    @property
    def cluster_addr_table(self) -> dict[str, frozenset[str]]:
        return {c: frozenset(names) for c, names in self._clusters.items()}

    @property
    def broker_addr_table(self) -> dict[str, BrokerData]:
        return {name: g.snapshot() for name, g in self._groups.items()}

    @property
    def topic_queue_table(self) -> dict[str, tuple[QueueData, ...]]:
        return {t: tuple(q.values()) for t, q in self._topics.items()}

    @property
    def filter_server_table(self) -> dict[str, tuple[str, ...]]:
        return dict(self._filters)

    def broker_data(self, broker_name: str) -> BrokerData | None:
        group = self._groups.get(broker_name)
        return None if group is None else group.snapshot()

    def _changed(self) -> None:
        self.generation += 1

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        cluster_name: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config_wrapper: TopicConfigSerializeWrapper | None,
        filter_server_list: Sequence[str] | None,
        conn_id: int | None,
        now: float,
    ) -> RegisterBrokerResult:
        """REGISTER_BROKER. Only the master (id 0) creates or updates its topics' QueueData, and
        only when its DataVersion changed or it registers for the first time."""
        group, first_in_group, joined = self._join_cluster(cluster_name, broker_name)
        addr_changed, new_id = self._take_address(group, broker_id, broker_addr)
        changed = joined or addr_changed
        register_first = first_in_group or new_id
        data_version = (
            topic_config_wrapper.data_version if topic_config_wrapper is not None else DataVersion()
        )
        if (
            topic_config_wrapper is not None
            and broker_id == MASTER_ID
            and (register_first or self.is_broker_topic_config_changed(broker_addr, data_version))
        ) and self._register_topics(broker_name, topic_config_wrapper):
            changed = True

        self._live[broker_addr] = BrokerLiveInfo(
            last_update=now,
            data_version=data_version,
            conn_id=conn_id,
            ha_server_addr=ha_server_addr,
        )
        if filter_server_list is not None and self._set_filters(broker_addr, filter_server_list):
            changed = True
        if changed:
            self._changed()
        return self._register_result(group, broker_id)

    def _join_cluster(self, cluster_name: str, broker_name: str) -> tuple[_Group, bool, bool]:
        """The broker name's group, in ``cluster_name``: (group, created now, anything changed)."""
        changed = False
        group = self._groups.get(broker_name)
        created = group is None
        if group is None:
            group = _Group(cluster_name, broker_name)
            self._groups[broker_name] = group
            changed = True
        elif group.cluster != cluster_name:
            self._leave_cluster(group.cluster, broker_name)
            group.cluster = cluster_name
            changed = True
        members = self._clusters.setdefault(cluster_name, set())
        if broker_name not in members:
            members.add(broker_name)
            changed = True
        return group, created, changed

    def _take_address(self, group: _Group, broker_id: int, broker_addr: str) -> tuple[bool, bool]:
        """Record ``broker_addr`` as ``group``'s ``broker_id``, the only record of that address:
        (anything changed, the id had no address before)."""
        changed = False
        for other in list(self._groups.values()):
            for other_id, other_addr in list(other.addrs.items()):
                if other_addr == broker_addr and (other is not group or other_id != broker_id):
                    del other.addrs[other_id]
                    changed = True
                    if not other.addrs and other is not group:
                        self._drop_group(other)
        old_addr = group.addrs.get(broker_id)
        if old_addr != broker_addr:
            group.addrs[broker_id] = broker_addr
            changed = True
            if old_addr is not None:
                self._live.pop(old_addr, None)
                self._filters.pop(old_addr, None)
        return changed, old_addr is None

    def _register_topics(self, broker_name: str, wrapper: TopicConfigSerializeWrapper) -> bool:
        """Create or update the QueueData of every topic the master sent; True if any changed."""
        changed = False
        for config in wrapper.topic_config_table.values():
            if self._create_and_update_queue_data(
                broker_name, config.topic_name, QueueData.from_topic_config(broker_name, config)
            ):
                changed = True
        return changed

    def _set_filters(self, broker_addr: str, filter_server_list: Sequence[str]) -> bool:
        """Replace the broker's filter servers (an empty list drops them); True if they changed."""
        filters = tuple(filter_server_list)
        if not filters:
            return self._filters.pop(broker_addr, None) is not None
        if self._filters.get(broker_addr) != filters:
            self._filters[broker_addr] = filters
            return True
        return False

    def _register_result(self, group: _Group, broker_id: int) -> RegisterBrokerResult:
        """A slave learns its live master's address and HA address; a master gets nothing."""
        if broker_id != MASTER_ID:
            master_addr = group.addrs.get(MASTER_ID)
            if master_addr is not None:
                master = self._live.get(master_addr)
                if master is not None:
                    return RegisterBrokerResult(
                        ha_server_addr=master.ha_server_addr, master_addr=master_addr
                    )
        return RegisterBrokerResult()

    def _create_and_update_queue_data(self, broker_name: str, topic: str, data: QueueData) -> bool:
        queues = self._topics.get(topic)
        if queues is None:
            self._topics[topic] = {broker_name: data}
            return True
        old = queues.get(broker_name)
        if old == data:
            return False
        if old is not None:
            del queues[broker_name]  # RocketMQ removes the old entry and appends the new one
        queues[broker_name] = data
        return True

    def is_broker_topic_config_changed(self, broker_addr: str, data_version: DataVersion) -> bool:
        prev = self.query_broker_topic_config(broker_addr)
        return prev is None or prev != data_version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        info = self._live.get(broker_addr)
        return None if info is None else info.data_version

    def update_broker_info_update_timestamp(self, broker_addr: str, now: float) -> None:
        info = self._live.get(broker_addr)
        if info is not None:
            self._live[broker_addr] = attrs.evolve(info, last_update=now)

    def unregister_broker(
        self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int
    ) -> bool:
        """UNREGISTER_BROKER: remove ``broker_id`` of ``broker_name`` if it holds ``broker_addr``.

        The group's cluster is the one it registered in; ``cluster_name`` is informational.
        """
        holder = self._groups.get(broker_name)
        if holder is None or holder.addrs.get(broker_id) != broker_addr:
            return False
        self._remove_addr(broker_addr)
        return True

    # ------------------------------------------------------------------ removal

    def _leave_cluster(self, cluster: str, broker_name: str) -> None:
        names = self._clusters.get(cluster)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self._clusters[cluster]

    def _drop_group(self, group: _Group) -> None:
        """An empty group leaves its cluster, and its QueueData leave every topic."""
        self._groups.pop(group.name, None)
        self._leave_cluster(group.cluster, group.name)
        for topic in list(self._topics):
            queues = self._topics[topic]
            if queues.pop(group.name, None) is not None and not queues:
                del self._topics[topic]

    def _remove_addr(self, broker_addr: str) -> RemovedBroker:
        info = self._live.pop(broker_addr, None)
        self._filters.pop(broker_addr, None)
        found_name: str | None = None
        found_id: int | None = None
        for group in list(self._groups.values()):
            for bid, addr in list(group.addrs.items()):
                if addr == broker_addr:
                    found_name, found_id = group.name, bid
                    del group.addrs[bid]
            if not group.addrs:
                self._drop_group(group)
        self._changed()
        return RemovedBroker(
            broker_addr=broker_addr,
            broker_name=found_name,
            broker_id=found_id,
            conn_id=None if info is None else info.conn_id,
        )

    def scan_not_active(self, now: float) -> list[RemovedBroker]:
        """Remove every broker whose last registration is older than ``broker_expired_s``."""
        expired = [
            addr
            for addr, info in self._live.items()
            if info.last_update + self.broker_expired_s < now
        ]
        return [self._remove_addr(addr) for addr in expired]

    def on_connection_closed(self, conn_id: int) -> list[RemovedBroker]:
        """Connection ``conn_id`` closed: remove every broker that registered over it, at once."""
        addrs = [addr for addr, info in self._live.items() if info.conn_id == conn_id]
        return [self._remove_addr(addr) for addr in addrs]

    # ------------------------------------------------------------------ admin

    def _operate_write_perm(self, broker_name: str, add: bool) -> int:
        count = 0
        for queues in self._topics.values():
            data = queues.get(broker_name)
            if data is None:
                continue
            perm = PermName.PERM_RW if add else data.perm & ~PermName.PERM_WRITE
            queues[broker_name] = attrs.evolve(data, perm=perm)
            count += 1
        if count:
            self._changed()
        return count

    def wipe_write_perm_of_broker(self, broker_name: str) -> int:
        """Clear PERM_WRITE in every QueueData of ``broker_name``; returns how many topics."""
        return self._operate_write_perm(broker_name, add=False)

    def add_write_perm_of_broker(self, broker_name: str) -> int:
        """Set perm to read+write in every QueueData of ``broker_name``; returns how many topics."""
        return self._operate_write_perm(broker_name, add=True)

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """Forget ``topic``; with ``cluster_name`` only that cluster's QueueData."""
        if not cluster_name:
            if self._topics.pop(topic, None) is not None:
                self._changed()
            return
        queues = self._topics.get(topic)
        names = self._clusters.get(cluster_name)
        if queues is None or not names:
            return
        removed = [queues.pop(name) for name in list(queues) if name in names]
        if not queues:
            del self._topics[topic]
        if removed:
            self._changed()

    # ------------------------------------------------------------------ answers

    def pickup_topic_route_data(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, or None unless it has QueueData and at least one BrokerData."""
        queues = self._topics.get(topic)
        if not queues:
            return None
        brokers = [
            self._groups[name].snapshot() for name in sorted(queues) if name in self._groups
        ]
        if not brokers:
            return None
        filters = {
            addr: self._filters[addr]
            for b in brokers
            for addr in b.broker_addrs.values()
            if addr in self._filters
        }
        return TopicRouteData(
            queue_datas=tuple(queues.values()), broker_datas=brokers, filter_server_table=filters
        )

    def _check_cache(self) -> None:
        if self._cache_generation != self.generation:
            self._route_cache.clear()
            self._cluster_cache = None
            self._cache_generation = self.generation

    def topic_route_json(
        self, topic: str, *, standard: bool, order_topic_conf: str | None = None
    ) -> bytes | None:
        """The encoded route of ``topic`` (cached until the tables change), or None if unknown."""
        self._check_cache()
        key = (topic, standard, order_topic_conf)
        try:
            return self._route_cache[key]
        except KeyError:
            pass
        route = self.pickup_topic_route_data(topic)
        body = None
        if route is not None:
            if order_topic_conf is not None:
                route = attrs.evolve(route, order_topic_conf=order_topic_conf)
            body = route.encode(standard=standard)
        if len(self._route_cache) >= ROUTE_CACHE_MAX_ENTRIES:
            self._route_cache.clear()
        self._route_cache[key] = body
        return body

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            broker_addr_table=self.broker_addr_table, cluster_addr_table=self.cluster_addr_table
        )

    def cluster_info_json(self) -> bytes:
        self._check_cache()
        if self._cluster_cache is None:
            self._cluster_cache = self.cluster_info().encode()
        return self._cluster_cache

    def all_topics(self) -> TopicList:
        return TopicList(sorted(self._topics))

    def topics_by_cluster(self, cluster: str) -> TopicList:
        names = self._clusters.get(cluster, set())
        return TopicList(sorted(t for t, q in self._topics.items() if names.intersection(q)))

    def system_topics(self) -> TopicList:
        """Cluster names and broker names (RocketMQ's per-cluster / per-broker system topics), plus
        the address of a broker to ask for the rest (a master when there is one)."""
        topics: list[str] = []
        for cluster in sorted(self._clusters):
            topics.append(cluster)
            topics.extend(sorted(self._clusters[cluster]))
        addr = None
        for name in sorted(self._groups):
            addr = self._groups[name].snapshot().select_broker_addr()
            if addr is not None:
                break
        return TopicList(topics, broker_addr=addr)

    def _topics_where(self, keep: Iterable[tuple[str, int]]) -> TopicList:
        return TopicList(sorted(t for t, flag in keep))

    def _first_flags(self) -> list[tuple[str, int]]:
        return [(t, next(iter(q.values())).topic_sys_flag) for t, q in self._topics.items() if q]

    def unit_topics(self) -> TopicList:
        return self._topics_where(
            (t, f) for t, f in self._first_flags() if TopicSysFlag.has_unit_flag(f)
        )

    def has_unit_sub_topics(self) -> TopicList:
        return self._topics_where(
            (t, f) for t, f in self._first_flags() if TopicSysFlag.has_unit_sub_flag(f)
        )

    def has_unit_sub_ununit_topics(self) -> TopicList:
        return self._topics_where(
            (t, f)
            for t, f in self._first_flags()
            if TopicSysFlag.has_unit_sub_flag(f) and not TopicSysFlag.has_unit_flag(f)
        )

    # ------------------------------------------------------------------ self-check

    def consistency_errors(self) -> list[str]:
        """Every way the tables disagree with each other (empty when consistent)."""
        errors: list[str] = []
        seen: dict[str, tuple[str, int]] = {}
        for name, group in self._groups.items():
            if group.name != name:
                errors.append(f"group {name} is named {group.name}")
            if not group.addrs:
                errors.append(f"group {name} has no address")
            if name not in self._clusters.get(group.cluster, set()):
                errors.append(f"group {name} missing from cluster {group.cluster}")
            for bid, addr in group.addrs.items():
                if addr in seen:
                    errors.append(f"{addr} held by {seen[addr]} and {(name, bid)}")
                seen[addr] = (name, bid)
                if addr not in self._live:
                    errors.append(f"{addr} ({name}, {bid}) is not live")
        for addr in self._live:
            if addr not in seen:
                errors.append(f"live {addr} is in no group")
        for addr in self._filters:
            if addr not in self._live:
                errors.append(f"filter servers of {addr}, which is not live")
        for cluster, names in self._clusters.items():
            if not names:
                errors.append(f"cluster {cluster} is empty")
            for name in names:
                member = self._groups.get(name)
                if member is None or member.cluster != cluster:
                    errors.append(f"cluster {cluster} lists {name}, which is not in it")
        for topic, queues in self._topics.items():
            if not queues:
                errors.append(f"topic {topic} has no QueueData")
            for name, data in queues.items():
                if data.broker_name != name:
                    errors.append(f"topic {topic}: QueueData of {data.broker_name} under {name}")
                if name not in self._groups:
                    errors.append(f"topic {topic} routes to missing broker {name}")
        return errors
