"""Helpers of the dashboard's browser tests: Debian's headless Chromium driven by Selenium
(pinned in the ``dashboard`` extra; Chromium and its driver installed with apt when missing,
never a downloaded browser build), the dashboard as its own process, screenshots."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rmq_cluster.deploy import supervisor
from tests.cache_lock import exclusive
from tests.ports import free_port

#: Debian's packages: the browser and the WebDriver that drives it.
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
APT_PACKAGES = ("chromium", "chromium-driver")
APT_TIMEOUT_S = 900
#: The dashboard prints its URL once it listens.
DASHBOARD_START_S = 60.0
#: Waiting on something a page shows.
UI_WAIT_S = 30.0
#: Screenshots of every page go here (printed by the tests).
SHOTS = Path(tempfile.gettempdir()) / "rmq-dashboard-shots"


def ensure_chromium() -> None:
    """Debian's chromium and chromium-driver, installed with apt-get when missing."""
    if os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK):
        return
    # parallel test workers: one installs, the others wait and find it installed
    with exclusive(Path(tempfile.gettempdir()) / "rmq-cluster-tests-apt.lock"):
        if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
            _apt_install()


def _apt_install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=APT_TIMEOUT_S,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", *APT_PACKAGES], check=True, env=env,
                   timeout=APT_TIMEOUT_S, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium WebDriver whose console messages can be read (``get_log``)."""
    ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.set_page_load_timeout(UI_WAIT_S)
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def wait_for(driver: Any, what: Callable[[Any], Any], timeout: float = UI_WAIT_S) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(what)


class DashboardProcess:
    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log

    def rss_kib(self, key: str = "VmHWM") -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {key} for pid {self.proc.pid}")


@contextlib.contextmanager
def dashboard(namesrv_addr: str, *args: str) -> Iterator[DashboardProcess]:
    """``python -m rmq_cluster.dashboard -n ADDR --port P ARGS`` until the block ends."""
    port = free_port()
    logdir = Path(tempfile.mkdtemp(prefix="rmq-dashboard-"))
    log = logdir / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rmq_cluster.dashboard", "-n", namesrv_addr,
             "--port", str(port), *args],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)
    try:
        url = _read_url(proc, log)
        yield DashboardProcess(proc, url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(logdir, ignore_errors=True)


def _read_url(proc: subprocess.Popen[str], log: Path) -> str:
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline() if proc.stdout
                                                         else ""), daemon=True)
    reader.start()
    reader.join(DASHBOARD_START_S)
    line = got[0].strip() if got else ""
    if not line.startswith("dashboard: "):
        raise RuntimeError(f"the dashboard did not start: {line!r} {log.read_text()[-2000:]}")
    return line.removeprefix("dashboard: ").rstrip("/")


class Traffic:
    """Messages sent at a steady pace from a thread until stopped (a live cluster's load)."""

    def __init__(self, namesrv_addr: str, topic: str, per_s: float = 20.0) -> None:
        self.namesrv_addr = namesrv_addr
        self.topic = topic
        self.period = 1.0 / per_s
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from rmq_cluster.client import Message
        from rmq_cluster.client.sync import SyncProducer

        with SyncProducer("DashboardTraffic", namesrv_addr=self.namesrv_addr) as producer:
            while not self._stop.wait(self.period):
                with contextlib.suppress(Exception):
                    producer.send(Message(self.topic, b'{"n": %d}' % self.sent,
                                          keys=f"k{self.sent}"))
                    self.sent += 1

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def until(check: Callable[[], Any], timeout: float = UI_WAIT_S, what: str = "") -> Any:
    """Poll ``check`` until it returns something true, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


#: The read-only account the ACL tests add beside the cluster's admin.
VIEWER = ("dashviewer", "viewer-secret-0123456789")


@contextlib.contextmanager
def acl_cluster() -> Iterator[tuple[str, tuple[str, str]]]:
    """``rmq-cluster up single --acl`` on a rules file written first with an admin account and
    a read-only one (``VIEWER``: SUB on everything, not admin); yields (NameServer address,
    admin credentials). Always stopped and deleted."""
    from rmq_cluster.cluster.acl.local import acl_path, write_private
    from rmq_cluster.cluster.acl.rules import render_plain_acl
    from rmq_cluster.deploy.testing import become_subreaper, cli, kill_leftovers
    from rmq_cluster.deploy.topology import resolve_profile

    become_subreaper()
    root = Path(tempfile.mkdtemp(prefix="rmq-dash-acl-"))
    directory = root / "cluster"
    admin = ("dashadmin", "admin-secret-0123456789")
    write_private(acl_path(directory), render_plain_acl([
        {"accessKey": admin[0], "secretKey": admin[1], "whiteRemoteAddress": "",
         "admin": True, "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "PUB|SUB"},
        {"accessKey": VIEWER[0], "secretKey": VIEWER[1], "whiteRemoteAddress": "",
         "admin": False, "defaultTopicPerm": "SUB", "defaultGroupPerm": "SUB"},
    ]))
    port = supervisor.free_base_port(resolve_profile("single"))
    pids: dict[str, int] = {}
    try:
        done = cli("up", "single", "--acl", "--dir", str(directory), "--base-port", str(port),
                   "--json")
        if done.returncode != 0:
            raise RuntimeError(f"up --acl failed: {done.stderr.strip()}")
        import json

        info = json.loads(done.stdout)
        pids.update({n["name"]: n["pid"] for n in info["nodes"] if n.get("pid")})
        yield info["namesrv_addr"], admin
    finally:
        if (directory / supervisor.STATE_FILE).exists():
            cli("down", "--dir", str(directory), "--purge")
        kill_leftovers(directory, pids)
        shutil.rmtree(root, ignore_errors=True)
