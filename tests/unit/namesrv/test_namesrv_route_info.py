"""RouteInfoManager behaviours RocketMQ defines (docs/protocol/remoting.md: the NameServer)."""

from __future__ import annotations

from rmq_cluster.cluster.protocol.route import (
    DataVersion,
    PermName,
    QueueData,
    RegisterBrokerResult,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicSysFlag,
)
from rmq_cluster.namesrv.route_info import RouteInfoManager

M, S = "10.0.0.1:10911", "10.0.0.2:10911"


def wrapper(counter: int, *topics: TopicConfig) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({t.topic_name: t for t in topics}, DataVersion(1, counter))


def register(
    routes: RouteInfoManager,
    addr: str,
    broker_id: int,
    w: TopicConfigSerializeWrapper | None = None,
    *,
    name: str = "broker-a",
    cluster: str = "C",
    conn: int = 1,
    now: float = 0.0,
) -> RegisterBrokerResult:
    return routes.register_broker(
        cluster, addr, name, broker_id, addr.replace("10911", "10912"), w, [], conn, now
    )


def test_master_creates_queue_data_slave_does_not() -> None:
    routes = RouteInfoManager()
    register(routes, S, 1, wrapper(1, TopicConfig("T", 4, 4)))
    assert routes.topic_queue_table == {}
    assert routes.pickup_topic_route_data("T") is None
    register(routes, M, 0, wrapper(1, TopicConfig("T", 4, 4)))
    assert routes.topic_queue_table == {"T": (QueueData("broker-a", 4, 4, 6, 0),)}
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: M, 1: S}


def test_slave_learns_master_ha_address() -> None:
    routes = RouteInfoManager()
    assert register(routes, S, 1).master_addr is None  # no master yet
    register(routes, M, 0)
    result = register(routes, S, 1)
    assert (result.master_addr, result.ha_server_addr) == (M, "10.0.0.1:10912")
    assert register(routes, M, 0).master_addr is None


def test_topic_update_only_when_data_version_changes() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0, wrapper(1, TopicConfig("T", 4, 4)))
    register(routes, M, 0, wrapper(1, TopicConfig("T", 8, 8)))  # same version: ignored
    assert routes.topic_queue_table["T"][0].read_queue_nums == 4
    register(routes, M, 0, wrapper(2, TopicConfig("T", 8, 8), TopicConfig("U", 1, 1)))
    assert routes.topic_queue_table["T"][0].read_queue_nums == 8
    assert set(routes.topic_queue_table) == {"T", "U"}
    assert routes.is_broker_topic_config_changed(M, DataVersion(1, 2)) is False
    assert routes.is_broker_topic_config_changed(M, DataVersion(1, 3)) is True
    assert routes.is_broker_topic_config_changed("nobody:1", DataVersion(1, 2)) is True


def test_role_switch_drops_the_old_id_of_the_address() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0)
    register(routes, S, 1)
    # DLedger failover: the slave becomes master, the old master comes back as a slave
    register(routes, S, 0)
    register(routes, M, 1)
    data = routes.broker_data("broker-a")
    assert data is not None and data.broker_addrs == {0: S, 1: M}
    assert routes.consistency_errors() == []


def test_removing_the_last_broker_removes_topics_and_cluster() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0, wrapper(1, TopicConfig("T")), conn=7)
    register(routes, S, 1, conn=8)
    register(routes, "10.0.0.3:10911", 0, wrapper(1, TopicConfig("T")), name="broker-b")
    assert routes.unregister_broker("C", M, "broker-a", 0)
    # master gone, slave alive: BrokerData keeps only the slave, QueueData stay
    assert routes.broker_data("broker-a").broker_addrs == {1: S}  # type: ignore[union-attr]
    assert [q.broker_name for q in routes.topic_queue_table["T"]] == ["broker-a", "broker-b"]
    assert [r.broker_addr for r in routes.on_connection_closed(8)] == [S]
    assert routes.broker_data("broker-a") is None
    assert [q.broker_name for q in routes.topic_queue_table["T"]] == ["broker-b"]
    assert routes.cluster_addr_table == {"C": frozenset({"broker-b"})}
    assert routes.unregister_broker("C", "10.0.0.3:10911", "broker-b", 0)
    assert routes.topic_queue_table == {} and routes.cluster_addr_table == {}


