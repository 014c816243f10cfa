"""Which replication modes the broker in this build can run (read, never assumed).

The broker package is expected to export, in ``broker/capabilities.py``::

    HA_REPLICATION: Final = True   # brokerRole=SLAVE replicates; SYNC_MASTER waits for slave acks
    DLEDGER: Final = True          # enableDLegerCommitLog=true runs the CommitLog on DLedger

A missing module or constant means "not there yet", so ``rmq-cluster up`` starts refusing
nothing the moment the broker says it can. ``RMQ_CLUSTER_ASSUME_MODES=ha,dledger`` overrides the
detection (for trying a broker build that does not export the flags yet).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import Final

from rmq_cluster.deploy.topology import MODE_DESCRIPTIONS, MODE_DLEDGER, MODE_HA, ProfileSpec

CAPABILITY_MODULE: Final = "rmq_cluster.broker.capabilities"
CAPABILITY_FLAGS: Final = {MODE_HA: "HA_REPLICATION", MODE_DLEDGER: "DLEDGER"}
ASSUME_ENV: Final = "RMQ_CLUSTER_ASSUME_MODES"


def supported_modes() -> frozenset[str]:
    """The modes the broker declares (plus any ``RMQ_CLUSTER_ASSUME_MODES`` names)."""
    modes: set[str] = set()
    try:
        module = importlib.import_module(CAPABILITY_MODULE)
    except ImportError:
        module = None
    if module is not None:
        for mode, flag in CAPABILITY_FLAGS.items():
            if getattr(module, flag, False) is True:
                modes.add(mode)
    assumed = os.environ.get(ASSUME_ENV, "")
    modes.update(m.strip() for m in assumed.split(",") if m.strip() in CAPABILITY_FLAGS)
    return frozenset(modes)


def missing_modes(spec: ProfileSpec, supported: Iterable[str] | None = None) -> list[str]:
    have = supported_modes() if supported is None else frozenset(supported)
    return [m for m in spec.required_modes if m not in have]


def refusal(spec: ProfileSpec, supported: Iterable[str] | None = None) -> str | None:
    """One line saying why ``up`` cannot run ``spec`` here, or None when it can."""
    missing = missing_modes(spec, supported)
    if not missing:
        return None
    needs = " and ".join(MODE_DESCRIPTIONS[m] for m in missing)
    return f"profile {spec.name} needs {needs}, which this build does not have yet"
