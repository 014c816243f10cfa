"""Where ``rmq-cluster`` keeps clusters: ``$RMQ_CLUSTER_HOME/<name>``, the home defaulting to
``~/.rmq-cluster`` (not the current directory's: a command run elsewhere finds the same
clusters). Shared by the cluster commands (``deploy``), the client commands (a cluster's
NameServers when ``-n`` is absent) and the replica audit (``spark_jobs``), which find a cluster
by ``--name`` the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The home's environment variable.
HOME_ENV: Final = "RMQ_CLUSTER_HOME"
#: The home's folder name when the variable is unset or empty (in the user's home directory).
DEFAULT_ROOT: Final = ".rmq-cluster"
#: A cluster directory's state file: its profile, nodes and NameServer addresses.
STATE_FILE: Final = "cluster.json"


def cluster_home() -> Path:
    """``$RMQ_CLUSTER_HOME``, else ``~/.rmq-cluster``."""
    env = os.environ.get(HOME_ENV, "").strip()
    return Path(env) if env else Path.home() / DEFAULT_ROOT
