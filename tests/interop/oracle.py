"""Apache RocketMQ's own Java NameServer and Broker next to ours, as real processes.

``java_classpath()`` resolves the pinned Java nodes with Maven (``java/pom.xml``: 4.9.7;
``java_classpath(apache5=True)``: ``java5/pom.xml``, Apache's 5.3.1 broker; offline once ~/.m2
holds them, from Maven Central on a clean machine). ``running_cluster(kind, root)`` starts one
NameServer and one Broker on free loopback ports inside ``root`` from the same rendered
broker.conf, waits for their boot lines and for the broker's route with a deadline, and always
stops both (by pid) when the block ends, failed or not. ``kind`` is "java" (Apache 4.9.7's
NameServer and Broker), "ours", or "java5": Apache's 5.3.1 Broker beside our NameServer (Maven
Central serves no 5.x NameServer jar; the broker only registers its route there).

Used by the interop tests (tests/interop/conftest.py) and by bench/vs_java.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Final

import attrs

from tests import ports
from tests.cache_lock import exclusive

JAVA_DIR: Final = Path(__file__).parent / "java"
POM: Final = JAVA_DIR / "pom.xml"
JAVA5_DIR: Final = Path(__file__).parent / "java5"
POM5: Final = JAVA5_DIR / "pom.xml"
#: The kinds of cluster ``running_cluster`` starts, and whose broker is a JVM.
KINDS: Final = ("java", "java5", "ours")
JAVA_BROKERS: Final = frozenset({"java", "java5"})
#: ``mvn`` on a clean ~/.m2 downloads ~40 jars; afterwards it resolves offline in seconds.
MAVEN_TIMEOUT_S: Final = 600.0
#: JVMs on 2 shared cores: ~3 s for the NameServer, ~8 s for the Broker (tiered C1 only).
BOOT_TIMEOUT_S: Final = 90.0
STOP_TIMEOUT_S: Final = 15.0
ROUTE_TIMEOUT_S: Final = 30.0
#: A pinned maven-dependency-plugin (the Maven default differs between Maven versions).
_DEP_PLUGIN: Final = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

#: The JVM on a 2-core machine: a small fixed heap, the serial collector (no GC threads racing
#: the broker for the 2 cores), a bounded direct-memory pool for Netty and the mapped files,
#: and the java.nio opens RocketMQ 4.9's mapped-file cleaner reflects into on Java 9+.
JVM_BASE_OPTS: Final = (
    "-server",
    "-Xms256m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:MaxDirectMemorySize=512m",
    "-XX:ActiveProcessorCount=2",
    "-XX:-OmitStackTraceInFastThrow",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    # unmapping a mapped file (a truncated or deleted CommitLog file, recovery) calls
    # jdk.internal.ref.Cleaner reflectively
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
)
#: Tests want a fast boot more than peak speed: C1 only. The benchmark drops this.
JVM_QUICK_OPTS: Final = ("-XX:TieredStopAtLevel=1", "-Xshare:auto")

NAMESRV_BOOT_RE: Final = re.compile(r"The Name Server boot success")
BROKER_BOOT_RE: Final = re.compile(r"The broker\[[^,\]]+, ([^\]]+)\] boot success")

_LOGBACK: Final = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{24}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


class OracleError(RuntimeError):
    """The Java toolchain or a node could not be brought up; the message says why."""


# --------------------------------------------------------------------------- Maven


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise OracleError(
            f"`{name}` is not on PATH: the interop tests run Apache RocketMQ's Java nodes "
            "(install a JDK 11+ and Maven 3; they are fetched from Maven Central by the tests)"
        )
    return path


def _cached_classpath(out: Path, pom: Path) -> str | None:
    """The classpath Maven wrote last time, if written after the pom was last changed and every
    jar it names is still there (``mvn -o`` takes 10-40 s on 2 busy cores to say the same)."""
    try:
        if out.stat().st_mtime < pom.stat().st_mtime:
            return None
        cp = out.read_text().strip()
    except OSError:
        return None
    jars = cp.split(os.pathsep)
    return cp if cp and all(Path(p).is_file() for p in jars) else None


def java_classpath(*, bench: bool = False, apache5: bool = False) -> str:
    """The classpath of the pinned Java nodes (plus RocketMQ's benchmark tools with ``bench``;
    Apache's 5.3.1 broker with ``apache5``), resolved offline when ~/.m2 has them, else fetched
    from Maven Central."""
    _tool("java")
    mvn = _tool("mvn")
    pom = POM5 if apache5 else POM
    name = "classpath-bench" if bench else "classpath"
    out = pom.parent / f"{name}.txt"
    # parallel test workers (pytest -n) resolve one at a time; the others find the cached one
    with exclusive(pom.parent / f"{name}-lock.txt"):
        cached = _cached_classpath(out, pom)
        if cached is not None:
            return cached
        return _resolve_classpath(mvn, pom, out, bench=bench)


def _resolve_classpath(mvn: str, pom: Path, out: Path, *, bench: bool) -> str:
    profile = ["-P", "bench"] if bench else []
    cmd = [
        mvn, "-q", "-B", "-f", str(pom), *profile,
        f"{_DEP_PLUGIN}:build-classpath", f"-Dmdep.outputFile={out}",
    ]
    errors = ""
    for offline in (True, False):
        try:
            done = subprocess.run(
                [*cmd, "-o"] if offline else cmd,
                capture_output=True, text=True, timeout=MAVEN_TIMEOUT_S, check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise OracleError(f"mvn took over {MAVEN_TIMEOUT_S:g}s: {exc}") from None
        if done.returncode == 0 and out.is_file():
            cp = out.read_text().strip()
            missing = [p for p in cp.split(os.pathsep) if not Path(p).is_file()]
            if cp and not missing:
                return cp
            errors = f"classpath names missing jars: {missing[:3]}"
        else:
            errors = (done.stdout + done.stderr)[-3000:]
    raise OracleError(f"mvn could not resolve {pom} (online or offline):\n{errors}")


# --------------------------------------------------------------------------- ports


def _port_free(port: int) -> bool:
    # The Java nodes bind the wildcard address (RocketMQ 4.9 has no bind-address setting), so
    # a port counts as free only when the wildcard bind succeeds.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port of this worker's slice of the test range (tests/ports.py), free on the wildcard."""
    for _ in range(200):
        port = ports.free_port()
        if _port_free(port):
            return port
    raise OracleError("no free port found")


def free_broker_port(taken: set[int] | None = None) -> int:
    """A listenPort whose RocketMQ neighbours (fast port -2, HA port +1) are free too; with
    ``taken``, none of the three is in it, and they are added to it (ports picked now for
    nodes that bind later, e.g. a DLedger group's peers)."""
    for _ in range(200):
        port = free_port()
        triple = {port, port - 2, port + 1}
        if taken is not None and triple & taken:
            continue
        if 1026 < port < 65534 and all(_port_free(p) for p in triple):
            if taken is not None:
                taken.update(triple)
            return port
    raise OracleError("no free broker port triple found")


# --------------------------------------------------------------------------- processes


@attrs.define
class Node:
    """One node process: its stdout/stderr go to ``log``; ``seen`` fires on the boot line."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    boot_re: re.Pattern[str]
    seen: threading.Event = attrs.field(factory=threading.Event)
    match: re.Match[str] | None = None
    #: called by the reader thread with each line it reads (decoded), as it reads it
    on_line: Callable[[str], None] | None = None
    _reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def start_reader(self) -> None:
        def pump(stream: IO[bytes], sink: IO[bytes]) -> None:
            for raw in iter(stream.readline, b""):
                sink.write(raw)
                sink.flush()
                if self.on_line is None and self.seen.is_set():
                    continue
                text = raw.decode("utf-8", "replace")
                if self.on_line is not None:
                    self.on_line(text)
                if not self.seen.is_set():
                    m = self.boot_re.search(text)
                    if m is not None:
                        self.match = m
                        self.seen.set()
            sink.close()

        assert self.proc.stdout is not None
        sink = self.log.open("ab")
        self._reader = threading.Thread(
            target=pump, args=(self.proc.stdout, sink), name=f"log-{self.name}", daemon=True
        )
        self._reader.start()

    def wait_boot(self, timeout: float = BOOT_TIMEOUT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while not self.seen.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
            if self.proc.poll() is not None:
                raise OracleError(
                    f"{self.name} exited with {self.proc.returncode} before booting:\n"
                    f"{self.tail()}"
                )
            if time.monotonic() >= deadline:
                raise OracleError(f"{self.name} did not boot within {timeout:g}s:\n{self.tail()}")
        assert self.match is not None
        return self.match

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL, as ``kill -9``, and reap."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT_S)
        self._join()

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, it answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause``."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it lingers (a paused node resumes)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
                os.kill(self.pid, signal.SIGCONT)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._join()

    def _join(self) -> None:
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT_S)


def spawn(
    name: str, cmd: list[str], cwd: Path, boot_re: re.Pattern[str], env: Mapping[str, str],
    on_line: Callable[[str], None] | None = None,
) -> Node:
    log = cwd / "logs" / f"{name}.out"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    node = Node(name=name, proc=proc, log=log, boot_re=boot_re, on_line=on_line)
    node.start_reader()
    return node


# --------------------------------------------------------------------------- config


def write_properties(path: Path, values: Mapping[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def broker_conf(
    root: Path, listen_port: int, namesrv_addr: str, extra: Mapping[str, object] | None = None
) -> dict[str, object]:
    """The broker.conf both brokers boot from (RocketMQ's key names; our broker reads the same).
    The CommitLog file size is small so a copied store stays cheap; both sides must agree on it
    for the store to be readable across them."""
    store = root / "store"
    conf: dict[str, object] = {
        "brokerClusterName": "InteropCluster",
        "brokerName": "broker-a",
        "brokerId": 0,
        "brokerIP1": "127.0.0.1",
        "listenPort": listen_port,
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog",
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "brokerRole": "ASYNC_MASTER",
        "flushDiskType": "ASYNC_FLUSH",
        "autoCreateTopicEnable": "true",
        "autoCreateSubscriptionGroup": "true",
        "deleteWhen": "04",
        "fileReservedTime": 48,
    }
    conf.update(extra or {})
    return conf


@attrs.define
class Cluster:
    """A running NameServer + Broker."""

    kind: str
    root: Path
    namesrv: Node
    broker: Node
    namesrv_addr: str
    broker_addr: str
    conf: dict[str, object]
    cp: str | None = None
    quick_jvm: bool = True

    @property
    def store_dir(self) -> Path:
        return Path(str(self.conf["storePathRootDir"]))

    def nodes(self) -> list[Node]:
        return [self.broker, self.namesrv]

    def restart_broker(self) -> None:
        """Start the broker again on the same conf and store (after ``broker.kill9()``)."""
        self.broker.stop()
        self.broker = start_broker(self.kind, self.root, self.conf, self.cp, self.quick_jvm)
        self.broker.wait_boot()


def _java_env(root: Path) -> dict[str, str]:
    home = root / "rocketmq-home"
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    for name in ("namesrv", "broker", "tools"):
        log = root / "logs" / f"{name}.log"
        (conf / f"logback_{name}.xml").write_text(_LOGBACK.format(log=log))
    env = dict(os.environ)
    env["ROCKETMQ_HOME"] = str(home)
    env["HOME"] = str(root)
    return env


def _java_cmd(root: Path, cp: str, main: str, conf: Path, quick: bool = True) -> list[str]:
    opts = [*JVM_BASE_OPTS, *(JVM_QUICK_OPTS if quick else ())]
    return [
        _tool("java"), *opts, f"-Duser.home={root}",
        f"-Drocketmq.home.dir={root / 'rocketmq-home'}", "-cp", cp, main, "-c", str(conf),
    ]


def _our_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HOME"] = str(root)
    env.pop("ROCKETMQ_HOME", None)
    return env


def start_broker(
    kind: str, root: Path, conf: Mapping[str, object], cp: str | None = None,
    quick_jvm: bool = True,
) -> Node:
    """A broker of ``kind`` booting from ``conf`` (written to ``root``/conf/broker.conf; its
    output goes to ``root``/logs); the caller waits for its boot and stops it."""
    path = write_properties(root / "conf" / "broker.conf", conf)
    if kind in JAVA_BROKERS:
        assert cp is not None
        cmd = _java_cmd(root, cp, "org.apache.rocketmq.broker.BrokerStartup", path, quick_jvm)
        return spawn(f"{kind}-broker", cmd, root, BROKER_BOOT_RE, _java_env(root))
    cmd = [sys.executable, "-m", "rmq_cluster.broker", "-c", str(path)]
    return spawn(f"{kind}-broker", cmd, root, BROKER_BOOT_RE, _our_env(root))


def stop_nodes(nodes: list[Node]) -> None:
    """Stop every node (in the order given), then report any that could not be stopped."""
    errors = []
    for node in nodes:
        try:
            node.stop()
        except Exception as exc:  # stop the others, then report
            errors.append(f"{node.name}: {exc!r}")
    if errors:
        raise OracleError("could not stop: " + "; ".join(errors))


def start_namesrv(
    kind: str, root: Path, cp: str | None = None, quick_jvm: bool = True
) -> tuple[Node, str]:
    """A NameServer of ``kind`` on a free loopback port under ``root`` (not waited for) and its
    address."""
    ns_port = free_port()
    ns_conf = write_properties(
        root / "conf" / "namesrv.properties",
        {"listenPort": ns_port, "kvConfigPath": root / "namesrv" / "kvConfig.json"},
    )
    if kind == "java":
        assert cp is not None
        ns = spawn(
            "java-namesrv",
            _java_cmd(root, cp, "org.apache.rocketmq.namesrv.NamesrvStartup", ns_conf,
                      quick=quick_jvm),
            root, NAMESRV_BOOT_RE, _java_env(root),
        )
    else:
        ns = spawn(
            "ours-namesrv", [sys.executable, "-m", "rmq_cluster.namesrv", "-c", str(ns_conf)],
            root, NAMESRV_BOOT_RE, _our_env(root),
        )
    return ns, f"127.0.0.1:{ns_port}"


@contextlib.contextmanager
def running_cluster(
    kind: str,
    root: Path,
    *,
    cp: str | None = None,
    broker_extra: Mapping[str, object] | None = None,
    quick_jvm: bool = True,
) -> Iterator[Cluster]:
    """A NameServer and a Broker of ``kind`` (``KINDS``) under ``root``, stopped on exit."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if kind in JAVA_BROKERS and cp is None:
        cp = java_classpath(apache5=kind == "java5")
    root.mkdir(parents=True, exist_ok=True)
    started: list[Node] = []
    cluster: Cluster | None = None
    try:
        ns, namesrv_addr = start_namesrv("ours" if kind == "java5" else kind, root, cp, quick_jvm)
        started.append(ns)
        ns.wait_boot()
        port = free_broker_port()
        # 5.x no longer derives its HA port from listenPort (it binds 10912): name it
        extra = {"haListenPort": port + 1, **(broker_extra or {})}
        conf = broker_conf(root, port, namesrv_addr, extra)
        broker = start_broker(kind, root, conf, cp, quick_jvm)
        started.append(broker)
        m = broker.wait_boot()
        cluster = Cluster(
            kind=kind, root=root, namesrv=ns, broker=broker, namesrv_addr=namesrv_addr,
            broker_addr=m.group(1), conf=conf, cp=cp, quick_jvm=quick_jvm,
        )
        yield cluster
    finally:
        stop_nodes(cluster.nodes() if cluster is not None else started[::-1])
