"""Controller-mode broker keys (RocketMQ 5.x ``BrokerConfig`` names where they exist).

``enableControllerMode`` (false), ``controllerAddr`` (the controllers' ``host:port`` list, ``;``
separated), ``brokerHeartbeatInterval`` (ms between heartbeats to the controller; RocketMQ 1000,
ours 200 for fast failovers), ``controllerHeartBeatTimeoutMills`` (how long the controller
waits before it counts this broker dead; RocketMQ 10000, ours 1000),
``syncControllerMetadataPeriod`` (ms between replica-info reads; ours 200),
``haMaxTimeSlaveNotCatchup`` (a slave behind for this long leaves the SyncStateSet;
RocketMQ 15000, ours 3000); ``masterLeaseMills`` (extension: a master that has not renewed
with the controller - a successful heartbeat - for this long stops taking sends, read-only in
its routes, until it renews; -1 (default) = ``controllerHeartBeatTimeoutMills`` minus one
heartbeat interval: the lease runs from when a heartbeat was *sent*, the controller's timeout
from when it arrived, so the master fences itself before the controller may elect another
master; 0 = never, as RocketMQ 5).

What a SYNC master's put waits for (RocketMQ 5 ``MessageStoreConfig`` names and defaults; the
master counts as one replica; ``ha/master.py`` ``InSyncRule`` decides): ``inSyncReplicas`` (1:
no slave ack), ``minInSyncReplicas`` (1: below this many SyncStateSet members a put answers
IN_SYNC_REPLICAS_NOT_ENOUGH), ``allAckInSyncStateSet`` (false; true: every SyncStateSet member
acks, and ``inSyncReplicas`` is ignored; a master alone in its set answers at once).  The
``2m-2s-controller`` profile sets ``allAckInSyncStateSet=true``, as RocketMQ's own controller
quick-start does.

In controller mode ``brokerId`` is the replica's identity (>= 1: id 0 is the master's slot in
routes) and ``brokerRole`` only says SYNC or ASYNC for the time this broker is master.
"""

from __future__ import annotations

from typing import Final

import attrs

from ..cluster.config import ConfigError, setting
from ..cluster.protocol.controller_client import parse_controller_addrs
from ..ha.master import InSyncRule

DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS: Final = 200
DEFAULT_CONTROLLER_HEARTBEAT_TIMEOUT_MS: Final = 1_000
DEFAULT_SYNC_CONTROLLER_METADATA_PERIOD_MS: Final = 200
DEFAULT_HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS: Final = 3_000
#: masterLeaseMills: derived from the heartbeat timeout and interval.
LEASE_DERIVED: Final = -1
#: inSyncReplicas / minInSyncReplicas: at most this many replicas per group.
MAX_IN_SYNC_REPLICAS: Final = 64


@attrs.frozen
class ControllerModeConfig:
    enable: bool = setting("enableControllerMode", False)
    controller_addr: str = setting("controllerAddr", "")
    heartbeat_interval_ms: int = setting(
        "brokerHeartbeatInterval", DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS
    )
    heartbeat_timeout_ms: int = setting(
        "controllerHeartBeatTimeoutMills", DEFAULT_CONTROLLER_HEARTBEAT_TIMEOUT_MS
    )
    sync_metadata_period_ms: int = setting(
        "syncControllerMetadataPeriod", DEFAULT_SYNC_CONTROLLER_METADATA_PERIOD_MS
    )
    max_time_slave_not_catchup_ms: int = setting(
        "haMaxTimeSlaveNotCatchup", DEFAULT_HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS
    )
    master_lease_ms: int = setting("masterLeaseMills", LEASE_DERIVED)
    in_sync_replicas: int = setting("inSyncReplicas", 1)
    min_in_sync_replicas: int = setting("minInSyncReplicas", 1)
    all_ack_in_sync_state_set: bool = setting("allAckInSyncStateSet", False)

    @property
    def in_sync_rule(self) -> InSyncRule:
        return InSyncRule(
            self.in_sync_replicas, self.min_in_sync_replicas, self.all_ack_in_sync_state_set
        )

    @property
    def lease_ms(self) -> int:
        """How long a master goes on taking sends without renewing (0: for ever)."""
        if self.master_lease_ms != LEASE_DERIVED:
            return self.master_lease_ms
        return max(1, self.heartbeat_timeout_ms - self.heartbeat_interval_ms)

    @property
    def addrs(self) -> list[str]:
        return parse_controller_addrs(self.controller_addr)

    def validate(self, broker_id: int, listen_port: int) -> None:
        if not self.enable:
            return
        try:
            addrs = self.addrs
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not addrs:
            raise ConfigError("enableControllerMode=true needs controllerAddr")
        if broker_id < 1:
            raise ConfigError("brokerId: must be >= 1 in controller mode (0 is the master slot)")
        if listen_port == 0:
            raise ConfigError("listenPort: controller mode needs a fixed port (the replica's "
                              "address the controller knows)")
        for key, value in (("brokerHeartbeatInterval", self.heartbeat_interval_ms),
                           ("controllerHeartBeatTimeoutMills", self.heartbeat_timeout_ms),
                           ("syncControllerMetadataPeriod", self.sync_metadata_period_ms),
                           ("haMaxTimeSlaveNotCatchup", self.max_time_slave_not_catchup_ms)):
            if value < 1:
                raise ConfigError(f"{key}: {value} must be > 0")
        lease = self.master_lease_ms
        if lease != LEASE_DERIVED and not 0 <= lease < self.heartbeat_timeout_ms:
            raise ConfigError(
                f"masterLeaseMills: {lease} must be -1, 0 or below "
                f"controllerHeartBeatTimeoutMills ({self.heartbeat_timeout_ms}): a longer lease "
                "outlives the controller's patience (two masters could take sends)"
            )
