"""The delay level a consumer reads, against Apache's own broker as the oracle: Apache's Java
client (rocketmq-client 4.9.8, unmodified) consumes a message sent with delay level 2 and a
message whose first delivery asked for a retry at the default level (the broker picks
3 + reconsumeTimes), from Apache RocketMQ 4.9.7's NameServer and Broker and from ours, and
``getDelayTimeLevel()`` must read the same on both (tests/compat/java/Scenarios.java,
``delaylevel``). Both brokers run with one-second levels so the run stays short."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop import oracle

from .conftest import JAVA_CLIENTS, build_java_probes
from .test_java_client import run_scenarios

pytestmark = pytest.mark.slow

#: Every level one second (Apache's default levels reach 10 s at level 3, the first retry).
LEVELS = " ".join(["1s"] * 18)


@pytest.fixture(scope="module")
def client_classpath() -> str:
    return build_java_probes(JAVA_CLIENTS[0])


def _observed(kind: str, root: Path, client_cp: str) -> list[dict[str, Any]]:
    cp = oracle.java_classpath() if kind == "java" else None
    extra = {"messageDelayLevel": LEVELS}
    with oracle.running_cluster(kind, root / kind, cp=cp, broker_extra=extra) as cluster:
        events = run_scenarios(client_cp, cluster.namesrv_addr, f"dl{kind}",
                               (("delaylevel",),), root / f"home-{kind}")
    return [e for e in events["delaylevel"] if e["event"] == "recv"]


@pytest.fixture(scope="module")
def observed(client_classpath: str, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[str, list[dict[str, Any]]]]:
    root = tmp_path_factory.mktemp("delay-level")
    try:
        java_cp = oracle.java_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ's Java nodes are not available: {exc}", pytrace=False)
    assert java_cp
    yield {kind: _observed(kind, root, client_classpath) for kind in ("java", "ours")}


def _levels(received: list[dict[str, Any]]) -> list[tuple[str, int, int, str | None]]:
    """(tags, reconsume times, getDelayTimeLevel(), DELAY property) per delivery, sorted."""
    return sorted((r["tags"], r["reconsume_times"], r["delay_level"], r["props"].get("DELAY"))
                  for r in received)


def test_consumers_read_the_delay_level_apache_stores(
    observed: dict[str, list[dict[str, Any]]]
) -> None:
    java, ours = _levels(observed["java"]), _levels(observed["ours"])
    assert java == [("Delayed", 0, 2, "2"), ("Retry", 0, 0, None), ("Retry", 1, 3, "3")], java
    assert ours == java
    for kind in ("java", "ours"):  # the retried message comes back on its own topic's name
        for r in observed[kind]:
            assert r["topic"] == r["props"].get("RETRY_TOPIC", r["topic"])
