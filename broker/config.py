"""Broker configuration: RocketMQ 4.9 ``BrokerConfig`` / ``NettyServerConfig`` keys and defaults.

One broker.conf feeds two frozen configs: ``BrokerConfig`` (this file) and the store's
``MessageStoreConfig`` (``brokerRole``, ``flushDiskType``, ``storePathRootDir``, ...);
``load_broker_config`` splits the properties between them and reports keys neither knows.

Differences from RocketMQ, each for tests and embedding:

* ``listenPort=0`` binds an ephemeral port; the fast port is then ephemeral too
  (RocketMQ: fast port = listenPort - 2; ``fastListenPort`` overrides);
* ``bindAddress`` defaults to ``127.0.0.1`` (RocketMQ: ``0.0.0.0``): set it to listen on other
  interfaces; while it is a loopback address, ``brokerIP1`` defaults to it;
* ``brokerIP1`` defaults to ``127.0.0.1`` when the machine has no better address
  (RocketMQ picks the first non-loopback address);
* ``advertisedListenPort`` / ``advertisedHaListenPort`` (extension keys, default 0 = the bound
  ports): the ports registered with the NameServers when the broker is reached through a proxy;
* housekeeping periods that RocketMQ hard-codes are keys with the same defaults
  (``clientHousekeepingInterval``, ``clientChannelExpiredTime``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping
from typing import Final

import attrs

from rmq_cluster.cluster.config import ConfigError, load_config, setting
from rmq_cluster.dledger.config import DLedgerConfig, DLedgerConfigError
from rmq_cluster.ha.config import HAConfig
from rmq_cluster.store.config import BrokerRole, MessageStoreConfig

DEFAULT_LISTEN_PORT: Final = 10911
#: Nodes listen on loopback unless ``bindAddress`` says otherwise (RocketMQ binds 0.0.0.0): a
#: broker started with no configuration is not reachable from other machines by accident.
DEFAULT_BIND_ADDRESS: Final = "127.0.0.1"
#: The fast ("VIP") port is the listen port minus this (RocketMQ 10909 for 10911).
FAST_PORT_OFFSET: Final = 2
#: The HA port is the listen port plus this (RocketMQ 10912 for 10911).
HA_PORT_OFFSET: Final = 1
DEFAULT_REGISTER_PERIOD_MS: Final = 30_000
#: RocketMQ clamps the registration period into [10 s, 60 s].
MIN_REGISTER_PERIOD_MS: Final = 10_000
MAX_REGISTER_PERIOD_MS: Final = 60_000
REGISTER_TIMEOUT_MS: Final = 6_000
DEFAULT_CLIENT_EXPIRED_MS: Final = 120_000
DEFAULT_HOUSEKEEPING_INTERVAL_MS: Final = 10_000


def _local_ip() -> str:
    """A non-loopback IPv4 address of this machine, else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent: only picks a route
            ip = str(s.getsockname()[0])
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.strip("[]")).is_loopback
    except ValueError:
        return addr == "localhost"


def _hostname() -> str:
    try:
        return socket.gethostname() or "broker-a"
    except OSError:
        return "broker-a"


