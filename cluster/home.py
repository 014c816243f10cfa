"""Where ``rmq-cluster`` keeps clusters: ``$RMQ_CLUSTER_HOME/<name>``, the home defaulting to
``./.rmq-cluster``. Shared by the cluster commands (``deploy``) and the replica audit
(``spark_jobs``), which find a cluster by ``--name`` the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

#: The home's environment variable.
HOME_ENV: Final = "RMQ_CLUSTER_HOME"
#: The home when the variable is unset or empty (relative to the current directory).
DEFAULT_ROOT: Final = ".rmq-cluster"


def cluster_home() -> Path:
    """``$RMQ_CLUSTER_HOME``, else ``./.rmq-cluster``."""
    return Path(os.environ.get(HOME_ENV, "").strip() or DEFAULT_ROOT)
