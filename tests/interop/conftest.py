"""Interop fixtures: Apache RocketMQ 4.9.7's Java NameServer + Broker and ours, one pair each per
test session (JVMs are heavy on a 2-core machine), both fed the same scenario once.

A machine without Java or Maven fails these tests with a message saying so (no skips): CI
fetches the pinned Java nodes from Maven Central into ~/.m2 on first use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.interop import oracle, scenario


@attrs.frozen
class Replayed:
    """One cluster after the scenario: its flat responses and its CommitLog records."""

    cluster: oracle.Cluster
    views: dict[str, dict[str, Any]]
    commitlog: list[dict[str, Any]]


@pytest.fixture(scope="session")
def java_classpath() -> str:
    try:
        return oracle.java_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ's Java nodes are not available: {exc}", pytrace=False)


def _replayed(kind: str, root: Path, cp: str | None) -> Iterator[Replayed]:
    with oracle.running_cluster(kind, root, cp=cp) as cluster:
        views = scenario.replay(cluster.namesrv_addr, cluster.broker_addr)
        yield Replayed(cluster, views, scenario.read_commitlog(cluster.store_dir))


@pytest.fixture(scope="session")
def java_replayed(
    java_classpath: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replayed]:
    yield from _replayed("java", tmp_path_factory.mktemp("java"), java_classpath)


@pytest.fixture(scope="session")
def ours_replayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replayed]:
    yield from _replayed("ours", tmp_path_factory.mktemp("ours"), None)
