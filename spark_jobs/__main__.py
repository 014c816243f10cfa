"""``python -m rmq_cluster.spark_jobs`` = ``python -m rmq_cluster.spark_jobs.replica_diff``."""

import sys

from .replica_diff import main

sys.exit(main())
