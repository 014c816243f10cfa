"""Broker configuration: RocketMQ 4.9 ``BrokerConfig`` / ``NettyServerConfig`` keys and defaults.

One broker.conf feeds two frozen configs: ``BrokerConfig`` (this file) and the store's
``MessageStoreConfig`` (``brokerRole``, ``flushDiskType``, ``storePathRootDir``, ...);
``load_broker_config`` splits the properties between them and reports keys neither knows.

Differences from RocketMQ, each for tests and embedding:

* ``listenPort=0`` binds an ephemeral port; the fast port is then ephemeral too
  (RocketMQ: fast port = listenPort - 2; ``fastListenPort`` overrides);
* ``bindAddress`` defaults to ``127.0.0.1`` (RocketMQ: ``0.0.0.0``): set it to listen on other
  interfaces; while it is a loopback address, ``brokerIP1`` defaults to it, and a
  non-loopback ``brokerIP1`` is refused (it would register an address nothing listens on);
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

from ..cluster.config import (
    ConfigError,
    check_address_list,
    check_cluster_secret,
    check_host,
    check_host_port,
    check_ranges,
    load_config,
    setting,
)
from ..cluster.protocol.names import node_name_problem
from ..dledger.config import DLedgerConfig, DLedgerConfigError
from ..ha.config import HAConfig
from ..ha.protocol import MAX_FRAME_BODY_BYTES
from ..store.config import BrokerRole, MessageStoreConfig
from ..store.record import parse_delay_levels
from .controller_mode import MAX_IN_SYNC_REPLICAS, ControllerModeConfig

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
DEFAULT_METRICS_CACHE_S: Final = 5.0


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
    #: RocketMQ 5 POP (broker/pop): revive log queues, revive scan period, the chance in 100
    #: that a pop reads its retry topic first, and how many pops may be parked (long
    #: polling) at once.
    revive_queue_num: int = setting("reviveQueueNum", 8)
    revive_interval_ms: int = setting("reviveInterval", 1000)
    pop_from_retry_probability: int = setting("popFromRetryProbability", 20)
    max_pop_polling_size: int = setting("maxPopPollingSize", 100_000)

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
    #: Extension keys (remoting memory limits; RemotingServer documents them): connections
    #: open at once (more are closed as soon as accepted), bytes all connections may hold in
    #: incomplete frames (reads pause past it; raised to about 20 MiB if lower: one frame of
    #: the largest size must fit), and seconds a started frame has to complete (else its
    #: connection closes). ``serverMaxConnectionsPerAddress``: connections one peer address
    #: may hold (more are closed as soon as accepted); a tenth of ``serverMaxConnections``, so
    #: one address cannot fill the node, and far above what one machine's clients open.
    server_max_connections: int = setting("serverMaxConnections", 10_000)
    server_max_connections_per_address: int = setting("serverMaxConnectionsPerAddress", 1_000)
    server_max_buffered_input_bytes: int = setting(
        "serverMaxBufferedInputBytes", 256 * 1024 * 1024
    )
    server_partial_frame_timeout_seconds: float = setting(
        "serverPartialFrameTimeoutSeconds", 30.0
    )

    @server_max_connections.validator
    @server_max_connections_per_address.validator
    @server_max_buffered_input_bytes.validator
    @server_partial_frame_timeout_seconds.validator
    def _check_remoting_limit(self, attr: attrs.Attribute, value: float) -> None:
        if not value > 0:
            raise ValueError(f"{attr.metadata['key']}: must be positive, got {value}")
    #: Plain ACL (RocketMQ 4.4+): verify every request against the rules in ``aclFile``.
    acl_enable: bool = setting("aclEnable", False)
    #: Extension key: the rules file ("" = ``{rocketmqHome}/conf/plain_acl.yml``, RocketMQ's
    #: default; RocketMQ itself reads ``-Drocketmq.acl.plain.file``).
    acl_file: str = setting("aclFile", "")
    #: Extension key: port of the Prometheus ``/metrics`` listener (-1 = off, 0 = ephemeral);
    #: it binds ``bindAddress``.
    metrics_port: int = setting("metricsPort", -1)
    #: Extension key: seconds a built ``/metrics`` exposition is served again before the next
    #: scrape builds a new one (0: every scrape builds, concurrent scrapes still share one
    #: build). Bounds what scrapes cost the broker: see broker/metrics.py.
    metrics_cache_seconds: float = setting("metricsCacheSeconds", DEFAULT_METRICS_CACHE_S)
    #: Extension key: when set, ``/metrics`` answers only requests carrying
    #: ``Authorization: Bearer <metricsToken>`` (401 otherwise). ``rmq-cluster up --acl``
    #: renders one.
    metrics_token: str = setting("metricsToken", "", secret=True)
    #: Extension keys: credentials this broker signs its own outgoing requests with (NameServer
    #: registration, a slave's sync from its master) when those peers enforce ACL.
    acl_access_key: str = setting("aclAccessKey", "")
    acl_secret_key: str = setting("aclSecretKey", "", secret=True)
    #: Extension key: the secret this broker's peer ports (HA, DLedger) and its calls to the
    #: controller prove (cluster/remoting/peer_auth.py); "" = open peer ports, as RocketMQ's.
    #: ``rmq-cluster up`` generates one per cluster.
    cluster_secret: str = setting("clusterSecret", "", secret=True)
    #: Keys UPDATE_BROKER_CONFIG refuses (``;``-separated; RocketMQ 5's default): they change
    #: only in the config file, with a restart.
    config_black_list: str = setting("configBlackList", "configBlackList;brokerConfigPath")

    @cluster_secret.validator
    def _check_cluster_secret(self, attribute: attrs.Attribute, value: str) -> None:
        check_cluster_secret(value)

    @listen_port.validator
    def _check_port(self, attribute: attrs.Attribute, value: int) -> None:
        if not 0 <= value < 65536:
            raise ValueError(f"listenPort: {value} is not a port number")

    @broker_permission.validator
    def _check_perm(self, attribute: attrs.Attribute, value: int) -> None:
        if not 0 <= value <= 15:
            raise ValueError(f"brokerPermission: {value} is not a permission (0..15)")

    @property
    def ha_secret(self) -> str | None:
        """What HA slaves must prove on the HA port (ha/access.py): ``clusterSecret`` when set,
        else under ``aclEnable`` the shared ``aclSecretKey`` (as before ``clusterSecret``
        existed; "" = nobody can), else None (RocketMQ's open HA port)."""
        if self.cluster_secret:
            return self.cluster_secret
        return self.acl_secret_key if self.acl_enable else None

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
    #: enableControllerMode, controllerAddr, ... (broker/controller_mode.py)
    controller_mode: ControllerModeConfig = attrs.field(factory=ControllerModeConfig)

    @property
    def is_slave(self) -> bool:
        return self.store.broker_role is BrokerRole.SLAVE

    def parts(self) -> tuple[object, ...]:
        """The config objects, each holding its own keys (haListenPort: the broker's and the
        HA service's resolved one)."""
        return (self.broker, self.store, self.ha, self.dledger, self.controller_mode)


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
    cm = load_config(ControllerModeConfig, values)
    unknown = {
        k: v
        for k, v in broker.unknown.items()
        if k in store.unknown and k in ha.unknown and k in dl.unknown and k in cm.unknown
    }
    try:
        dl.config.validate()
    except DLedgerConfigError as exc:
        raise ConfigError(str(exc)) from None
    settings = BrokerSettings(broker.config, store.config, ha.config, dl.config, cm.config)
    check_settings(settings)
    cm.config.validate(broker.config.broker_id, broker.config.listen_port)
    return LoadedSettings(settings, unknown)


# ----------------------------------------------------------------------------- value checks
# One check for every source of a value: the -c file and -n at boot, UPDATE_BROKER_CONFIG
# (broker/config_update.py) at run time. A value that passes here cannot stop a running
# service later (an unparsable namesrvAddr used to end registration and leave a zombie).

#: Largest message a broker may be configured to accept (the remoting frame limit is 16 MiB).
MAX_MESSAGE_SIZE_LIMIT_BYTES: Final = 16 * 1024 * 1024
#: Most queues a topic created with the default may have.
MAX_DEFAULT_TOPIC_QUEUE_NUMS: Final = 1024
#: An hour of the day in ``deleteWhen`` ("04" or "04;05").
_HOURS: Final = range(24)

#: Longest period of a background loop or age limit (a day), in ms.
MAX_INTERVAL_MS: Final = 86_400_000
#: Longest wait for one answer or flush (ten minutes), in ms.
MAX_TIMEOUT_MS: Final = 600_000
#: Largest mapped file (RocketMQ declares the sizes Java ``int``).
MAX_MAPPED_FILE_BYTES: Final = 2**31 - 1
#: Largest value of a Java ``int`` key.
JAVA_INT_MAX: Final = 2**31 - 1
#: Most index entries and hash slots of an IndexFile (its size stays under 2 GiB).
MAX_INDEX_NUM: Final = 80_000_000
MAX_HASH_SLOT_NUM: Final = 50_000_000
#: Longest idle time a connection may be given before it is closed (a week).
MAX_IDLE_SECONDS: Final = 7 * 86_400
#: Longest time a metrics exposition is served from cache, in seconds.
MAX_METRICS_CACHE_S: Final = 3600.0
#: Most connections and buffered input bytes a remoting server may be configured with.
MAX_SERVER_CONNECTIONS: Final = 1_000_000
MAX_SERVER_BUFFERED_INPUT_BYTES: Final = 64 * 1024**3
_MS: Final = (1, MAX_INTERVAL_MS)
_TIMEOUT: Final = (1, MAX_TIMEOUT_MS)
_PORT_OR_DEFAULT: Final = (-1, 65535)  # -1: derived from listenPort (or off, metricsPort)
_PORT_OR_BOUND: Final = (0, 65535)  # 0: the bound (ephemeral) port

#: THE range of every numeric key a broker reads (BrokerConfig, MessageStoreConfig, HAConfig,
#: DLedgerConfig, ControllerModeConfig), inclusive, checked at boot and on
#: UPDATE_BROKER_CONFIG (``check_settings``); tests/unit/test_config_ranges.py fails
#: when a numeric key is missing here.
NUMERIC_RANGES: Final[dict[str, tuple[float, float]]] = {
    # RocketMQ 5 POP (broker/pop)
    "reviveQueueNum": (1, 1024),
    "reviveInterval": (10, 3_600_000),
    "popFromRetryProbability": (0, 100),
    "maxPopPollingSize": (0, 10_000_000),
    # BrokerConfig / NettyServerConfig
    "brokerId": (0, JAVA_INT_MAX),
    "brokerPermission": (0, 15),
    "defaultTopicQueueNums": (1, MAX_DEFAULT_TOPIC_QUEUE_NUMS),
    "shortPollingTimeMills": _TIMEOUT,
    "registerNameServerPeriod": _MS,
    "registerBrokerTimeoutMills": _TIMEOUT,
    "flushConsumerOffsetInterval": _MS,
    "flushDelayOffsetInterval": _MS,
    "transactionTimeOut": (0, MAX_INTERVAL_MS),
    "transactionCheckMax": (0, 10_000),
    "transactionCheckInterval": _MS,
    "clientChannelExpiredTime": _MS,
    "clientHousekeepingInterval": _MS,
    "accessMessageInMemoryMaxRatio": (0, 100),
    "listenPort": _PORT_OR_BOUND,
    "fastListenPort": _PORT_OR_DEFAULT,
    "haListenPort": _PORT_OR_DEFAULT,
    "advertisedListenPort": _PORT_OR_BOUND,
    "advertisedHaListenPort": _PORT_OR_BOUND,
    "metricsPort": _PORT_OR_DEFAULT,
    "metricsCacheSeconds": (0, MAX_METRICS_CACHE_S),
    "serverChannelMaxIdleTimeSeconds": (0, MAX_IDLE_SECONDS),
    "serverMaxConnections": (1, MAX_SERVER_CONNECTIONS),
    "serverMaxConnectionsPerAddress": (1, MAX_SERVER_CONNECTIONS),
    "serverMaxBufferedInputBytes": (1, MAX_SERVER_BUFFERED_INPUT_BYTES),
    "serverPartialFrameTimeoutSeconds": (0.001, MAX_TIMEOUT_MS / 1000),
    # MessageStoreConfig
    "mappedFileSizeCommitLog": (1, MAX_MAPPED_FILE_BYTES),
    "mappedFileSizeConsumeQueue": (20, MAX_MAPPED_FILE_BYTES),  # one 20-byte unit at least
    "flushIntervalCommitLog": _MS,
    "flushCommitLogLeastPages": (0, JAVA_INT_MAX),
    "flushCommitLogThoroughInterval": _MS,
    "flushIntervalConsumeQueue": _MS,
    "flushConsumeQueueLeastPages": (0, JAVA_INT_MAX),
    "flushConsumeQueueThoroughInterval": _MS,
    "syncFlushTimeout": _TIMEOUT,
    "maxMessageSize": (1, MAX_MESSAGE_SIZE_LIMIT_BYTES),
    "fileReservedTime": (0, 24 * 365 * 10),  # hours
    "diskMaxUsedSpaceRatio": (1, 100),
    "cleanResourceInterval": _MS,
    "deleteCommitLogFilesInterval": (0, MAX_INTERVAL_MS),
    "destroyMapedFileIntervalForcibly": (0, MAX_INTERVAL_MS),
    "maxHashSlotNum": (1, MAX_HASH_SLOT_NUM),
    "maxIndexNum": (1, MAX_INDEX_NUM),
    "maxMsgsNumBatch": (1, 65_536),
    "osPageCacheBusyTimeOutMills": _TIMEOUT,
    "maxTransferBytesOnMessageInMemory": (1, JAVA_INT_MAX),
    "maxTransferCountOnMessageInMemory": (1, 65_536),
    # timers: a delay past the wheel's reach rolls (re-enqueues), so 10 years is still sound
    "timerMaxDelaySec": (1, 3600 * 24 * 365 * 10),
    "timerPrecisionMs": (100, 1000),  # rounded down to 100, 200, 500 or 1000 as RocketMQ 5
    "timerRollWindowSlot": (2, 3600 * 24 * 7 - 60),  # slots: the wheel's 7 days less 60
    "timerFlushIntervalMs": _MS,
    "mappedFileSizeTimerLog": (4096, MAX_MAPPED_FILE_BYTES),
    # HAConfig
    "haSendHeartbeatInterval": _MS,
    "haHousekeepingInterval": _MS,
    "haTransferBatchSize": (1, MAX_FRAME_BODY_BYTES),
    "haSlaveFallbehindMax": (1, 2**50),
    "slaveTimeout": _TIMEOUT,
    # DLedgerConfig (cross-key rules: DLedgerConfig.validate)
    "dLegerTickMs": _TIMEOUT,
    "heartBeatTimeIntervalMs": _TIMEOUT,
    "maxHeartBeatLeak": (2, 1000),
    "minVoteIntervalMs": (0, MAX_TIMEOUT_MS),
    "maxVoteIntervalMs": _TIMEOUT,
    "maxWaitAckTimeMs": _TIMEOUT,
    # ControllerModeConfig (cross-key rules: ControllerModeConfig.validate)
    "brokerHeartbeatInterval": _TIMEOUT,
    "controllerHeartBeatTimeoutMills": _TIMEOUT,
    "syncControllerMetadataPeriod": _TIMEOUT,
    "haMaxTimeSlaveNotCatchup": _TIMEOUT,
    "masterLeaseMills": (-1, MAX_TIMEOUT_MS),  # -1: derived
    "inSyncReplicas": (1, MAX_IN_SYNC_REPLICAS),
    "minInSyncReplicas": (1, MAX_IN_SYNC_REPLICAS),
}


def _check_name(key: str, value: str) -> None:
    problem = node_name_problem(value)
    if problem is not None:
        raise ConfigError(f"{key}: {value!r} {problem}")


def _check_reachable(bind_address: str, broker_ip1: str) -> None:
    """A broker listening on loopback only cannot be reached at a non-loopback ``brokerIP1``:
    it would register an address nothing listens on. Advertising another address than a
    non-loopback (or wildcard) bind stays allowed (NAT, a load balancer in front). A
    ``brokerIP1`` that is a host name is not resolved here (no DNS at config time)."""
    try:
        advertised = ipaddress.ip_address(broker_ip1.strip().strip("[]"))
    except ValueError:
        return
    if _is_loopback(bind_address) and not advertised.is_loopback:
        raise ConfigError(
            f"brokerIP1={broker_ip1} is not reachable: bindAddress={bind_address} listens on "
            "loopback only; set bindAddress to that address (or 0.0.0.0), or brokerIP1 to a "
            "loopback address"
        )


def check_settings(settings: BrokerSettings) -> None:
    """Every value of ``settings`` as the broker needs it (addresses parsed in full, numbers
    in range, names usable); ConfigError naming the first bad key."""
    for part in settings.parts():
        check_ranges(part, NUMERIC_RANGES)
    b = settings.broker
    if bool(b.acl_access_key) != bool(b.acl_secret_key):
        raise ConfigError("aclAccessKey and aclSecretKey must be set together")
    check_address_list("namesrvAddr", b.namesrv_addr)
    check_host("brokerIP1", b.broker_ip1)
    if b.broker_ip2.strip():
        check_host("brokerIP2", b.broker_ip2)
    check_host("bindAddress", b.bind_address)
    _check_reachable(b.bind_address, b.broker_ip1)
    _check_name("brokerName", b.broker_name)
    _check_name("brokerClusterName", b.broker_cluster_name)
    _check_name("msgTraceTopicName", b.msg_trace_topic_name)
    s = settings.store
    for part in s.delete_when.split(";"):
        text = part.strip()
        if not text.isdigit() or int(text) not in _HOURS:
            raise ConfigError(f"deleteWhen: {s.delete_when!r} is not hours 00..23 joined by ;")
    try:
        parse_delay_levels(s.message_delay_level)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    h = settings.ha
    if h.configured_master_address is not None:
        check_host_port("haMasterAddress", h.configured_master_address)

