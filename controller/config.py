"""Controller keys (RocketMQ ``ControllerConfig`` names where they exist).

``controllerDLegerGroup``, ``controllerDLegerPeers`` (``n0-127.0.0.1:9877;n1-...``: the Raft
peers' port), ``controllerDLegerSelfId``, ``controllerStorePath`` (the Raft log; default
``~/DledgerController``), ``enableElectUncleanMaster`` (false: only SyncStateSet members may
become master), ``scanNotActiveBrokerInterval`` (ms between liveness scans), plus ``listenPort``
(the controller's remoting port that brokers and admin tools call, default 9878; 0 = ephemeral)
and ``bindAddress`` (default 127.0.0.1, as every node here); ``advertisedListenPort`` (extension,
as on brokers: the port others dial when a proxy fronts the controller; 0 = the bound one).
Extension keys: ``controllerBrokerHeartbeatTimeoutMs`` (a broker unheard for this long is not
alive; default 1000, brokers beat every 200 ms) and ``controllerTickMs``/
``controllerHeartbeatIntervalMs``/``controllerElectionTimeoutMs`` (the Raft timings).
"""

from __future__ import annotations

import os
from typing import Final

import attrs

from ..cluster.config import ConfigError, check_cluster_secret, check_ranges, setting

DEFAULT_LISTEN_PORT: Final = 9878
DEFAULT_SCAN_INTERVAL_MS: Final = 100
DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS: Final = 1_000
DEFAULT_TICK_MS: Final = 50
DEFAULT_RAFT_HEARTBEAT_MS: Final = 150
DEFAULT_RAFT_ELECTION_TIMEOUT_MS: Final = 600


#: THE range of every numeric key of ``ControllerConfig``, inclusive (ms unless said), checked
#: by ``validate`` at boot; tests/unit/test_config_ranges.py fails when a numeric
#: key is missing here. Cross-key rules follow in ``validate``.
NUMERIC_RANGES: Final[dict[str, tuple[float, float]]] = {
    "scanNotActiveBrokerInterval": (1, 600_000),
    "controllerBrokerHeartbeatTimeoutMs": (1, 600_000),
    "listenPort": (0, 65535),  # 0: ephemeral
    "advertisedListenPort": (0, 65535),  # 0: the bound port
    "controllerTickMs": (1, 60_000),
    "controllerHeartbeatIntervalMs": (1, 600_000),
    "controllerElectionTimeoutMs": (1, 600_000),
}


@attrs.frozen
class ControllerConfig:
    group: str = setting("controllerDLegerGroup", "group1")
    peers: str = setting("controllerDLegerPeers", "n0-127.0.0.1:9877")
    self_id: str = setting("controllerDLegerSelfId", "n0")
    store_path: str = setting(
        "controllerStorePath", os.path.join(os.path.expanduser("~"), "DledgerController")
    )
    elect_unclean_master: bool = setting("enableElectUncleanMaster", False)
    scan_interval_ms: int = setting("scanNotActiveBrokerInterval", DEFAULT_SCAN_INTERVAL_MS)
    broker_heartbeat_timeout_ms: int = setting(
        "controllerBrokerHeartbeatTimeoutMs", DEFAULT_BROKER_HEARTBEAT_TIMEOUT_MS
    )
    listen_port: int = setting("listenPort", DEFAULT_LISTEN_PORT)
    bind_address: str = setting("bindAddress", "127.0.0.1")
    advertised_listen_port: int = setting("advertisedListenPort", 0)
    tick_ms: int = setting("controllerTickMs", DEFAULT_TICK_MS)
    raft_heartbeat_ms: int = setting("controllerHeartbeatIntervalMs", DEFAULT_RAFT_HEARTBEAT_MS)
    raft_election_timeout_ms: int = setting(
        "controllerElectionTimeoutMs", DEFAULT_RAFT_ELECTION_TIMEOUT_MS
    )
    #: Extension key: the secret brokers and the other controllers prove on both ports
    #: (cluster/remoting/peer_auth.py); "" = open ports, as RocketMQ's.
    cluster_secret: str = setting("clusterSecret", "", secret=True)

    @cluster_secret.validator
    def _check_cluster_secret(self, attribute: attrs.Attribute, value: str) -> None:
        check_cluster_secret(value)

    def peer_map(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for part in self.peers.split(";"):
            part = part.strip()
            if not part:
                continue
            pid, sep, addr = part.partition("-")
            host, colon, port = addr.strip().rpartition(":")
            if not sep or not pid or not colon or not host or not port.isdigit():
                raise ConfigError(
                    f"controllerDLegerPeers: {part!r} is not id-host:port (n0-127.0.0.1:9877)"
                )
            if pid in out:
                raise ConfigError(f"controllerDLegerPeers: duplicate id {pid!r}")
            out[pid] = addr.strip()
        return out

    def validate(self) -> None:
        check_ranges(self, NUMERIC_RANGES)
        peers = self.peer_map()
        if not peers:
            raise ConfigError("controllerDLegerPeers: no peers")
        if self.self_id not in peers:
            raise ConfigError(
                f"controllerDLegerSelfId {self.self_id!r} is not among controllerDLegerPeers"
            )
        if not self.group:
            raise ConfigError("controllerDLegerGroup: empty")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listenPort: {self.listen_port} is not a port")
        if not 0 <= self.advertised_listen_port <= 65535:
            raise ConfigError(f"advertisedListenPort: {self.advertised_listen_port} is not a port")
        if self.scan_interval_ms < 1 or self.broker_heartbeat_timeout_ms < 1:
            raise ConfigError("scanNotActiveBrokerInterval and the heartbeat timeout must be > 0")
        if not 0 < self.tick_ms <= self.raft_heartbeat_ms < self.raft_election_timeout_ms:
            raise ConfigError("need 0 < controllerTickMs <= heartbeat interval < election timeout")
