"""DLedger broker keys (RocketMQ ``MessageStoreConfig``'s dLeger* keys plus DLedger timings).

RocketMQ keys: ``enableDLegerCommitLog``, ``dLegerGroup``, ``dLegerPeers``
(``n0-127.0.0.1:40911;n1-127.0.0.1:40912;...``), ``dLegerSelfId``, ``preferredLeaderId``,
``storePathDLedgerCommitLog`` (default ``<storePathRootDir>/dledger-<selfId>``, where DLedger keeps
``data/``, ``index/``, ``currterm`` and ``checkpoint``).

Timings (DLedgerConfig names; **our defaults are faster than DLedger's** 2000 ms heartbeat and
3 missed heartbeats, which give ~10 s failovers — here a leader is replaced in about 1-2 s):
``heartBeatTimeIntervalMs`` 250, ``maxHeartBeatLeak`` 4 (election timeout = interval x leak),
``minVoteIntervalMs``/``maxVoteIntervalMs`` 150/500 (random extra wait), ``maxWaitAckTimeMs``
2500 (a send not committed by then answers a retryable error), ``dLegerTickMs`` 50 (the core's
clock resolution).
"""

from __future__ import annotations

import os
from typing import Final

import attrs

from ..cluster.config import setting

DEFAULT_TICK_MS: Final = 50
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 250
DEFAULT_MAX_HEARTBEAT_LEAK: Final = 4
DEFAULT_MIN_VOTE_INTERVAL_MS: Final = 150
DEFAULT_MAX_VOTE_INTERVAL_MS: Final = 500
DEFAULT_MAX_WAIT_ACK_MS: Final = 2500


class DLedgerConfigError(ValueError):
    """A dLeger* key that cannot work (bad peers string, self id not among the peers)."""


@attrs.frozen
class DLedgerConfig:
    enable: bool = setting("enableDLegerCommitLog", False)
    group: str = setting("dLegerGroup", "")
    peers: str = setting("dLegerPeers", "")
    self_id: str = setting("dLegerSelfId", "")
    preferred_leader_id: str = setting("preferredLeaderId", "")
    store_path: str = setting("storePathDLedgerCommitLog", "")
    tick_ms: int = setting("dLegerTickMs", DEFAULT_TICK_MS)
    heartbeat_interval_ms: int = setting("heartBeatTimeIntervalMs", DEFAULT_HEARTBEAT_INTERVAL_MS)
    max_heartbeat_leak: int = setting("maxHeartBeatLeak", DEFAULT_MAX_HEARTBEAT_LEAK)
    min_vote_interval_ms: int = setting("minVoteIntervalMs", DEFAULT_MIN_VOTE_INTERVAL_MS)
    max_vote_interval_ms: int = setting("maxVoteIntervalMs", DEFAULT_MAX_VOTE_INTERVAL_MS)
    max_wait_ack_ms: int = setting("maxWaitAckTimeMs", DEFAULT_MAX_WAIT_ACK_MS)

    def peer_map(self) -> dict[str, str]:
        """``dLegerPeers`` -> {id: "host:port"} in the order given."""
        out: dict[str, str] = {}
        for part in self.peers.split(";"):
            part = part.strip()
            if not part:
                continue
            pid, sep, addr = part.partition("-")
            if not sep or not pid or ":" not in addr:
                raise DLedgerConfigError(
                    f"dLegerPeers: {part!r} is not id-host:port (e.g. n0-127.0.0.1:40911)"
                )
            if pid in out:
                raise DLedgerConfigError(f"dLegerPeers: duplicate id {pid!r}")
            out[pid] = addr.strip()
        return out

    def validate(self) -> None:
        if not self.enable:
            return
        peers = self.peer_map()
        if not peers:
            raise DLedgerConfigError("enableDLegerCommitLog=true needs dLegerPeers")
        if self.self_id not in peers:
            raise DLedgerConfigError(
                f"dLegerSelfId {self.self_id!r} is not among dLegerPeers ({', '.join(peers)})"
            )
        if not self.group:
            raise DLedgerConfigError("enableDLegerCommitLog=true needs dLegerGroup")
        if self.preferred_leader_id and self.preferred_leader_id not in peers:
            raise DLedgerConfigError(f"preferredLeaderId {self.preferred_leader_id!r} unknown")
        if not 0 < self.tick_ms <= self.heartbeat_interval_ms:
            raise DLedgerConfigError("need 0 < dLegerTickMs <= heartBeatTimeIntervalMs")
        if self.max_heartbeat_leak < 2:
            raise DLedgerConfigError("maxHeartBeatLeak must be >= 2")
        if not 0 <= self.min_vote_interval_ms < self.max_vote_interval_ms:
            raise DLedgerConfigError("need 0 <= minVoteIntervalMs < maxVoteIntervalMs")

    def store_dir(self, store_root: str) -> str:
        return self.store_path or os.path.join(store_root, f"dledger-{self.self_id}")

    def slave_broker_id(self) -> int:
        """The brokerId a follower registers with: its position in dLegerPeers + 1 (RocketMQ uses
        ``int(selfId[1:]) + 1``; the position also works for ids that are not ``n<digits>``)."""
        ids = list(self.peer_map())
        return ids.index(self.self_id) + 1
