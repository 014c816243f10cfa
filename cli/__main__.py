"""``python -m rmq_cluster.cli ...``: the same as ``rmq-cluster ...``."""

import sys

from rmq_cluster.cli.main import main

sys.exit(main())
