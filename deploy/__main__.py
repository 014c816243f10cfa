"""``python -m rmq_cluster.deploy ...``: the same as ``rmq-cluster ...``."""

import sys

from rmq_cluster.deploy.cli import main

sys.exit(main())
