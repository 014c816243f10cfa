"""``python -m spark_jobs`` = ``python -m spark_jobs.replica_diff``."""

import sys

from spark_jobs.replica_diff import main

sys.exit(main())