@attrs.frozen
class BrokerConfig:
    rocketmq_home: str = setting(
        "rocketmqHome", attrs.Factory(lambda: os.environ.get("ROCKETMQ_HOME", ""))
    )
    namesrv_addr: str = setting(
        "namesrvAddr", attrs.Factory(lambda: os.environ.get("NAMESRV_ADDR", ""))
    )
    broker_ip1: str = setting("brokerIP1", attrs.Factory(_local_ip))
    broker_ip2: str = setting("brokerIP2", "")
    broker_name: str = setting("brokerName", attrs.Factory(_hostname))
    broker_cluster_name: str = setting("brokerClusterName", "DefaultCluster")
    broker_id: int = setting("brokerId", 0)
    broker_permission: int = setting("brokerPermission", 6)
    default_topic_queue_nums: int = setting("defaultTopicQueueNums", 8)
    auto_create_topic_enable: bool = setting("autoCreateTopicEnable", True)
    cluster_topic_enable: bool = setting("clusterTopicEnable", True)
    broker_topic_enable: bool = setting("brokerTopicEnable", True)
    auto_create_subscription_group: bool = setting("autoCreateSubscriptionGroup", True)
    trace_topic_enable: bool = setting("traceTopicEnable", False)
    msg_trace_topic_name: str = setting("msgTraceTopicName", "RMQ_SYS_TRACE_TOPIC")
    reject_transaction_message: bool = setting("rejectTransactionMessage", False)
    #: Replies (SEND_REPLY_MESSAGE) are stored in their topic as well as pushed (RocketMQ).
    store_reply_message_enable: bool = setting("storeReplyMessageEnable", True)
    long_polling_enable: bool = setting("longPollingEnable", True)
    #: SQL92 subscriptions (MessageSelector.bySql) are served only with this on (RocketMQ).
    enable_property_filter: bool = setting("enablePropertyFilter", False)
    short_polling_time_mills: int = setting("shortPollingTimeMills", 1000)
    register_name_server_period_ms: int = setting(
        "registerNameServerPeriod", DEFAULT_REGISTER_PERIOD_MS
    )
    register_broker_timeout_mills: int = setting("registerBrokerTimeoutMills", REGISTER_TIMEOUT_MS)
    flush_consumer_offset_interval_ms: int = setting("flushConsumerOffsetInterval", 5000)
    flush_delay_offset_interval_ms: int = setting("flushDelayOffsetInterval", 10_000)
    transaction_timeout_ms: int = setting("transactionTimeOut", 6000)
    transaction_check_max: int = setting("transactionCheckMax", 15)
    transaction_check_interval_ms: int = setting("transactionCheckInterval", 60_000)
    client_channel_expired_ms: int = setting("clientChannelExpiredTime", DEFAULT_CLIENT_EXPIRED_MS)
    client_housekeeping_interval_ms: int = setting(
        "clientHousekeepingInterval", DEFAULT_HOUSEKEEPING_INTERVAL_MS
    )
    #: Pull responses may send a lagging consumer to a slave (whichBrokerWhenConsumeSlowly).
    slave_read_enable: bool = setting("slaveReadEnable", False)
    #: Percent of RAM: a consumer further behind the CommitLog's end than this is "on disk"
    #: (RocketMQ keeps it in MessageStoreConfig; a slave uses 10 points less).
    access_message_in_memory_max_ratio: float = setting("accessMessageInMemoryMaxRatio", 40.0)
    # NettyServerConfig
    #: Loopback unless told otherwise (RocketMQ: 0.0.0.0); see DEFAULT_BIND_ADDRESS.
    bind_address: str = setting("bindAddress", DEFAULT_BIND_ADDRESS)
    listen_port: int = setting("listenPort", DEFAULT_LISTEN_PORT)
    #: -1: listenPort - 2 (ephemeral when listenPort is 0); 0: ephemeral.
    fast_listen_port: int = setting("fastListenPort", -1)
    ha_listen_port: int = setting("haListenPort", -1)
    #: Extension keys (not RocketMQ's; 0 = the bound port, RocketMQ's behaviour): the ports
    #: this broker registers (brokerAddr, haServerAddr, the store host in msgIds) when it is
    #: reached through something else, e.g. the chaos proxy (chaos/proxy.py).
    advertised_listen_port: int = setting("advertisedListenPort", 0)
    advertised_ha_listen_port: int = setting("advertisedHaListenPort", 0)
    server_channel_max_idle_time_seconds: int = setting("serverChannelMaxIdleTimeSeconds", 120)
    #: Plain ACL (RocketMQ 4.4+): verify every request against the rules in ``aclFile``.
    acl_enable: bool = setting("aclEnable", False)
    #: Extension key: the rules file ("" = ``{rocketmqHome}/conf/plain_acl.yml``, RocketMQ's
    #: default; RocketMQ itself reads ``-Drocketmq.acl.plain.file``).
    acl_file: str = setting("aclFile", "")
    #: Extension key: port of the Prometheus ``/metrics`` listener (-1 = off, 0 = ephemeral);
    #: it binds ``bindAddress``.
    metrics_port: int = setting("metricsPort", -1)
    #: Extension keys: credentials this broker signs its own outgoing requests with (NameServer
    #: registration, a slave's sync from its master) when those peers enforce ACL.
    acl_access_key: str = setting("aclAccessKey", "")
    acl_secret_key: str = setting("aclSecretKey", "")

    @listen_port.validator
    def _check_port(self, attribute: attrs.Attribute, value: int) -> None:
        if not 0 <= value < 65536:
            raise ValueError(f"listenPort: {value} is not a port number")

    @broker_permission.validator
    def _check_perm(self, attribute: attrs.Attribute, value: int) -> None:
        if not 0 <= value <= 15:
            raise ValueError(f"brokerPermission: {value} is not a permission (0..15)")

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.split(";") if a.strip()]

    @property
    def fast_port(self) -> int:
        if self.fast_listen_port >= 0:
            return self.fast_listen_port
        if self.listen_port == 0:
            return 0
        return self.listen_port - FAST_PORT_OFFSET

    @property
    def ha_port(self) -> int:
        if self.ha_listen_port >= 0:
            return self.ha_listen_port
        if self.listen_port == 0:
            return 0  # ephemeral, like the listen port
        return self.listen_port + HA_PORT_OFFSET

    @property
    def register_period_s(self) -> float:
        # RocketMQ: max(10 s, min(period, 60 s))
        period = min(self.register_name_server_period_ms, MAX_REGISTER_PERIOD_MS)
        return max(MIN_REGISTER_PERIOD_MS, period) / 1000.0


