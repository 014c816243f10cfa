"""What this broker build can run, read by ``rmq-cluster up`` (deploy/capabilities.py).

HA_REPLICATION: brokerRole=SLAVE replicates the master's CommitLog over haListenPort and
SYNC_MASTER sends wait for a slave's ack (ha/, wired in broker/controller.py).
DLEDGER: enableDLegerCommitLog=true runs the CommitLog on a Raft group (dledger/, wired in
broker/controller.py and broker/dledger_role.py).
"""

from __future__ import annotations

from typing import Final

HA_REPLICATION: Final = True
DLEDGER: Final = True
