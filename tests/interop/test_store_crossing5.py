"""Issue 33: RocketMQ 5 stores cross between Apache's 5.3.1 broker and ours, timers and POP
state included, both ways.

Apache's own 5.3.1 broker (``oracle.running_cluster("java5")``, timerWheelEnable=true, its
default) is given pending timers, POP pops in flight (some acked, one revived already) and an
orderly pop in flight (``store5_scenario.write_state``), then stopped: cleanly (SIGTERM), and,
in a second store written at the same time, by ``kill -9`` once its periodic flush of the
consumer offsets and orderly state has run (what a ``kill -9`` loses before that, Apache's own
broker pops again too). Our broker boots on a copy of each store and must keep every promise
(``store5_scenario.check``): each timer delivered once, at its time; the un-acked messages back
after their invisible time, the acked ones never; the orderly batch held until its time, then
popped again from its first unacked message with its count; the message Apache revived not
revived again. The reverse: ours writes the same state, stops, and Apache's broker boots on it
under the same promises.

The two Apache-written stores are written and read at the same time (one thread each): on a
2-core machine the waits, not the CPU, are most of the time.
"""

from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import pytest
import trio

from rmq_cluster.cluster.protocol import fastjson
from tests.interop import oracle
from tests.interop import store5_scenario as s5

pytestmark = pytest.mark.slow  # JVM brokers, then ours, each for ~30 s

STOPS: Final = ("clean", "kill9")
#: Apache flushes its consumer offsets and orderly state every 5 s (flushConsumerOffsetInterval).
FLUSH_WAIT_S: Final = 20.0
#: Apache's broker boots in 15-60 s on a busy 2-core machine: the reverse direction's due
#: times are this much later, so its wheel (not its recovery) delivers the timers.
APACHE_BOOT_LEAD_MS: Final = 15_000


@pytest.fixture(scope="module")
def java5_classpath() -> str:
    try:
        return oracle.java_classpath(apache5=True)
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ 5's broker is not available: {exc}", pytrace=False)


def _offsets_flushed(store: Path) -> bool:
    """Apache's config files hold the main pop's offset move and the orderly batch."""
    try:
        offsets = fastjson.loads((store / "config" / "consumerOffset.json").read_bytes())
        order = fastjson.loads((store / "config" / "consumerOrderInfo.json").read_bytes())
        table = offsets["offsetTable"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (table.get(f"{s5.TOPIC}@{s5.GROUP}", {}).get("0") == s5.POP_NUMS
            and f"{s5.FIFO_TOPIC}@{s5.ORDER_GROUP}" in order.get("table", {}))


def _stop(java: oracle.Cluster, stop: str) -> None:
    if stop == "clean":
        java.broker.stop()
        return
    deadline = time.monotonic() + FLUSH_WAIT_S
    while not _offsets_flushed(java.store_dir):
        assert time.monotonic() < deadline, "Apache never flushed its consumer offsets"
        time.sleep(0.2)  # another process writes the file: poll it, with a deadline
    java.broker.kill9()


def _apache_then_ours(cp: str, root: Path, stop: str) -> list[str]:
    with oracle.running_cluster("java5", root / "java5", cp=cp) as java:
        written = trio.run(s5.write_state, java.broker_addr)
        _stop(java, stop)
        shutil.copytree(java.store_dir, root / "ours" / "store")
    with oracle.running_cluster("ours", root / "ours") as ours:
        seen = trio.run(s5.watch, ours.broker_addr, written)
    errors = s5.check(written, seen)
    if not s5.far_timer_in_wheel(root / "ours" / "store", written):
        errors.append("the timer due in hours is gone from the wheel")
    return [f"{stop}: {error}" for error in errors]


def test_our_broker_boots_on_apache5_store(java5_classpath: str, tmp_path: Path) -> None:
    with ThreadPoolExecutor(len(STOPS)) as pool:
        runs = [pool.submit(_apache_then_ours, java5_classpath, tmp_path / stop, stop)
                for stop in STOPS]
        errors = [error for run in runs for error in run.result()]
    assert not errors, "\n".join(errors)


def test_apache5_boots_on_our_store(java5_classpath: str, tmp_path: Path) -> None:
    """The reverse: ours writes the same state and stops; Apache's 5.3.1 broker boots on it."""
    with oracle.running_cluster("ours", tmp_path / "ours") as ours:
        written = trio.run(s5.write_state, ours.broker_addr, APACHE_BOOT_LEAD_MS)
        ours.broker.stop()
        shutil.copytree(ours.store_dir, tmp_path / "java5" / "store")
    with oracle.running_cluster("java5", tmp_path / "java5", cp=java5_classpath) as java:
        seen = trio.run(s5.watch, java.broker_addr, written)
    errors = s5.check(written, seen)
    if not s5.far_timer_in_wheel(tmp_path / "java5" / "store", written):
        errors.append("the timer due in hours is gone from the wheel")
    assert not errors, "\n".join(errors)
