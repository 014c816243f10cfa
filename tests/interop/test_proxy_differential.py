"""Issue 34: Apache RocketMQ 5.3.1's own Proxy as the oracle of ``mqproxy``.

Apache's proxy (built from the release's sources, ``proxy_oracle.py``) in cluster mode in front
of Apache's 5.3.1 broker and our NameServer, beside ``mqproxy`` in front of our NameServer and
broker; the same gRPC calls (``proxy_scenario.STEPS``: QueryRoute, Heartbeat, QueryAssignment,
SendMessage normal / FIFO / delay, ReceiveMessage (an orderly group's too, and its redelivery
with delivery attempt 2), AckMessage, ChangeInvisibleDuration, and
the refusals of a missing topic, a wrong message type, a bad group, a bad receipt handle and a
receive whose deadline is too short for its long poll)
replayed to both at once; each answer must match field by field, except what differs by nature
(``ALLOWED``: clocks, ports, receipt handles) and the listed ``PROXY_DEVIATIONS``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import attrs
import pytest

from tests.integration.proxy.proxy_testlib import live_proxy
from tests.interop import oracle, proxy_oracle, proxy_scenario, scenario
from tests.interop.deviations import PROXY_DEVIATIONS, PROXY_KINDS

pytestmark = pytest.mark.slow  # two JVMs (broker, proxy) + ours

#: What differs by nature: (step regex, field regex, why).
ALLOWED: Final[tuple[tuple[str, str, str], ...]] = (
    (r".*", r".*\.port|.*endpoints\.addresses\[\d+\]\.port", "each proxy's own port"),
    (r".*", r".*receipt_handle", "an opaque token naming the broker's POP checkpoint"),
    (r".*", r".*\.(store_timestamp|born_timestamp|delivery_timestamp)",
     "clocks: when each side sent and stored"),
    (r".*", r".*\.store_host", "each broker's own address"),
    (r".*", r"(.*\.)?status\.message", "free text; the codes are compared"),
)


@attrs.frozen
class Both:
    java: dict[str, dict[str, Any]]
    ours: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def proxy_classpath() -> str:
    try:
        return proxy_oracle.proxy_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ 5's proxy is not available: {exc}", pytrace=False)


def _apache(stack: contextlib.ExitStack, root: Path) -> int:
    cluster = stack.enter_context(oracle.running_cluster("java5", root / "cluster"))
    scenario.replay(cluster.namesrv_addr, cluster.broker_addr, proxy_scenario.SETUP)
    proxy = stack.enter_context(proxy_oracle.running_apache_proxy(
        root / "proxy", cluster.namesrv_addr, str(cluster.conf["brokerClusterName"])))
    return proxy.grpc_port


def _ours(stack: contextlib.ExitStack, root: Path) -> int:
    cluster = stack.enter_context(oracle.running_cluster("ours", root / "cluster"))
    scenario.replay(cluster.namesrv_addr, cluster.broker_addr, proxy_scenario.SETUP)
    (root / "proxy").mkdir(parents=True)
    proxy = stack.enter_context(live_proxy(root / "proxy", cluster.namesrv_addr))
    return proxy.port


@pytest.fixture(scope="module")
def both(proxy_classpath: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    with contextlib.ExitStack() as stack:
        java_stack = stack.enter_context(contextlib.ExitStack())
        ours_stack = stack.enter_context(contextlib.ExitStack())
        with ThreadPoolExecutor(2) as pool:
            java_f = pool.submit(_apache, java_stack, tmp_path_factory.mktemp("apache-proxy"))
            ours_f = pool.submit(_ours, ours_stack, tmp_path_factory.mktemp("ours-proxy"))
            java_port, ours_port = java_f.result(), ours_f.result()
            java_v = pool.submit(proxy_scenario.replay, java_port)
            ours_v = pool.submit(proxy_scenario.replay, ours_port)
            yield Both(java_v.result(), ours_v.result())


def _deviation(step: str, field: str) -> tuple[str, str, str, str] | None:
    for entry in PROXY_DEVIATIONS:
        if re.fullmatch(entry[0], step) and re.fullmatch(entry[1], field):
            return entry
    return None


def _diffs(both: Both, step: str) -> list[tuple[str, Any, Any]]:
    return scenario.compare(step, both.java[step], both.ours[step], ALLOWED)


STEP_NAMES: Final = ("telemetry_producer", "telemetry_consumer", "telemetry_orderly",
                     *(name for name, _, _ in proxy_scenario.STEPS))


@pytest.mark.parametrize("step", STEP_NAMES)
def test_proxy_step_matches_apache5(both: Both, step: str) -> None:
    assert "error" not in both.java[step], f"Apache's proxy gave no answer to {step}"
    unexplained = [d for d in _diffs(both, step) if _deviation(step, d[0]) is None]
    assert not unexplained, "\n".join(
        [f"{step}: answers differ (fix it, or list it in deviations.PROXY_DEVIATIONS):"]
        + [f"  {f}: java={j!r} ours={o!r}" for f, j, o in unexplained])


def test_scenario_reached_the_messages(both: Both) -> None:
    """The comparison is worth something only if Apache's side received what was sent."""
    for step in ("receive_normal", "receive_fifo", "receive_delay", "receive_orderly",
                 "receive_orderly_again"):
        assert any(k.endswith("message.body") for k in both.java[step]), both.java[step]


def test_every_proxy_deviation_still_occurs(both: Both) -> None:
    """A fixed difference must leave PROXY_DEVIATIONS, so the list stays the truth."""
    assert {e[2] for e in PROXY_DEVIATIONS} <= PROXY_KINDS
    seen = {
        entry for step in both.java for field, _, _ in _diffs(both, step)
        if (entry := _deviation(step, field)) is not None
    }
    stale = [e for e in PROXY_DEVIATIONS if e not in seen and e[2] != "timing"]
    assert not stale, "deviations no longer observed:\n" + "\n".join(
        f"  {e[0]} / {e[1]}: {e[3]}" for e in stale)
