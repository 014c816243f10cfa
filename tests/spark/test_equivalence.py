"""The Spark job's findings equal the pure-Python reference diff's on Hypothesis-generated
stores (commitlog and DLedger groups; truncations, extra tails, rewritten and resized records,
flipped bytes, garbage, dropped files, bad CQ units; random split and checksum block sizes;
byte-exact and header-only): with --check-stores every finding; by default (bytes compared
first, records decoded only inside differing blocks) every finding that compares a replica
with its master, so the shortcut changes none of those."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rmq_cluster.spark_jobs.reference import reference_diff
from rmq_cluster.spark_jobs.replica_diff import run_diff
from tests.spark.strategies import cleanup, groups, materialize


def _key(r: Any) -> tuple[Any, ...]:
    return (r["group"], r["node"], r["kind"], r["phy_offset"], r["end_offset"], int(r["count"]))


#: what the default mode reports: a replica against its master (and the file listing)
PAIRWISE = frozenset({"divergent", "lag", "extra_tail", "missing_range", "missing_segment"})


def _sort(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda k: tuple((x is None, x) for x in k))


def _unpersist(res: dict[str, Any]) -> None:
    for key in ("records", "joined"):  # None when every replica was proven identical
        if res[key] is not None:
            res[key].unpersist()


@pytest.mark.slow
@settings(max_examples=4, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.reuse, Phase.generate),  # a Spark run per example
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])  # fmt: skip
@given(spec=groups(), split=st.integers(200, 5000), verify=st.booleans(),
       exact=st.sampled_from([True, True, False]), block=st.sampled_from([64, 700, 4096, 1 << 20]))
def test_spark_equals_reference(spark: Any, spec: list[dict[str, Any]], split: int,
                                verify: bool, exact: bool, block: int) -> None:  # fmt: skip
    base = Path(tempfile.mkdtemp(prefix="rdiff-eq-"))
    try:
        replicas = materialize(spec, base)
        expected = reference_diff(replicas, verify_crc=verify, exact=exact)
        res = run_diff(spark, replicas, verify_crc=verify, split_bytes=split, exact=exact,
                       block_bytes=block, check_stores=True)  # fmt: skip
        got = [_key(r) for r in res["findings"].collect()]
        _unpersist(res)
        assert _sort(got) == _sort(list(expected))
        if verify:
            return
        res = run_diff(spark, replicas, split_bytes=split, exact=exact, block_bytes=block)
        rows = res["findings_rows"] if res["findings"] is None else res["findings"].collect()
        got = [_key(r) for r in rows if r["kind"] in PAIRWISE]
        _unpersist(res)
        assert _sort(got) == _sort([k for k in expected if k[2] in PAIRWISE])
    finally:
        cleanup(base)
