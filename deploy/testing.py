"""A real cluster for your own tests: ``rmq_cluster(profile)`` and a pytest plugin.

As a context manager::

    from rmq_cluster.deploy.testing import rmq_cluster

    def test_my_app():
        with rmq_cluster("2m-noslave") as cluster:
            run_my_app(namesrv_addr=cluster.namesrv_addr)

As a pytest plugin: installing rmq-cluster registers it (the ``pytest11`` entry point
``rmq_cluster.deploy.testing``; ``-p no:rmq_cluster.deploy.testing`` turns it off). Its
fixtures start nothing until a test asks for one:

* ``rmq`` - this test's namespace on one cluster shared by the whole session (started on first
  use, stopped at the end): ``rmq.topic("Orders")`` / ``rmq.group("billing")`` are names only
  this test uses, ``rmq.create_topic("Orders")`` creates one, ``rmq.namesrv_addr``;
* ``rmq_seed({"Orders": [b"m1", "m2"]})`` - creates the test's topics and sends the messages;
* ``rmq_session_cluster`` - the shared cluster itself; ``rmq_cluster_factory(profile)`` - a
  cluster of this test's own.

Settings (command line, else environment, else ini option, else the default):

=====================  ===========================  ====================  ============
``--rmq-profile``      ``RMQ_CLUSTER_TEST_PROFILE``  ``rmq_profile``       single
``--rmq-port-range``   ``RMQ_CLUSTER_TEST_PORTS``    ``rmq_port_range``    11000-32000
``--rmq-isolation``    ``RMQ_CLUSTER_TEST_ISOLATION``  ``rmq_isolation``   namespace
=====================  ===========================  ====================  ============

``isolation``: ``namespace`` (one cluster per session, fresh topic and group names per test)
or ``cluster`` (``rmq`` starts a cluster for every test).

The cluster runs as real processes (``rmq-cluster up`` in a subprocess) in a temporary
directory, on a base port whose whole plan was free a moment before, and is always stopped
(``down --purge``, then SIGKILL by pid for anything left) when the block or the test ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

from . import supervisor
from .topology import plan_span, resolve_profile

if TYPE_CHECKING:
    from ..client import Message, SendResult

T = TypeVar("T")

#: ``up`` in the subprocess waits this long for readiness; the subprocess gets a bit more.
UP_TIMEOUT_S: Final = 30.0
CLI_TIMEOUT_S: Final = 60.0
_PR_SET_CHILD_SUBREAPER: Final = 36


def become_subreaper() -> bool:
    """Make this process the reaper of orphaned descendants (Linux), so nodes started through
    a CLI subprocess are collected here instead of lingering as zombies under a PID 1 that
    does not reap. Returns whether it worked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def pid_running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (reaping it first when it is our child)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return False
    state = raw[raw.rfind(")") + 2 :].split()[0]
    return state not in ("Z", "X", "x")


