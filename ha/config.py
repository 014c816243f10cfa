"""HAConfig: the classic master/slave replication keys of RocketMQ 4.9 ``MessageStoreConfig``
(the store's own config does not carry them), with RocketMQ's names and defaults.

The broker builds it from the same properties file as the store and must override
``ha_listen_port`` with ``listenPort + 1`` (BrokerStartup always does).
"""

from __future__ import annotations

from typing import Final

import attrs

from ..cluster.config import setting
from .access import SlaveAllowList

#: RocketMQ's default broker listenPort + 1.
DEFAULT_HA_LISTEN_PORT: Final = 10912
#: A configured haMasterAddress shorter than this is ignored (RocketMQ: length < 6).
MIN_MASTER_ADDRESS_LENGTH: Final = 6


@attrs.frozen
class HAConfig:
    ha_listen_port: int = setting("haListenPort", DEFAULT_HA_LISTEN_PORT)
    #: The master's HA address for a slave ("ip:port"); empty = learn it from REGISTER_BROKER.
    ha_master_address: str = setting("haMasterAddress", "")
    ha_send_heartbeat_interval_ms: int = setting("haSendHeartbeatInterval", 1000 * 5)
    ha_housekeeping_interval_ms: int = setting("haHousekeepingInterval", 1000 * 20)
    ha_transfer_batch_size: int = setting("haTransferBatchSize", 1024 * 32)
    ha_slave_fallbehind_max: int = setting("haSlaveFallbehindMax", 1024 * 1024 * 256)
    #: How long a SYNC_MASTER put waits for a slave ack before FLUSH_SLAVE_TIMEOUT (RocketMQ
    #: 4.9.4+ ``slaveTimeout``; the local disk flush keeps its own ``syncFlushTimeout``).
    slave_timeout_ms: int = setting("slaveTimeout", 1000 * 3)
    #: Extension key: who may connect to haListenPort (ha/access.py): comma-separated IPs,
    #: networks, host names or ``*``, each optionally ``:port``. Empty (the default): loopback
    #: peers for a loopback-bound broker, else the hosts of this group's slaves as the
    #: NameServers list them. RocketMQ has no such check (anyone may connect).
    ha_allowed_slave_addresses: str = setting("haAllowedSlaveAddresses", "")

    @ha_allowed_slave_addresses.validator
    def _check_allowed(self, _attr: attrs.Attribute, value: str) -> None:
        SlaveAllowList.parse(value)

    @property
    def allow_list(self) -> SlaveAllowList:
        """``haAllowedSlaveAddresses`` parsed (empty: use ``default_allow_list``)."""
        return SlaveAllowList.parse(self.ha_allowed_slave_addresses)

    @property
    def heartbeat_interval_s(self) -> float:
        return self.ha_send_heartbeat_interval_ms / 1000

    @property
    def housekeeping_interval_s(self) -> float:
        return self.ha_housekeeping_interval_ms / 1000

    @property
    def sync_timeout_s(self) -> float:
        return self.slave_timeout_ms / 1000

    @property
    def configured_master_address(self) -> str | None:
        """``haMasterAddress`` when it is long enough to be used as is (RocketMQ's rule)."""
        addr = self.ha_master_address.strip()
        return addr if len(addr) >= MIN_MASTER_ADDRESS_LENGTH else None
