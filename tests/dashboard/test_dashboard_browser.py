"""The dashboard in headless Chromium against a live ``2m-2s-async`` cluster with traffic:
every page renders with no console error (a screenshot of each is saved), live lag follows a
consumer, topic creation, offset reset and DLQ resend work by clicking, and a traced message's
page draws its path."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rmq_cluster.client import ConsumeFromWhere, ConsumeResult, Message
from rmq_cluster.client.sync import SyncAdmin, SyncProducer, SyncPullConsumer, SyncPushConsumer
from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster
from tests.dashboard.dashboard_testlib import (
    DashboardProcess,
    Traffic,
    browser,
    console_errors,
    dashboard,
    screenshot,
    until,
    wait_for,
)

pytestmark = pytest.mark.slow
TRAFFIC = "DashTraffic"
LAGGY = "DashLaggy"
#: the reset test's own topic: a group reading LAGGY from its first offset must see only the
#: lag test's messages, whichever of the two runs first
RESET = "DashReset"
DEAD = "DashDead"
TRACED = "DashTraced"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RunningCluster]:
    with rmq_cluster("2m-2s-async") as c:
        create_topics(c.namesrv_addr, [TRAFFIC, LAGGY, RESET, DEAD, TRACED], queues=2)
        yield c


@pytest.fixture(scope="module")
def dash(cluster: RunningCluster) -> Iterator[DashboardProcess]:
    with dashboard(cluster.namesrv_addr, "-n", f"again={cluster.namesrv_addr}") as d:
        yield d


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    with browser() as d:
        yield d


def _by_css(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def _visit(driver: Any, url: str, expect_css: str, shot: str) -> None:
    driver.get(url)
    wait_for(driver, lambda d: _by_css(d, expect_css))
    assert "Error" not in driver.title, driver.page_source[:2000]
    screenshot(driver, shot)
    errors = console_errors(driver)
    assert not errors, f"{url}: console errors {errors}"


def _dead_letter(cluster: RunningCluster) -> str:
    """A message of DEAD that the group DashDeadGroup gives up on: its offset id in the DLQ."""
    failed = threading.Event()

    def give_up(msgs: list[Any]) -> ConsumeResult:
        failed.set()
        return ConsumeResult.RECONSUME_LATER

    with SyncProducer("DashDeadProducer", namesrv_addr=cluster.namesrv_addr) as p:
        p.send(Message(DEAD, b'{"order": 7, "state": "poison"}', tags="t", keys="poison-7",
                       properties={"origin": "test"}))
    with SyncPushConsumer("DashDeadGroup", give_up, {DEAD: "*"},
                          namesrv_addr=cluster.namesrv_addr, max_reconsume_times=0,
                          consume_from=ConsumeFromWhere.FIRST_OFFSET):
        assert failed.wait(60)
        with SyncAdmin(namesrv_addr=cluster.namesrv_addr) as admin:
            def in_dlq() -> str | None:
                try:
                    for mq in admin.queues_of("%DLQ%DashDeadGroup"):
                        got = admin.pull(mq, 0, 1).messages
                        if got:
                            return str(got[0].offset_msg_id)
                except Exception:
                    return None
                return None

            return str(until(in_dlq, 60, "the dead letter"))


def test_every_page_renders_with_traffic(cluster: RunningCluster, dash: DashboardProcess,
                                         driver: Any) -> None:
    base = dash.url + "/c/0"
    with Traffic(cluster.namesrv_addr, TRAFFIC):
        _visit(driver, f"{base}/cluster", "#brokers tbody tr", "cluster")
        assert len(driver.find_elements("css selector", "#brokers tbody tr")) == 4
        assert "SLAVE" in _by_css(driver, "#brokers").text
        wait_for(driver, lambda d: int(d.execute_script(
            "return Number(document.body.dataset.liveUpdates || 0)")) >= 2)
        _visit(driver, f"{base}/topics", "#topics", "topics")
        _visit(driver, f"{base}/topic/{TRAFFIC}", "#queues tbody tr", "topic")
        _visit(driver, f"{base}/groups", "#groups", "groups")
        _visit(driver, f"{base}/messages?topic={TRAFFIC}&broker=broker-a&queue=0&offset=0",
               "#messages tbody tr", "messages")
        link = _by_css(driver, "#messages tbody tr a").get_attribute("href")
        _visit(driver, link, "#body-text", "message")
        _by_css(driver, "[data-view=hex]").click()
        assert _by_css(driver, "#body-hex").is_displayed()
        _visit(driver, f"{base}/replication", "canvas#chart-replication", "replication")
        wait_for(driver, lambda d: int(d.execute_script(
            "return Number(document.body.dataset.liveUpdates || 0)")) >= 2)
        _visit(driver, f"{base}/chaos", "#runs", "chaos")
        _visit(driver, f"{base}/acl", "main", "acl")
        # several clusters, picked by NameServer address: the second one's page
        assert len(driver.find_elements("css selector", "form.pick option")) == 2
        _visit(driver, f"{dash.url}/c/1/cluster", "#brokers tbody tr", "cluster-again")
        assert "again (" in _by_css(driver, "form.pick option[selected]").text


def test_live_lag_follows_a_consumer(cluster: RunningCluster, dash: DashboardProcess,
                                     driver: Any) -> None:
    """The group page's lag moves without a reload as the consumer falls behind, and back to 0
    as it catches up."""
    addr = cluster.namesrv_addr
    with SyncPullConsumer("DashLagGroup", namesrv_addr=addr,
                          consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.assign(consumer.fetch_queues(LAGGY))
        consumer.commit()
        driver.get(f"{dash.url}/c/0/group/DashLagGroup")
        wait_for(driver, lambda d: _by_css(d, "#total-lag"))
        driver.execute_script("document.body.dataset.marker = 'same page'")
        with SyncProducer("DashLagProducer", namesrv_addr=addr) as p:
            for i in range(40):
                p.send(Message(LAGGY, f"m{i}".encode()))
        wait_for(driver, lambda d: _by_css(d, "#total-lag").text == "40")
        screenshot(driver, "group-behind")
        got = 0
        while got < 40:
            got += len(consumer.poll(timeout=10))
        consumer.commit()
        wait_for(driver, lambda d: _by_css(d, "#total-lag").text == "0")
        assert driver.execute_script("return document.body.dataset.marker") == "same page"
        screenshot(driver, "group-caught-up")
        assert not console_errors(driver)


def test_create_topic_by_clicking(dash: DashboardProcess, driver: Any) -> None:
    driver.get(f"{dash.url}/c/0/topics")
    _by_css(driver, "details summary").click()
    _by_css(driver, "#new-topic").send_keys("DashClicked")
    _by_css(driver, "#create-topic-btn").click()
    wait_for(driver, lambda d: "saved" in _by_css(d, "#flash").text)
    assert driver.current_url.endswith("/topic/DashClicked")
    assert len(driver.find_elements("css selector", "#route tbody tr")) == 2
    screenshot(driver, "topic-created")


def test_reset_offset_by_clicking(cluster: RunningCluster, dash: DashboardProcess,
                                  driver: Any) -> None:
    """A group behind is reset to the end by clicking: its lag drops to 0."""
    addr = cluster.namesrv_addr
    with SyncProducer("DashResetProducer", namesrv_addr=addr) as p:
        for i in range(10):
            p.send(Message(RESET, f"r{i}".encode()))
    with SyncPullConsumer("DashResetGroup", namesrv_addr=addr,
                          consume_from=ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.assign(consumer.fetch_queues(RESET))
        consumer.commit()
    driver.get(f"{dash.url}/c/0/group/DashResetGroup")
    assert int(_by_css(driver, "#total-lag").text) > 0
    from selenium.webdriver.support.ui import Select

    Select(_by_css(driver, "#reset-to")).select_by_value("latest")
    _by_css(driver, "#reset-btn").click()
    driver.switch_to.alert.accept()
    wait_for(driver, lambda d: "reset" in _by_css(d, "#flash").text)
    wait_for(driver, lambda d: _by_css(d, "#total-lag").text == "0")
    screenshot(driver, "group-reset")


def test_resend_dead_letter_by_clicking(cluster: RunningCluster, dash: DashboardProcess,
                                        driver: Any) -> None:
    msg_id = _dead_letter(cluster)
    driver.get(f"{dash.url}/c/0/message/{msg_id}")
    assert "%DLQ%DashDeadGroup" in _by_css(driver, "#meta").text
    _by_css(driver, "[data-view=json]").click()
    assert '"state": "poison"' in _by_css(driver, "#body-json").text
    _by_css(driver, "#resend-btn").click()
    driver.switch_to.alert.accept()
    wait_for(driver, lambda d: "SEND_OK" in _by_css(d, "#flash").text)
    screenshot(driver, "dlq-resent")
    driver.get(f"{dash.url}/c/0/messages?topic={DEAD}&key=poison-7")
    rows = wait_for(driver, lambda d: len(d.find_elements("css selector",
                                                          "#messages tbody tr a")) == 2 or None)
    assert rows


def test_message_page_draws_its_trace_path(cluster: RunningCluster, dash: DashboardProcess,
                                           driver: Any) -> None:
    """A message sent and consumed with ``enable_msg_trace``: its page draws sent (producer
    group, host, time, cost) -> stored (broker) -> consumed (group, cost, status) from the
    trace topic."""
    addr = cluster.namesrv_addr
    got = threading.Event()

    def listener(msgs: list[Any]) -> ConsumeResult:
        got.set()
        return ConsumeResult.SUCCESS

    with SyncProducer("DashTracePG", namesrv_addr=addr, enable_msg_trace=True) as p:
        sent = p.send(Message(TRACED, b"traced", tags="t", keys="trace-1"))
    with SyncPushConsumer("DashTraceCG", listener, {TRACED: "*"}, namesrv_addr=addr,
                          enable_msg_trace=True, consume_from=ConsumeFromWhere.FIRST_OFFSET):
        assert got.wait(60)
    with SyncAdmin(namesrv_addr=addr) as admin:
        until(lambda: {v.kind.value for v in admin.query_msg_trace(sent.msg_id)}
              >= {"Pub", "SubAfter"} or None, 60, "the trace records")
    driver.get(f"{dash.url}/c/0/message/{sent.offset_msg_id}")
    wait_for(driver, lambda d: _by_css(d, "#trace-path"))
    steps = {s.get_attribute("data-step"): s.text
             for s in driver.find_elements("css selector", "#trace-path > li")}
    assert "DashTracePG" in steps["sent"] and "success" in steps["sent"]
    assert sent.queue.broker_name in steps["stored"]
    assert "DashTraceCG" in steps["consumed"] and "success" in steps["consumed"]
    screenshot(driver, "message-trace")
    assert not console_errors(driver)