def cli(*args: str, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``rmq-cluster ARGS`` (as ``python -m rmq_cluster.deploy``) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "rmq_cluster.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@attrs.define
class RunningCluster:
    """A cluster started by ``rmq_cluster``: where it is and how to reach it."""

    name: str
    profile: str
    dir: Path
    base_port: int
    namesrv_addr: str
    nodes: list[dict[str, Any]]
    ready_s: float

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``rmq-cluster ARGS --dir <this cluster>``."""
        return cli(*args, "--dir", str(self.dir))

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--json")
        if done.returncode not in (0, 1) or not done.stdout.strip():  # 1: a node is down
            raise RuntimeError(f"rmq-cluster status failed: {done.stderr.strip()}")
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    def node(self, name: str) -> dict[str, Any]:
        for n in self.status()["nodes"]:
            if n["name"] == name:
                return n
        raise KeyError(name)

    def pids(self) -> dict[str, int]:
        """Every pid the cluster's state file has ever named for a node (now)."""
        try:
            state = supervisor.load_state(self.dir)
        except supervisor.SupervisorError:
            return {}
        return {r.name: r.pid for r in state.records() if r.pid is not None}

    def broker_addrs(self) -> dict[str, str]:
        return {n["name"]: n["addr"] for n in self.nodes if n["kind"] == "broker"}


def pids_running_from(conf_dir: str) -> list[int]:
    """Pids whose command line names a file in ``conf_dir`` (a node of that cluster, even one
    whose pid the state file no longer holds)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if any(a.startswith(conf_dir + os.sep) for a in args):
            found.append(int(entry))
    return found


def kill_leftovers(directory: Path, pids: dict[str, int]) -> None:
    """SIGKILL anything still ours: the state file's pids (checked to be our nodes) and the
    pids seen earlier (checked by command line, as the state file may be gone)."""
    try:
        state = supervisor.load_state(directory)
        for rec in state.records():
            rec.signal(signal.SIGKILL)
    except supervisor.SupervisorError:
        pass
    conf_dir = str(directory.resolve() / "conf")
    pids = {**pids, **{f"scan@{pid}": pid for pid in pids_running_from(conf_dir)}}
    for pid in pids.values():
        if pid_running(pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if conf_dir in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + supervisor.KILL_WAIT_S
    while time.monotonic() < deadline and any(pid_running(p) for p in pids.values()):
        time.sleep(supervisor.EXIT_POLL_INTERVAL_S)


@contextlib.contextmanager
def rmq_cluster(
    profile: str = "single",
    *,
    directory: str | os.PathLike[str] | None = None,
    base_port: int | None = None,
    purge: bool = True,
    reap: bool = True,
    port_range: tuple[int, int] | None = None,
) -> Iterator[RunningCluster]:
    """Start ``profile`` as real processes, yield a RunningCluster, always stop it.

    ``directory``: where the cluster lives (default: a new temporary directory); with
    ``purge`` (the default) it is deleted afterwards, so pass a directory of its own.
    ``port_range``: ``(low, high)`` the whole port plan is picked in (default 11000-32000).
    ``reap``: become the reaper of the nodes (see ``become_subreaper``)."""
    spec = resolve_profile(profile)
    if reap:
        become_subreaper()
    own_tmp = directory is None
    root = Path(tempfile.mkdtemp(prefix="rmq-cluster-")) if own_tmp else Path(directory or ".")
    cluster_dir = root / "cluster" if own_tmp else root
    low, high = port_range or supervisor.ports_for_tests()
    port = (base_port if base_port is not None
            else supervisor.free_base_port(spec, low=low, high=high))
    seen: dict[str, int] = {}
    try:
        done = cli(
            "up", profile, "--dir", str(cluster_dir), "--base-port", str(port),
            "--timeout", str(UP_TIMEOUT_S), "--json",
        )
        if done.returncode != 0:
            raise RuntimeError(f"rmq-cluster up {profile} failed: {done.stderr.strip()}")
        info = json.loads(done.stdout)
        cluster = RunningCluster(
            name=info["name"],
            profile=info["profile"],
            dir=Path(info["dir"]),
            base_port=port,
            namesrv_addr=info["namesrv_addr"],
            nodes=info["nodes"],
            ready_s=float(info["ready_s"]),
        )
        seen.update(cluster.pids())
        try:
            yield cluster
        finally:
            seen.update(cluster.pids())
    finally:
        args = ["down", "--dir", str(cluster_dir)] + (["--purge"] if purge else [])
        if (cluster_dir / supervisor.STATE_FILE).exists():
            cli(*args)
        kill_leftovers(cluster_dir, seen)
        if own_tmp and purge:
            shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- per-test namespaces

#: RocketMQ's topic and group names: ``^[%|a-zA-Z0-9_-]+$``, topics at most 127 characters.
_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
TOPIC_MAX_CHARS: Final = 127
NAMESPACE_CHARS: Final = 10
#: Seeding and topic creation end within this (a new topic is routable in well under a second).
SEED_TIMEOUT_S: Final = 60.0
ROUTE_POLL_S: Final = 0.05
DEFAULT_SEED_QUEUES: Final = 4


def _in_thread(fn: Callable[[], Awaitable[T]], timeout: float = SEED_TIMEOUT_S) -> T:
    """``trio.run(fn)`` on a thread of its own: callable from plain and from Trio tests (the
    caller's loop, if any, is not re-entered)."""
    import trio

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = trio.run(fn)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, name="rmq-cluster-testing", daemon=True)
    worker.start()
    worker.join(timeout + 5.0)
    if worker.is_alive():
        raise TimeoutError(f"rmq-cluster test helper did not finish within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    result: T = box["value"]
    return result


async def _create_topics(admin: Any, topics: Iterable[str], *, queues: int, order: bool) -> None:
    """Create ``topics`` on every master through ``admin`` (once at least one is registered)
    and wait until the NameServers route each of them on every master (the brokers
    re-register at once)."""
    import trio

    masters = await admin.master_addrs()
    while not masters:  # a broker just started registers within moments
        await trio.sleep(ROUTE_POLL_S)
        masters = await admin.master_addrs()
    names = list(topics)
    for topic in names:
        for addr in masters:
            await admin.update_topic(topic, broker_addr=addr, read_queue_nums=queues,
                                     write_queue_nums=queues, order=order)
    for topic in names:
        await wait_routed(admin, topic, len(masters))


async def wait_routed(admin: Any, topic: str, masters: int) -> None:
    """Until the NameServers route ``topic`` on ``masters`` brokers (polled; bound it with
    the caller's deadline)."""
    import trio

    while True:
        try:
            route = await admin.topic_route(topic)
        except Exception:  # not routed yet (TOPIC_NOT_EXIST)
            route = None
        if route is not None and len(route.queue_datas) >= masters:
            return
        await trio.sleep(ROUTE_POLL_S)  # polled until routable, within the caller's deadline


def create_topics(namesrv_addr: str, topics: Iterable[str], *,
                  queues: int = DEFAULT_SEED_QUEUES, order: bool = False,
                  timeout: float = SEED_TIMEOUT_S) -> None:
    """Create ``topics`` (real names) on every master of the cluster at ``namesrv_addr`` and
    return once every one is routable (blocking; callable from Trio tests too)."""
    names = list(topics)

    async def go() -> None:
        import trio

        from ..client import Admin

        with trio.fail_after(timeout):
            async with Admin(namesrv_addr=namesrv_addr) as admin:
                await _create_topics(admin, names, queues=queues, order=order)

    _in_thread(go, timeout)


@attrs.frozen
class Seeded:
    """What ``rmq_seed`` made: ``topics[name]`` is the real topic of ``name`` (namespaced),
    ``sent[name]`` the SendResults of its messages, in order."""

    topics: Mapping[str, str]
    sent: Mapping[str, tuple[SendResult, ...]]


@attrs.frozen
class RmqNamespace:
    """One test's names on a (shared) cluster: every ``topic(x)`` and ``group(x)`` carries
    ``suffix``, unique to the test, so tests on one cluster never see each other's messages."""

    cluster: RunningCluster
    suffix: str = attrs.field(factory=lambda: uuid.uuid4().hex[:NAMESPACE_CHARS])

    @property
    def namesrv_addr(self) -> str:
        return self.cluster.namesrv_addr

    def _name(self, name: str) -> str:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"not a topic or group name (letters, digits, _ and -): {name!r}")
        full = f"{name}-{self.suffix}"
        if len(full) > TOPIC_MAX_CHARS:
            raise ValueError(f"name too long: {name!r} (at most "
                             f"{TOPIC_MAX_CHARS - NAMESPACE_CHARS - 1} characters)")
        return full

    def topic(self, name: str) -> str:
        """This test's topic ``name`` (``name-<suffix>``)."""
        return self._name(name)

    def group(self, name: str) -> str:
        """This test's producer or consumer group ``name`` (``name-<suffix>``)."""
        return self._name(name)

    def create_topic(self, name: str, *, queues: int = DEFAULT_SEED_QUEUES,
                     order: bool = False) -> str:
        """Create this test's topic ``name`` on every master and wait until the NameServers
        route it; its real name."""
        return self.seed({name: []}, queues=queues, order=order).topics[name]

    def seed(self, topics: Mapping[str, Iterable[bytes | str | Message]], *,
             queues: int = DEFAULT_SEED_QUEUES, order: bool = False) -> Seeded:
        """Create each topic (namespaced) and send its messages in order: bytes and str
        become bodies, a ``Message`` is sent as it is, to the namespaced topic."""
        if not isinstance(queues, int) or not 1 <= queues <= 1024:
            raise ValueError(f"queues must be 1..1024, got {queues!r}")
        from ..client import Message

        real = {name: self.topic(name) for name in topics}
        bodies = {name: list(msgs) for name, msgs in topics.items()}
        for name, msgs in bodies.items():
            for m in msgs:
                if not isinstance(m, bytes | str | Message):
                    raise TypeError(f"{name}: a message is bytes, str or Message, not {m!r}")

        async def go() -> dict[str, tuple[SendResult, ...]]:
            import trio

            from ..client import Admin, Producer

            sent: dict[str, tuple[SendResult, ...]] = {}
            with trio.fail_after(SEED_TIMEOUT_S):
                async with Admin(namesrv_addr=self.namesrv_addr) as admin:
                    await _create_topics(admin, real.values(), queues=queues, order=order)
                if any(bodies.values()):
                    async with Producer(self.group("seed"),
                                        namesrv_addr=self.namesrv_addr) as producer:
                        for name, msgs in bodies.items():
                            out = []
                            for m in msgs:
                                if isinstance(m, Message):
                                    msg = attrs.evolve(m, topic=real[name])
                                else:
                                    body = m.encode() if isinstance(m, str) else m
                                    msg = Message(real[name], body)
                                out.append(await producer.send(msg))
                            sent[name] = tuple(out)
            return sent

        sent = _in_thread(go)
        return Seeded(topics=real, sent={name: sent.get(name, ()) for name in real})


# --------------------------------------------------------------------------- plugin settings

ISOLATION_NAMESPACE: Final = "namespace"
ISOLATION_CLUSTER: Final = "cluster"
ISOLATIONS: Final = (ISOLATION_NAMESPACE, ISOLATION_CLUSTER)
DEFAULT_PROFILE: Final = "single"
#: (command-line option, environment variable, ini option) of each setting.
SETTING_SOURCES: Final = {
    "profile": ("--rmq-profile", "RMQ_CLUSTER_TEST_PROFILE", "rmq_profile"),
    "port_range": ("--rmq-port-range", "RMQ_CLUSTER_TEST_PORTS", "rmq_port_range"),
    "isolation": ("--rmq-isolation", "RMQ_CLUSTER_TEST_ISOLATION", "rmq_isolation"),
}


class SettingsError(ValueError):
    """A bad plugin setting; says which one and where it came from."""


@attrs.frozen
class PluginSettings:
    profile: str = DEFAULT_PROFILE
    port_low: int = supervisor.TEST_PORT_LOW
    port_high: int = supervisor.TEST_PORT_HIGH
    isolation: str = ISOLATION_NAMESPACE

    @property
    def port_range(self) -> tuple[int, int]:
        return self.port_low, self.port_high


def parse_port_range(text: str, *, profile: str = DEFAULT_PROFILE,
                     ephemeral: tuple[int, int] | None = None) -> tuple[int, int]:
    """``LOW-HIGH``: ports the whole plan of ``profile`` must fit in (1024 < LOW < HIGH <=
    65535, at least one plan wide outside ``ephemeral``, the kernel's ephemeral port range,
    where an outgoing connection could take a planned port first)."""
    m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", text)
    if m is None:
        raise SettingsError(f"port range must be LOW-HIGH, got {text!r}")
    low, high = int(m.group(1)), int(m.group(2))
    if not 1024 < low < high <= 65535:
        raise SettingsError(f"port range must have 1024 < LOW < HIGH <= 65535, got {text!r}")
    span = plan_span(resolve_profile(profile))
    if high - low <= span:
        raise SettingsError(f"port range {text!r} is narrower than {profile}'s port plan "
                            f"({span + 1} ports)")
    if ephemeral is not None:
        e_lo, e_hi = ephemeral
        below = min(high, e_lo) - low
        above = high - max(low, e_hi + 1)
        if max(below, above) <= span:
            raise SettingsError(
                f"port range {text!r} leaves no room for {profile}'s port plan ({span + 1} "
                f"ports) outside the kernel's ephemeral ports {e_lo}-{e_hi}"
            )
    return low, high


def resolve_settings(
    cli: Mapping[str, str | None], env: Mapping[str, str], ini: Mapping[str, str]
) -> PluginSettings:
    """Each setting from the command line, else the environment, else the ini file, else the
    default; validated in full (SettingsError names the setting and its source)."""
    chosen: dict[str, tuple[str, str]] = {}
    for key, (opt, var, ini_name) in SETTING_SOURCES.items():
        for source, value in ((opt, cli.get(key)), (var, env.get(var)),
                              (f"ini {ini_name}", ini.get(key))):
            if value is not None and str(value).strip():
                chosen[key] = (source, str(value).strip())
                break
    profile = chosen.get("profile", ("", DEFAULT_PROFILE))[1]
    try:
        resolve_profile(profile)
    except ValueError as exc:
        raise SettingsError(f"{chosen['profile'][0]}: {exc}") from None
    low, high = supervisor.TEST_PORT_LOW, supervisor.TEST_PORT_HIGH
    if "port_range" in chosen:
        source, text = chosen["port_range"]
        try:
            low, high = parse_port_range(text, profile=profile,
                                         ephemeral=supervisor._ephemeral_range())
        except SettingsError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    isolation = chosen.get("isolation", ("", ISOLATION_NAMESPACE))[1]
    if isolation not in ISOLATIONS:
        raise SettingsError(f"{chosen['isolation'][0]}: isolation must be one of "
                            f"{', '.join(ISOLATIONS)}, got {isolation!r}")
    return PluginSettings(profile=profile, port_low=low, port_high=high, isolation=isolation)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt_on_sigterm() -> Any:
    """Make SIGTERM unwind a test run as Ctrl-C does, so every cluster's ``finally`` stops its
    nodes (they run in sessions of their own: a terminated pytest would otherwise leave them).
    Only when SIGTERM still has its default action and we are on the main thread; returns the
    handler to restore, or None when nothing was changed."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupt)


# --------------------------------------------------------------------------- pytest plugin

try:
    import pytest
except ImportError:  # pytest is only needed for the fixtures
    pytest = None  # type: ignore[assignment]

if pytest is not None:
    _SETTINGS: Final = pytest.StashKey[PluginSettings]()
    _STARTED: Final = pytest.StashKey[list[str]]()
    _SIGTERM: Final = pytest.StashKey[Any]()

    def pytest_addoption(parser: pytest.Parser) -> None:
        group = parser.getgroup("rmq-cluster", "rmq-cluster test clusters")
        group.addoption("--rmq-profile", dest="rmq_profile", default=None, metavar="PROFILE",
                        help="profile of the test cluster (env RMQ_CLUSTER_TEST_PROFILE, "
                             "ini rmq_profile; default single)")
        group.addoption("--rmq-port-range", dest="rmq_port_range", default=None,
                        metavar="LOW-HIGH",
                        help="ports test clusters are placed in (env RMQ_CLUSTER_TEST_PORTS, "
                             "ini rmq_port_range; default 11000-32000)")
        group.addoption("--rmq-isolation", dest="rmq_isolation", default=None,
                        metavar="namespace|cluster",
                        help="rmq fixture: one shared cluster and a fresh topic/group "
                             "namespace per test (namespace, the default) or a cluster per "
                             "test (env RMQ_CLUSTER_TEST_ISOLATION, ini rmq_isolation)")
        parser.addini("rmq_profile", "profile of the rmq-cluster test cluster", default="")
        parser.addini("rmq_port_range", "LOW-HIGH ports for rmq-cluster test clusters",
                      default="")
        parser.addini("rmq_isolation", "namespace (shared cluster) or cluster (one per test)",
                      default="")

    def pytest_configure(config: pytest.Config) -> None:
        try:
            settings = resolve_settings(
                {key: config.getoption(f"rmq_{key}") for key in SETTING_SOURCES},
                os.environ,
                {key: str(config.getini(f"rmq_{key}")) for key in SETTING_SOURCES},
            )
        except SettingsError as exc:
            raise pytest.UsageError(f"rmq-cluster: {exc}") from None
        config.stash[_SETTINGS] = settings
        config.stash[_STARTED] = []
        config.stash[_SIGTERM] = _interrupt_on_sigterm()

    def pytest_unconfigure(config: pytest.Config) -> None:
        previous = config.stash.get(_SIGTERM, None)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

    def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
        started = config.stash.get(_STARTED, [])
        for line in started:
            terminalreporter.write_line(f"rmq-cluster: {line}")

    def _settings(config: pytest.Config) -> PluginSettings:
        return config.stash.get(_SETTINGS, PluginSettings())

    def _started(config: pytest.Config, cluster: RunningCluster, scope: str) -> None:
        config.stash.setdefault(_STARTED, []).append(
            f"started {cluster.profile} for the {scope} at {cluster.namesrv_addr} "
            f"in {cluster.ready_s:.1f} s"
        )

    @pytest.fixture
    def rmq_cluster_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        """``factory(profile=<setting>) -> RunningCluster``; every cluster is downed at the
        end of the test."""
        settings = _settings(request.config)
        with contextlib.ExitStack() as stack:
            count = 0

            def start(profile: str | None = None) -> RunningCluster:
                nonlocal count
                count += 1
                where = tmp_path / f"rmq-cluster-{count}"
                cluster = stack.enter_context(rmq_cluster(
                    profile or settings.profile, directory=where,
                    port_range=settings.port_range,
                ))
                _started(request.config, cluster, f"test {request.node.name}")
                return cluster

            yield start

    @pytest.fixture(scope="session")
    def rmq_session_cluster(request: pytest.FixtureRequest,
                            tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
        """One cluster of the configured profile for the whole session (started when a test
        first asks for it)."""
        settings = _settings(request.config)
        where = tmp_path_factory.mktemp("rmq-cluster-session")
        with rmq_cluster(settings.profile, directory=where / "cluster",
                         port_range=settings.port_range) as cluster:
            _started(request.config, cluster, "session")
            yield cluster

    @pytest.fixture
    def rmq(request: pytest.FixtureRequest) -> RmqNamespace:
        """This test's namespace: on the session's cluster, or (``isolation = cluster``) on a
        cluster of its own."""
        settings = _settings(request.config)
        if settings.isolation == ISOLATION_CLUSTER:
            cluster = request.getfixturevalue("rmq_cluster_factory")()
        else:
            cluster = request.getfixturevalue("rmq_session_cluster")
        return RmqNamespace(cluster=cluster)

    @pytest.fixture
    def rmq_seed(rmq: RmqNamespace) -> Callable[..., Seeded]:
        """``rmq_seed({"Orders": [b"m1", "m2"], "Empty": []}, queues=4) -> Seeded``: this
        test's topics created and their messages sent."""
        return rmq.seed
