"""Hypothesis state machine over RouteInfoManager: any interleaving of register, unregister,
expiry, connection close, write-permission changes and topic deletion keeps the tables consistent.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rmq_cluster.cluster.protocol.route import (
    DataVersion,
    PermName,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from rmq_cluster.namesrv.route_info import RouteInfoManager

EXPIRY_S = 120.0
ADDRS = [f"10.0.0.{i}:10911" for i in range(1, 6)]
NAMES = ["broker-a", "broker-b", "broker-c"]
CLUSTERS = ["C1", "C2"]
TOPICS = ["T1", "T2", "T3", "%RETRY%g"]
CONNS = [1, 2, 3, 4]


class RouteMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.routes = RouteInfoManager(broker_expired_s=EXPIRY_S)
        self.now = 1000.0
        self.last_heard: dict[str, float] = {}  # addr -> time of its last registration
        self.last_reg: dict[str, tuple[str, int]] = {}  # addr -> (name, id) it last registered as
        self.master_topics: dict[str, set[str]] = {}  # name -> topics its masters reported

    # exact boundaries too: a broker heard exactly EXPIRY_S ago is still alive
    @rule(dt=st.one_of(st.sampled_from([0.0, 0.5, 1.0, 60.0, 119.5, 120.0, 120.5]),
                       st.floats(min_value=0.0, max_value=200.0)))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(
        cluster=st.sampled_from(CLUSTERS),
        name=st.sampled_from(NAMES),
        broker_id=st.sampled_from([0, 0, 1, 2]),
        addr=st.sampled_from(ADDRS),
        conn=st.sampled_from(CONNS),
        topics=st.sets(st.sampled_from(TOPICS)),
        counter=st.integers(0, 3),
        queues=st.integers(1, 8),
        filters=st.sampled_from([None, (), ("10.0.0.9:1",)]),
    )
    def register(
        self,
        cluster: str,
        name: str,
        broker_id: int,
        addr: str,
        conn: int,
        topics: set[str],
        counter: int,
        queues: int,
        filters: tuple[str, ...] | None,
    ) -> None:
        wrapper = TopicConfigSerializeWrapper(
            {t: TopicConfig(t, queues, queues) for t in sorted(topics)}, DataVersion(1, counter)
        )
        before = self.routes.broker_data(name)
        result = self.routes.register_broker(
            cluster, addr, name, broker_id, addr + "-ha", wrapper, filters, conn, self.now
        )
        self.last_heard[addr] = self.now
        self.last_reg[addr] = (name, broker_id)
        if broker_id == 0:
            self.master_topics.setdefault(name, set()).update(topics)
            assert result.master_addr is None
        else:
            master = before.broker_addrs.get(0) if before is not None else None
            if master is not None and master != addr:
                assert result.master_addr == master
                assert result.ha_server_addr == master + "-ha"
        data = self.routes.broker_data(name)
        assert data is not None and data.broker_addrs[broker_id] == addr
        assert data.cluster == cluster
        assert name in self.routes.cluster_addr_table[cluster]

    @rule(
        cluster=st.sampled_from(CLUSTERS),
        name=st.sampled_from(NAMES),
        broker_id=st.sampled_from([0, 1, 2]),
        addr=st.sampled_from(ADDRS),
    )
    def unregister(self, cluster: str, name: str, broker_id: int, addr: str) -> None:
        data = self.routes.broker_data(name)
        holds = data is not None and data.broker_addrs.get(broker_id) == addr
        live_before = set(self.routes.live_brokers)
        assert self.routes.unregister_broker(cluster, addr, name, broker_id) == holds
        if holds:
            assert set(self.routes.live_brokers) == live_before - {addr}
        else:
            assert set(self.routes.live_brokers) == live_before

    @rule()
    def scan(self) -> None:
        silent = {a for a in self.routes.live_brokers if self.last_heard[a] + EXPIRY_S < self.now}
        removed = self.routes.scan_not_active(self.now)
        assert {r.broker_addr for r in removed} == silent
        for addr, info in self.routes.live_brokers.items():
            assert info.last_update + EXPIRY_S >= self.now, addr

    @rule(conn=st.sampled_from(CONNS))
    def close_connection(self, conn: int) -> None:
        expected = {a for a, i in self.routes.live_brokers.items() if i.conn_id == conn}
        live_before = set(self.routes.live_brokers)
        removed = self.routes.on_connection_closed(conn)
        assert {r.broker_addr for r in removed} == expected
        assert set(self.routes.live_brokers) == live_before - expected

    @rule(name=st.sampled_from(NAMES))
    def wipe_write_perm(self, name: str) -> None:
        holding = {t for t, qs in self.routes.topic_queue_table.items() if any(
            q.broker_name == name for q in qs)}
        assert self.routes.wipe_write_perm_of_broker(name) == len(holding)
        for topic in holding:
            for q in self.routes.topic_queue_table[topic]:
                if q.broker_name == name:
                    assert not PermName.is_writeable(q.perm)

    @rule(name=st.sampled_from(NAMES))
    def add_write_perm(self, name: str) -> None:
        count = self.routes.add_write_perm_of_broker(name)
        perms = [q.perm for qs in self.routes.topic_queue_table.values() for q in qs
                 if q.broker_name == name]
        assert count == len(perms) and all(p == PermName.PERM_RW for p in perms)

    @rule(topic=st.sampled_from(TOPICS), cluster=st.sampled_from([None, *CLUSTERS]))
    def delete_topic(self, topic: str, cluster: str | None) -> None:
        self.routes.delete_topic(topic, cluster)
        queues = self.routes.topic_queue_table.get(topic, ())
        if cluster is None:
            assert not queues
        else:
            names = self.routes.cluster_addr_table.get(cluster, frozenset())
            assert not any(q.broker_name in names for q in queues)

    @precondition(lambda self: bool(self.routes.live_brokers))
    @rule(data=st.data())
    def heartbeat_refresh(self, data: st.DataObject) -> None:
        addr = data.draw(st.sampled_from(sorted(self.routes.live_brokers)))
        self.routes.update_broker_info_update_timestamp(addr, self.now)
        self.last_heard[addr] = self.now

    # ------------------------------------------------------------------ invariants

    @invariant()
    def tables_consistent(self) -> None:
        assert self.routes.consistency_errors() == []

    @invariant()
    def ids_are_what_brokers_registered_as(self) -> None:
        # every (name, id) -> addr, the master id 0 included, is the broker's own last registration
        for name, data in self.routes.broker_addr_table.items():
            for broker_id, addr in data.broker_addrs.items():
                assert self.last_reg[addr] == (name, broker_id)

    @invariant()
    def routes_resolve(self) -> None:
        for topic, queues in self.routes.topic_queue_table.items():
            route = self.routes.pickup_topic_route_data(topic)
            assert route is not None
            names = {b.broker_name for b in route.broker_datas}
            assert {q.broker_name for q in queues} == names
            for q in queues:
                assert topic in self.master_topics.get(q.broker_name, set())
            for standard in (True, False):
                body = self.routes.topic_route_json(topic, standard=standard)
                assert body is not None and TopicRouteData.decode(body) == route

    @invariant()
    def cluster_info_matches(self) -> None:
        info = self.routes.cluster_info()
        assert info.broker_addr_table == self.routes.broker_addr_table
        from rmq_cluster.cluster.protocol.route import ClusterInfo

        assert ClusterInfo.decode(self.routes.cluster_info_json()) == info


TestRouteMachine = RouteMachine.TestCase
