"""HAConfig reads RocketMQ's HA keys from broker.conf properties."""

from __future__ import annotations

from rmq_cluster.cluster.config import load_config
from rmq_cluster.ha.config import HAConfig


def test_defaults_are_rocketmqs() -> None:
    c = HAConfig()
    assert c.ha_listen_port == 10912
    assert c.ha_send_heartbeat_interval_ms == 5000
    assert c.ha_housekeeping_interval_ms == 20000
    assert c.ha_transfer_batch_size == 32 * 1024
    assert c.ha_slave_fallbehind_max == 256 * 1024 * 1024
    assert c.slave_timeout_ms == 3000
    assert c.configured_master_address is None


def test_load_from_properties_with_listen_port_override() -> None:
    props = {
        "brokerRole": "SLAVE",
        "haListenPort": "2000",  # BrokerStartup overrides it with listenPort + 1
        "haMasterAddress": "10.0.0.1:10912",
        "haSendHeartbeatInterval": "1000",
        "haHousekeepingInterval": "3000",
        "haTransferBatchSize": "65536",
        "haSlaveFallbehindMax": "1048576",
        "slaveTimeout": "2000",
    }
    loaded = load_config(HAConfig, props, ha_listen_port=10911 + 1)
    c = loaded.config
    assert c.ha_listen_port == 10912
    assert c.configured_master_address == "10.0.0.1:10912"
    assert c.heartbeat_interval_s == 1.0 and c.housekeeping_interval_s == 3.0
    assert c.ha_transfer_batch_size == 65536 and c.ha_slave_fallbehind_max == 1048576
    assert c.sync_timeout_s == 2.0
    assert loaded.unknown == {"brokerRole": "SLAVE"}


def test_short_master_address_is_ignored() -> None:
    assert HAConfig(ha_master_address=" 1:2 ").configured_master_address is None
