"""Client configuration (RocketMQ ``ClientConfig`` keys, named limits and intervals).

Every interval is configurable so tests run the client's own timers fast; the defaults are the
Java 4.9 client's.
"""

from __future__ import annotations

import os
from typing import Final

import attrs

from ..cluster.remoting.codes import CURRENT_VERSION

#: Java: ClientConfig.pollNameServerInterval.
DEFAULT_POLL_NAMESRV_INTERVAL_S: Final = 30.0
#: After a broker serving a topic fails, its route is re-read at once, then this often ...
DEFAULT_FAILOVER_ROUTE_POLL_S: Final = 0.5
#: ... until the route names a new master for it, or this long has passed (ours; Apache's client
#: waits for its next pollNameServerInterval instead: client/suspects.py).
DEFAULT_FAILOVER_ROUTE_WINDOW_S: Final = 30.0
#: Java: ClientConfig.heartbeatBrokerInterval.
DEFAULT_HEARTBEAT_INTERVAL_S: Final = 30.0
#: Java: ClientConfig.persistConsumerOffsetInterval.
DEFAULT_PERSIST_OFFSET_INTERVAL_S: Final = 5.0
#: Java: RebalanceService waitInterval (rocketmq.client.rebalance.waitInterval).
DEFAULT_REBALANCE_INTERVAL_S: Final = 20.0
#: Java: DefaultMQProducer.sendMsgTimeout.
DEFAULT_SEND_TIMEOUT_S: Final = 3.0
#: Java: MQClientAPIImpl timeouts for NameServer/admin calls.
DEFAULT_CALL_TIMEOUT_S: Final = 3.0
#: Java: DefaultMQProducer.retryTimesWhenSendFailed / ...AsyncFailed.
DEFAULT_RETRY_TIMES_WHEN_SEND_FAILED: Final = 2
#: Java: DefaultMQProducer.compressMsgBodyOverHowmuch.
DEFAULT_COMPRESS_OVER_BYTES: Final = 4 * 1024
#: Java: DefaultMQProducer.maxMessageSize.
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
#: Java: DefaultMQProducer.defaultTopicQueueNums (header ``d``).
DEFAULT_TOPIC_QUEUE_NUMS: Final = 4
#: The auto-create template topic.
AUTO_CREATE_TOPIC_KEY: Final = "TBW102"
#: Java producer group used by every client instance internally (sent in heartbeats).
CLIENT_INNER_PRODUCER_GROUP: Final = "CLIENT_INNER_PRODUCER"
#: Java push consumer: pullBatchSize, brokerSuspendMaxTimeMillis, consumerTimeoutMillisWhenSuspend.
DEFAULT_PULL_BATCH_SIZE: Final = 32
DEFAULT_BROKER_SUSPEND_MAX_S: Final = 15.0
DEFAULT_PULL_CALL_TIMEOUT_S: Final = 30.0
#: Java: pullThresholdForQueue (messages cached per queue before pulls pause).
DEFAULT_PULL_THRESHOLD_FOR_QUEUE: Final = 1000
#: Java: consumeThreadMax -- callbacks running at once per consumer.
DEFAULT_CONSUME_CONCURRENCY: Final = 20
#: Java: maxReconsumeTimes (-1 there means 16).
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
#: Pause before pulling again after an error (Java: pullTimeDelayMillsWhenException 3000).
PULL_ERROR_BACKOFF_S: Final = 3.0
#: Pause before consuming a message again locally when send-back failed (Java: 5000 ms).
LOCAL_RECONSUME_DELAY_S: Final = 5.0
#: Java orderly: lock renewal period (RebalanceLockInterval 20 s), suspend pause 1 s.
DEFAULT_LOCK_INTERVAL_S: Final = 20.0
DEFAULT_ORDERLY_SUSPEND_S: Final = 1.0
#: Java: DefaultMQProducer.checkThreadPoolMinSize etc -- transaction checks answered at once.
#: Java: DefaultMQProducer.checkRequestHoldMax -- transaction checks queued at once; a broker's
#: checks beyond it are dropped (logged) and come again at its next check round.
MAX_PENDING_TRANSACTION_CHECKS: Final = 2000
LANGUAGE: Final = "JAVA"
VERSION: Final = CURRENT_VERSION


def namesrv_from_env() -> str | None:
    """``NAMESRV_ADDR``, as the Java client reads it."""
    return os.environ.get("NAMESRV_ADDR")


def split_namesrv(addr: str | None) -> tuple[str, ...]:
    """``"a:9876;b:9876"`` -> ("a:9876", "b:9876"); empty entries dropped."""
    if not addr:
        return ()
    return tuple(p.strip() for p in addr.replace(",", ";").split(";") if p.strip())


@attrs.frozen
class ClientConfig:
    """What a client instance needs. ``namesrv_addr`` None -> ``NAMESRV_ADDR``.

    ``language``/``version``: what every request carries. We send ``JAVA``/407 (4.9.7) because a
    real 4.x broker gives Java clients the full 4.x behaviour (JSON bodies with MessageQueue keys,
    standard route JSON, SQL92 allowed) and treats ``PYTHON`` like an unknown language.
    """

    namesrv_addr: str | None = None
    instance_name: str = "DEFAULT"
    client_ip: str | None = None
    unit_name: str | None = None
    poll_namesrv_interval_s: float = DEFAULT_POLL_NAMESRV_INTERVAL_S
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    persist_offset_interval_s: float = DEFAULT_PERSIST_OFFSET_INTERVAL_S
    rebalance_interval_s: float = DEFAULT_REBALANCE_INTERVAL_S
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    failover_route_poll_s: float = attrs.field(
        default=DEFAULT_FAILOVER_ROUTE_POLL_S, validator=attrs.validators.gt(0))
    failover_route_window_s: float = attrs.field(
        default=DEFAULT_FAILOVER_ROUTE_WINDOW_S, validator=attrs.validators.ge(0))
    language: str = LANGUAGE
    version: int = VERSION
    #: Plain ACL credentials: when set, every request is signed as RocketMQ's AclClientRPCHook
    #: signs it (AccessKey, optional SecurityToken, Signature = HmacSHA1 over the sorted
    #: extFields values and the body).
    #: transaction checks being answered at once; more are dropped (the broker checks again)
    max_pending_transaction_checks: int = attrs.field(
        default=MAX_PENDING_TRANSACTION_CHECKS, validator=attrs.validators.ge(1))
    access_key: str | None = None
    secret_key: str | None = attrs.field(default=None, repr=False)
    security_token: str | None = attrs.field(default=None, repr=False)

    def namesrv_list(self) -> tuple[str, ...]:
        addrs = split_namesrv(self.namesrv_addr or namesrv_from_env())
        return addrs


def with_credentials(
    config: ClientConfig, access_key: str | None, secret_key: str | None
) -> ClientConfig:
    """``config`` with ACL credentials set (unchanged when neither is given)."""
    if access_key is None and secret_key is None:
        return config
    return attrs.evolve(config, access_key=access_key, secret_key=secret_key)
