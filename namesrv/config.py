"""NameServer configuration: RocketMQ's ``NamesrvConfig`` and ``NettyServerConfig`` keys.

Keys and defaults are RocketMQ 4.9's, except:

* ``bindAddress`` defaults to ``127.0.0.1`` (RocketMQ: ``0.0.0.0``): set it to serve other hosts;
* ``listenPort`` defaults to 9876 (mqnamesrv sets it; NettyServerConfig's own default is 8888);
* ``scanNotActiveBrokerInterval`` and ``brokerChannelExpiredTime`` (milliseconds) make RocketMQ's
  fixed 10 s scan period and 120 s broker expiry configurable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from ..cluster.config import (
    check_host,
    check_range,
    check_ranges,
    config_keys,
    setting,
)

DEFAULT_LISTEN_PORT: Final = 9876
DEFAULT_SCAN_INTERVAL_MS: Final = 10_000
DEFAULT_BROKER_EXPIRED_MS: Final = 120_000
DEFAULT_CHANNEL_MAX_IDLE_S: Final = 120
#: Longest period or expiry, in ms (a day).
MAX_INTERVAL_MS: Final = 86_400_000
#: Longest idle time a connection may be given before it is closed (a week).
MAX_IDLE_SECONDS: Final = 7 * 86_400
#: THE range of every numeric key of ``NamesrvConfig``, inclusive, checked whenever one is
#: built (the file at boot, UPDATE_NAMESRV_CONFIG); tests/unit/test_config_ranges.py
#: fails when a numeric key is missing here.
NUMERIC_RANGES: Final[dict[str, tuple[float, float]]] = {
    "scanNotActiveBrokerInterval": (1, MAX_INTERVAL_MS),
    "brokerChannelExpiredTime": (1, MAX_INTERVAL_MS),
    "listenPort": (0, 65535),  # 0: ephemeral
    "serverChannelMaxIdleTimeSeconds": (0, MAX_IDLE_SECONDS),
    "serverMaxConnections": (1, 1_000_000),
    "serverMaxConnectionsPerAddress": (1, 1_000_000),
    "serverMaxBufferedInputBytes": (1, 64 * 1024**3),
    "serverPartialFrameTimeoutSeconds": (0.001, 600.0),
    "metricsPort": (-1, 65535),  # -1: off, 0: ephemeral
}
#: The keys a running NameServer follows at once (read per request or per scan, or pushed to
#: the route table); UPDATE_NAMESRV_CONFIG refuses a change of any other key (it needs a
#: restart) instead of storing a value nothing reads.
LIVE_KEYS: Final = frozenset({
    "orderMessageEnable", "returnOrderTopicConfigToBroker", "scanNotActiveBrokerInterval",
    "brokerChannelExpiredTime", "metricsToken",
})
#: Keys UPDATE_NAMESRV_CONFIG may not change by default (RocketMQ's ``configBlackList``).
DEFAULT_CONFIG_BLACK_LIST: Final = "configBlackList;configStorePath;kvConfigPath"
#: ... as a set (whatever the file says, ``configBlackList`` itself stays out of reach).
CONFIG_BLACK_LIST: Final = frozenset(DEFAULT_CONFIG_BLACK_LIST.split(";"))


def _home_file(name: str) -> str:
    return str(Path.home() / "namesrv" / name)


@attrs.frozen
class NamesrvConfig:
    rocketmq_home: str = setting(
        "rocketmqHome", attrs.Factory(lambda: os.environ.get("ROCKETMQ_HOME", ""))
    )
    kv_config_path: str = setting(
        "kvConfigPath", attrs.Factory(lambda: _home_file("kvConfig.json"))
    )
    config_store_path: str = setting(
        "configStorePath", attrs.Factory(lambda: _home_file("namesrv.properties"))
    )
    product_env_name: str = setting("productEnvName", "center")
    cluster_test: bool = setting("clusterTest", False)
    order_message_enable: bool = setting("orderMessageEnable", False)
    return_order_topic_config_to_broker: bool = setting("returnOrderTopicConfigToBroker", True)
    scan_not_active_broker_interval_ms: int = setting(
        "scanNotActiveBrokerInterval", DEFAULT_SCAN_INTERVAL_MS
    )
    broker_channel_expired_time_ms: int = setting(
        "brokerChannelExpiredTime", DEFAULT_BROKER_EXPIRED_MS
    )
    # NettyServerConfig
    #: Loopback unless told otherwise (RocketMQ: 0.0.0.0).
    bind_address: str = setting("bindAddress", "127.0.0.1")
    listen_port: int = setting("listenPort", DEFAULT_LISTEN_PORT)
    server_channel_max_idle_time_seconds: int = setting(
        "serverChannelMaxIdleTimeSeconds", DEFAULT_CHANNEL_MAX_IDLE_S
    )
    #: Extension keys (remoting memory limits; RemotingServer documents them): connections
    #: open at once (more are closed as soon as accepted), bytes all connections may hold in
    #: incomplete frames (reads pause past it; raised to about 20 MiB if lower: one frame of
    #: the largest size must fit), and seconds a started frame has to complete (else its
    #: connection closes). ``serverMaxConnectionsPerAddress``: connections one peer address
    #: may hold (more are closed as soon as accepted); a tenth of ``serverMaxConnections``, so
    #: one address cannot fill the node, and far above what one machine's clients open.
    server_max_connections: int = setting("serverMaxConnections", 10_000)
    server_max_connections_per_address: int = setting("serverMaxConnectionsPerAddress", 1_000)
    server_max_buffered_input_bytes: int = setting("serverMaxBufferedInputBytes", 64 * 1024 * 1024)
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
    #: Extension keys: plain ACL on the NameServer's requests that change the cluster (KV
    #: config, broker (un)registration and heartbeats, write permission, topic deletion,
    #: config updates) and on its config read -- admin accounts only (``namesrv.server.
    #: NAMESRV_ACL_CODES``); ``aclFile`` "" = ``{rocketmqHome}/conf/plain_acl.yml``.
    #: ``rmq-cluster up --acl`` sets both.
    acl_enable: bool = setting("aclEnable", False)
    acl_file: str = setting("aclFile", "")
    #: Extension key: port of the Prometheus ``/metrics`` listener (-1 = off, 0 = ephemeral).
    metrics_port: int = setting("metricsPort", -1)
    #: Extension key: when set, ``/metrics`` answers only ``Authorization: Bearer <token>``.
    metrics_token: str = setting("metricsToken", "", secret=True)
    #: Keys UPDATE_NAMESRV_CONFIG refuses (``;``-separated), RocketMQ 5's key and default.
    config_black_list: str = setting("configBlackList", DEFAULT_CONFIG_BLACK_LIST)

    def black_listed(self, keys: Iterable[str]) -> list[str]:
        """The keys of ``keys`` this config forbids updating (``configBlackList``, and
        ``configBlackList`` itself always), sorted."""
        names = {n.strip() for n in self.config_black_list.split(";") if n.strip()}
        return sorted(k for k in keys if k in names or k == "configBlackList")

    @bind_address.validator
    def _check_bind(self, attr: attrs.Attribute, value: str) -> None:
        check_host(attr.metadata["key"], value)  # (boot and UPDATE_NAMESRV_CONFIG alike)

    @metrics_port.validator
    def _check_metrics_port(self, attr: attrs.Attribute, value: int) -> None:
        check_range(attr.metadata["key"], value, -1, 65535)

    @listen_port.validator
    def _check_port(self, _attr: attrs.Attribute, value: int) -> None:
        if not 0 <= value < 65536:
            raise ValueError(f"listenPort: {value} is not a port number")

    @scan_not_active_broker_interval_ms.validator
    def _check_positive(self, attr: attrs.Attribute, value: int) -> None:
        if value <= 0:
            raise ValueError(f"{attr.metadata['key']}: must be positive, got {value}")

    @broker_channel_expired_time_ms.validator
    def _check_expiry(self, attr: attrs.Attribute, value: int) -> None:
        if value <= 0:
            raise ValueError(f"{attr.metadata['key']}: must be positive, got {value}")

    def __attrs_post_init__(self) -> None:
        check_ranges(self, NUMERIC_RANGES)

    @property
    def scan_interval_s(self) -> float:
        return self.scan_not_active_broker_interval_ms / 1000.0

    @property
    def broker_expired_s(self) -> float:
        return self.broker_channel_expired_time_ms / 1000.0


def restart_only_changes(old: NamesrvConfig, new: NamesrvConfig) -> list[str]:
    """The keys outside ``LIVE_KEYS`` whose value differs between ``old`` and ``new``."""
    return sorted(
        key for name, key in config_keys(NamesrvConfig).items()
        if key not in LIVE_KEYS and getattr(old, name) != getattr(new, name)
    )
