"""``python -m rmq_cluster.cli ...``: the same as ``rmq-cluster ...``."""

import sys

from .main import main

sys.exit(main())
