"""Shared test settings: Hypothesis profiles (CI runs a fixed, bounded number of examples), and
how the suite is split between pytest-xdist workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from rmq_cluster.deploy.supervisor import TEST_PORTS_ENV
from tests.suite_scheduling import SuiteScopes

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
# `python3 -m pytest -n 3` runs the suite on three pytest-xdist workers (pinned in the test extra),
# the work handed out by tests/suite_scheduling.py; without -n it runs in one process. Most
# tests wait on processes, not on the 2 cores.

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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Work goes out by ``suite_scope`` (module-scoped clusters start once, spark/ and interop/
    share their session), in collection order, ``ALONE_MODULES`` last with no neighbours.
    xdist's own ``xdist_group`` suffix is not used: pytest 9.2 derives a node id without the
    ``_nodeid`` xdist 3.8 rewrites."""
    if config.getvalue("dist") not in ("load", "loadscope"):
        return None  # an explicit other mode (each, worksteal, loadgroup, loadfile) is kept
    config.option.loadscopereorder = False  # our RUN_ORDER, not "most tests first"
    return SuiteScopes(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the work is ordered longest first (same order on every worker)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_rank)


# --------------------------------------------------------------------------- bytecode
# The suite starts thousands of interpreters (every `rmq-cluster` call, every node). Under
# PYTHONDONTWRITEBYTECODE (set on the CI image) none of them writes a .pyc, so each compiled the
# whole tree from source again: a CLI-heavy module measured ~25 % more CPU that way. Compiling
# the product folders once per run (mtime-checked: a no-op when fresh) gives them all a cache.


def _compile_product_tree(root: Path) -> None:
    import compileall
    import tomllib

    with open(root / "pyproject.toml", "rb") as f:
        folders = tomllib.load(f)["tool"]["setuptools"]["package-dir"].values()
    for folder in folders:
        compileall.compile_dir(root / folder, quiet=1)


def pytest_sessionstart(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller compiled before the workers started
    _compile_product_tree(Path(__file__).resolve().parents[1])
