"""The dashboard with 1 000 topics and 200 consumer groups: each page's load time measured in
Chromium (Navigation Timing, navigation start to the load event; the best of three loads) and
the dashboard process's peak RSS. Targets: 200 ms a page and 60 MB; the asserted bounds are
generous (on a 2-core machine shared with other test runs the browser alone takes seconds),
the figures are printed."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from rmq_cluster.client import Admin
from rmq_cluster.deploy.testing import RunningCluster, rmq_cluster
from tests.dashboard.dashboard_testlib import browser, console_errors, dashboard, screenshot

pytestmark = pytest.mark.slow
TOPICS = 1000
GROUPS = 200
LOADS = 3
#: generous bounds over the 200 ms / 60 MB targets
PAGE_BOUND_MS = 3000.0
RSS_BOUND_KIB = 80 * 1024


async def _fill(namesrv_addr: str) -> None:
    async with Admin(namesrv_addr=namesrv_addr) as admin:
        (addr,) = await admin.master_addrs()
        limit = trio.CapacityLimiter(16)

        async def topic(i: int) -> None:
            async with limit:
                await admin.update_topic(f"ScaleTopic{i:04d}", broker_addr=addr,
                                         read_queue_nums=4, write_queue_nums=4)

        async def group(i: int) -> None:
            async with limit:
                await admin.update_sub_group({"groupName": f"ScaleGroup{i:03d}",
                                              "consumeEnable": True}, [addr])

        with trio.fail_after(300):
            async with trio.open_nursery() as n:
                for i in range(TOPICS):
                    n.start_soon(topic, i)
                for i in range(GROUPS):
                    n.start_soon(group, i)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RunningCluster]:
    with rmq_cluster("single") as c:
        trio.run(_fill, c.namesrv_addr)
        yield c


def _load_ms(driver: Any, url: str) -> float:
    driver.get(url)
    timing = driver.execute_script(
        "const n = performance.getEntriesByType('navigation')[0];"
        "return n.loadEventEnd > 0 ? n.loadEventEnd - n.startTime : null;")
    assert timing is not None, url
    return float(timing)


def test_pages_load_fast_with_1000_topics_and_200_groups(cluster: RunningCluster) -> None:
    with dashboard(cluster.namesrv_addr) as dash, browser() as driver:
        figures: dict[str, float] = {}
        medians: dict[str, float] = {}
        for page, css, rows in (("topics", "#topics tbody tr", TOPICS),
                                ("groups", "#groups tbody tr", GROUPS),
                                ("cluster", "#brokers tbody tr", 1)):
            url = f"{dash.url}/c/0/{page}"
            times = [_load_ms(driver, url) for _ in range(LOADS)]
            assert len(driver.find_elements("css selector", css)) >= rows, page
            assert not console_errors(driver), page
            screenshot(driver, f"scale-{page}")
            figures[page] = round(min(times), 1)
            medians[page] = round(statistics.median(times), 1)
        rss = dash.rss_kib("VmHWM")
        print(f"dashboard scale: load ms best {figures} median {medians}, "
              f"peak RSS {rss / 1024:.1f} MiB")
        assert all(ms < PAGE_BOUND_MS for ms in figures.values()), figures
        assert rss < RSS_BOUND_KIB, f"peak RSS {rss} KiB"