def test_unregister_of_an_address_the_id_does_not_hold_is_ignored() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0)
    assert not routes.unregister_broker("C", S, "broker-a", 0)
    assert not routes.unregister_broker("C", M, "broker-a", 1)
    assert not routes.unregister_broker("C", M, "broker-x", 0)
    assert set(routes.live_brokers) == {M}


def test_expiry_is_strictly_after_the_timeout() -> None:
    routes = RouteInfoManager(broker_expired_s=120.0)
    register(routes, M, 0, now=0.0)
    register(routes, S, 1, now=10.0)
    assert routes.scan_not_active(120.0) == []
    assert [r.broker_addr for r in routes.scan_not_active(120.5)] == [M]
    routes.update_broker_info_update_timestamp(S, 100.0)  # QUERY_DATA_VERSION unchanged
    assert routes.scan_not_active(220.0) == []
    assert [r.broker_addr for r in routes.scan_not_active(220.1)] == [S]


def test_write_perm_wipe_and_add() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0, wrapper(1, TopicConfig("T"), TopicConfig("U", perm=7)))
    assert routes.wipe_write_perm_of_broker("broker-a") == 2
    perms = {t: q[0].perm for t, q in routes.topic_queue_table.items()}
    assert perms == {"T": PermName.PERM_READ, "U": PermName.PERM_READ | PermName.PERM_INHERIT}
    assert routes.add_write_perm_of_broker("broker-a") == 2
    assert {q[0].perm for q in routes.topic_queue_table.values()} == {PermName.PERM_RW}
    assert routes.wipe_write_perm_of_broker("nobody") == 0


def test_delete_topic_everywhere_or_in_one_cluster() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0, wrapper(1, TopicConfig("T")), cluster="C1")
    register(routes, S, 0, wrapper(1, TopicConfig("T")), name="broker-b", cluster="C2")
    routes.delete_topic("T", "C1")
    assert [q.broker_name for q in routes.topic_queue_table["T"]] == ["broker-b"]
    routes.delete_topic("T", "nope")
    routes.delete_topic("T")
    assert "T" not in routes.topic_queue_table


def test_topic_lists() -> None:
    routes = RouteInfoManager()
    unit = TopicSysFlag.FLAG_UNIT
    sub = TopicSysFlag.FLAG_UNIT_SUB
    register(
        routes,
        M,
        0,
        wrapper(
            1,
            TopicConfig("A"),
            TopicConfig("U", topic_sys_flag=unit),
            TopicConfig("US", topic_sys_flag=unit | sub),
            TopicConfig("S", topic_sys_flag=sub),
        ),
        cluster="C1",
    )
    register(routes, S, 1, cluster="C1")
    register(routes, "10.0.0.3:10911", 0, wrapper(1, TopicConfig("B")), name="b", cluster="C2")
    assert routes.all_topics().topic_list == ("A", "B", "S", "U", "US")
    assert routes.topics_by_cluster("C2").topic_list == ("B",)
    assert routes.topics_by_cluster("none").topic_list == ()
    system = routes.system_topics()
    assert system.topic_list == ("C1", "broker-a", "C2", "b")
    assert system.broker_addr == "10.0.0.3:10911"  # group "b" sorts first; its master
    assert routes.unit_topics().topic_list == ("U", "US")
    assert routes.has_unit_sub_topics().topic_list == ("S", "US")
    assert routes.has_unit_sub_ununit_topics().topic_list == ("S",)


def test_filter_servers_in_route() -> None:
    routes = RouteInfoManager()
    routes.register_broker("C", M, "broker-a", 0, "ha", wrapper(1, TopicConfig("T")),
                           ["10.0.0.9:1"], 1, 0.0)
    route = routes.pickup_topic_route_data("T")
    assert route is not None and route.filter_server_table == {M: ("10.0.0.9:1",)}
    routes.register_broker("C", M, "broker-a", 0, "ha", None, [], 1, 0.0)
    assert routes.filter_server_table == {}


def test_route_cache_follows_changes() -> None:
    routes = RouteInfoManager()
    register(routes, M, 0, wrapper(1, TopicConfig("T", 4, 4)))
    first = routes.topic_route_json("T", standard=True)
    assert first is routes.topic_route_json("T", standard=True)  # cached
    generation = routes.generation
    register(routes, M, 0, wrapper(1, TopicConfig("T", 4, 4)), now=5.0)  # liveness only
    assert routes.generation == generation
    routes.wipe_write_perm_of_broker("broker-a")
    assert routes.topic_route_json("T", standard=True) != first
    assert routes.topic_route_json("nope", standard=True) is None
