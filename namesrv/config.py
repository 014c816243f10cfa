"""NameServer configuration: RocketMQ's ``NamesrvConfig`` and ``NettyServerConfig`` keys.

Keys and defaults are RocketMQ 4.9's, except:

* ``bindAddress`` defaults to ``127.0.0.1`` (RocketMQ: ``0.0.0.0``): set it to serve other hosts;
* ``listenPort`` defaults to 9876 (mqnamesrv sets it; NettyServerConfig's own default is 8888);
* ``scanNotActiveBrokerInterval`` and ``brokerChannelExpiredTime`` (milliseconds) make RocketMQ's
  fixed 10 s scan period and 120 s broker expiry configurable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import attrs

from rmq_cluster.cluster.config import setting

DEFAULT_LISTEN_PORT: Final = 9876
DEFAULT_SCAN_INTERVAL_MS: Final = 10_000
DEFAULT_BROKER_EXPIRED_MS: Final = 120_000
DEFAULT_CHANNEL_MAX_IDLE_S: Final = 120
#: Keys UPDATE_NAMESRV_CONFIG may not change (RocketMQ's ``configBlackList`` default).
CONFIG_BLACK_LIST: Final = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})


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
    #: Extension keys: plain ACL on the NameServer's write requests (KV config, broker
    #: (un)registration, write-permission and topic deletion, config updates) -- admin accounts
    #: only; ``aclFile`` "" = ``{rocketmqHome}/conf/plain_acl.yml``.
    acl_enable: bool = setting("aclEnable", False)
    acl_file: str = setting("aclFile", "")
    #: Extension key: port of the Prometheus ``/metrics`` listener (-1 = off, 0 = ephemeral).
    metrics_port: int = setting("metricsPort", -1)

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

    @property
    def scan_interval_s(self) -> float:
        return self.scan_not_active_broker_interval_ms / 1000.0

    @property
    def broker_expired_s(self) -> float:
        return self.broker_channel_expired_time_ms / 1000.0
