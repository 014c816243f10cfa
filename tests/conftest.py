"""Shared test settings: Hypothesis profiles (CI runs a fixed, bounded number of examples), and
how the suite is split between pytest-xdist workers."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from rmq_cluster.deploy.supervisor import TEST_PORTS_ENV

settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


# --------------------------------------------------------------------------- parallel runs
# The suite runs on pytest-xdist workers (addopts in pyproject.toml: -n 3 --dist loadgroup; -n 0
# runs in one process). Most tests wait on processes, not on the 2 cores.

#: Directories whose tests share one costly session fixture (a SparkSession and a recorded
#: cluster run; Apache's Java nodes replaying the scenario): all of each on one worker, once.
SHARED_SESSION_DIRS = {"tests/spark/": "tests/spark", "tests/interop/": "tests/interop"}
#: The order work is handed out in, longest first, so no long module starts last.
RUN_ORDER = ("tests/spark/", "tests/chaos/", "tests/compat/", "tests/interop/",
             "tests/integration/", "tests/dashboard/", "tests/sim/", "tests/unit/")
#: Where the workers' test clusters and ports are planned: one disjoint slice each.
WORKER_PORTS = (11000, 32000)


def _worker_slice(worker: str, count: int) -> str:
    index = int(worker.removeprefix("gw"))
    low, high = WORKER_PORTS
    width = (high - low) // count
    return f"{low + index * width}-{low + (index + 1) * width}"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count and TEST_PORTS_ENV not in os.environ:
        # inherited by the nodes and CLIs a test starts, read by ports_for_tests()
        os.environ[TEST_PORTS_ENV] = _worker_slice(worker, int(count))


def _rank(item: pytest.Item) -> int:
    path = item.nodeid
    return next((i for i, prefix in enumerate(RUN_ORDER) if path.startswith(prefix)),
                len(RUN_ORDER))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, every test without an ``xdist_group`` of its own is grouped with its module
    (module-scoped clusters start once) or its shared-session directory, and the work is
    ordered longest first."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::", 1)[0]
        group = next((g for prefix, g in SHARED_SESSION_DIRS.items()
                      if module.startswith(prefix)), module)
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=_rank)