@attrs.frozen
class BrokerSettings:
    """Everything a broker node reads from its properties file."""

    broker: BrokerConfig
    store: MessageStoreConfig
    ha: HAConfig = attrs.field(factory=HAConfig)
    #: enableDLegerCommitLog and the other dLeger* keys (dledger/config.py)
    dledger: DLedgerConfig = attrs.field(factory=DLedgerConfig)

    @property
    def is_slave(self) -> bool:
        return self.store.broker_role is BrokerRole.SLAVE


@attrs.frozen
class LoadedSettings:
    settings: BrokerSettings
    unknown: Mapping[str, str]


def load_broker_config(
    values: Mapping[str, str], *, namesrv_addr: str | None = None
) -> LoadedSettings:
    """Split broker.conf ``values`` between BrokerConfig and MessageStoreConfig."""
    if namesrv_addr is not None:
        values = {**values, "namesrvAddr": namesrv_addr}
    bind = values.get("bindAddress", DEFAULT_BIND_ADDRESS).strip()
    if "brokerIP1" not in values and _is_loopback(bind):
        values = {**values, "brokerIP1": bind}  # advertise what a loopback listener can serve
    broker = load_config(BrokerConfig, values)
    store = load_config(MessageStoreConfig, values)
    ha = load_config(HAConfig, values, ha_listen_port=broker.config.ha_port)
    dl = load_config(DLedgerConfig, values)
    unknown = {
        k: v
        for k, v in broker.unknown.items()
        if k in store.unknown and k in ha.unknown and k in dl.unknown
    }
    if broker.config.broker_id < 0:
        raise ConfigError(f"brokerId: {broker.config.broker_id} must be >= 0")
    if bool(broker.config.acl_access_key) != bool(broker.config.acl_secret_key):
        raise ConfigError("aclAccessKey and aclSecretKey must be set together")
    try:
        dl.config.validate()
    except DLedgerConfigError as exc:
        raise ConfigError(str(exc)) from None
    return LoadedSettings(
        BrokerSettings(broker.config, store.config, ha.config, dl.config), unknown
    )
