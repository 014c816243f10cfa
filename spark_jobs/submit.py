"""spark-submit's main file for the replica audit::

    spark-submit --py-files rmq_spark.zip .../spark_jobs/submit.py --replica ... --out OUT

spark-submit runs its main file by path, outside any package, where the package's relative
imports cannot resolve; this file imports nothing of the package and runs
``rmq_cluster.spark_jobs.replica_diff`` as ``__main__`` from the archive (or the install).
"""

from __future__ import annotations

import runpy

if __name__ == "__main__":
    runpy.run_module("rmq_cluster.spark_jobs.replica_diff", run_name="__main__", alter_sys=True)
