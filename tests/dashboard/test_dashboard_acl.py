"""The dashboard under ``--acl``, in headless Chromium against ``up single --acl``: every page
needs a login checked against the cluster, a wrong one is refused, a read-only account sees
but cannot act; forms need the session's CSRF token, from this origin, within the size bound."""

from __future__ import annotations

import http.client
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from rmq_cluster.dashboard.settings import MAX_REQUEST_BYTES
from tests.dashboard.dashboard_testlib import (
    VIEWER,
    DashboardProcess,
    acl_cluster,
    browser,
    console_errors,
    dashboard,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[str, tuple[str, str]]]:
    with acl_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def dash(cluster: tuple[str, tuple[str, str]]) -> Iterator[DashboardProcess]:
    with dashboard(cluster[0], "--acl") as d:
        yield d


@pytest.fixture(scope="module")
def browser_session() -> Iterator[Any]:
    with browser() as d:
        yield d


@pytest.fixture
def driver(browser_session: Any, dash: DashboardProcess) -> Any:
    """The module's browser, logged out (no cookie of an earlier test)."""
    browser_session.get(dash.url + "/static/app.css")
    browser_session.delete_all_cookies()
    browser_session.get_log("browser")  # an earlier test's console messages
    return browser_session


def _css(driver: Any, css: str) -> Any:
    return driver.find_element("css selector", css)


def _login(driver: Any, dash: DashboardProcess, ak: str, sk: str) -> None:
    driver.get(dash.url + "/c/0/topics")
    wait_for(driver, lambda d: d.current_url.endswith("/login"))
    _css(driver, "input[name=accessKey]").send_keys(ak)
    _css(driver, "input[name=secretKey]").send_keys(sk)
    _css(driver, "#login-btn").click()


def test_wrong_login_is_refused(cluster: tuple[str, tuple[str, str]], dash: DashboardProcess,
                                driver: Any) -> None:
    admin = cluster[1]
    _login(driver, dash, admin[0], admin[1] + "x")
    wait_for(driver, lambda d: "wrong account" in _css(d, "#flash").text)
    screenshot(driver, "acl-login-refused")
    driver.get(dash.url + "/c/0/cluster")
    assert driver.current_url.endswith("/login")


def test_read_only_account_sees_but_cannot_act(dash: DashboardProcess, driver: Any) -> None:
    _login(driver, dash, *VIEWER)
    wait_for(driver, lambda d: d.current_url.endswith("/c/0/cluster"))
    wait_for(driver, lambda d: _css(d, "#brokers tbody tr"))
    assert "(read-only)" in _css(driver, "header .who").text
    assert VIEWER[1] not in driver.page_source
    screenshot(driver, "acl-read-only")
    driver.get(dash.url + "/c/0/topics")
    assert not driver.find_elements("css selector", "#create-topic")
    # the form is not offered; posting it anyway (with this session's token) is refused
    token = _css(driver, "header .who input[name=csrf]").get_attribute("value")
    status = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/c/0/topics/update', {method: 'POST', headers: {'content-type': "
        "'application/x-www-form-urlencoded'}, body: 'csrf=' + arguments[0] + "
        "'&topic=ViewerTopic&cluster=DefaultCluster'}).then(r => done(r.status));", token)
    assert status == 403
    driver.get(dash.url + "/c/0/acl")
    assert "for admin accounts" in _css(driver, "#error").text
    assert [e for e in console_errors(driver) if "403" not in e] == []


def test_admin_account_acts(cluster: tuple[str, tuple[str, str]], dash: DashboardProcess,
                            driver: Any) -> None:
    _login(driver, dash, *cluster[1])
    wait_for(driver, lambda d: d.current_url.endswith("/c/0/cluster"))
    assert "(admin)" in _css(driver, "header .who").text
    driver.get(dash.url + "/c/0/topics")
    _css(driver, "details summary").click()
    _css(driver, "#new-topic").send_keys("AdminClicked")
    _css(driver, "#create-topic-btn").click()
    wait_for(driver, lambda d: "saved" in _css(d, "#flash").text)
    assert cluster[1][1] not in driver.page_source
    screenshot(driver, "acl-admin-created-topic")
    assert not console_errors(driver)


def _post(dash: DashboardProcess, path: str, body: bytes, headers: dict[str, str]
          ) -> tuple[int, dict[str, str]]:
    u = urllib.parse.urlsplit(dash.url)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=30)
    try:
        conn.request("POST", path, body, {"content-type": "application/x-www-form-urlencoded",
                                          **headers})
        resp = conn.getresponse()
        resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def test_forms_need_token_origin_and_a_bounded_body(dash: DashboardProcess) -> None:
    status, headers = _post(dash, "/login", b"accessKey=a&secretKey=b", {})
    assert status == 403  # a new session: no token matches
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    sid = cookie.split(";")[0]
    assert _post(dash, "/login", b"csrf=forged&accessKey=a&secretKey=b",
                 {"cookie": sid})[0] == 403
    assert _post(dash, "/login", b"csrf=x", {"cookie": sid, "origin": "http://evil.example"}
                 )[0] == 403
    big = b"csrf=" + b"x" * (MAX_REQUEST_BYTES + 1)
    assert _post(dash, "/login", big, {"cookie": sid})[0] == 413
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
