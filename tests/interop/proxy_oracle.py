"""Apache RocketMQ 5.3.1's own Proxy (gRPC, cluster mode), built from the release and run as a
process beside ``oracle.running_cluster("java5", ...)`` (Apache's broker, our NameServer).

Maven Central serves no ``rocketmq-proxy`` jar (nor a 5.x ``rocketmq-namesrv``), but it serves
the release's source archive, ``org.apache.rocketmq:rocketmq-all:5.3.1:zip:source-release``.
``proxy_classpath()`` resolves the proxy module's dependencies (``java5proxy/pom.xml``, versions
from the release's parent pom), copies the archive with Maven, compiles its ``proxy/`` sources
with ``javac`` into ``java5proxy/build/`` and reuses that build while the pom is unchanged (one
build at a time across pytest workers). ``running_apache_proxy`` starts it on free loopback
ports (gRPC, and the remoting port it also opens), waits for its boot line with a deadline and
always stops it.

Used by tests/interop/test_proxy_differential.py and bench/grpc_sdk.py.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import attrs

from tests.cache_lock import exclusive
from tests.interop import oracle

PROXY_DIR: Final = Path(__file__).parent / "java5proxy"
POM: Final = PROXY_DIR / "pom.xml"
BUILD: Final = PROXY_DIR / "build"
VERSION: Final = "5.3.1"
SOURCE_ARTIFACT: Final = f"org.apache.rocketmq:rocketmq-all:{VERSION}:zip:source-release"
#: javac over ~160 files on 2 loaded cores: about a minute, once
COMPILE_TIMEOUT_S: Final = 600.0
BOOT_RE: Final = re.compile(r"rocketmq-proxy startup successfully")
MAIN: Final = "org.apache.rocketmq.proxy.ProxyStartup"


def _mvn(*args: str) -> None:
    mvn = oracle._tool("mvn")
    errors = ""
    for offline in (True, False):
        cmd = [mvn, "-q", "-B", "-f", str(POM), *args, *(["-o"] if offline else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=oracle.MAVEN_TIMEOUT_S, check=False)
        if done.returncode == 0:
            return
        errors = (done.stdout + done.stderr)[-3000:]
    raise oracle.OracleError(f"mvn {' '.join(args)} failed (online and offline):\n{errors}")


def _build(dep_cp: str) -> None:
    """Copy the release's source archive, extract ``proxy/src/main`` and compile it."""
    shutil.rmtree(BUILD, ignore_errors=True)
    BUILD.mkdir(parents=True)
    _mvn(f"{oracle._DEP_PLUGIN}:copy", f"-Dartifact={SOURCE_ARTIFACT}",
         f"-DoutputDirectory={BUILD}", "-Dmdep.useBaseVersion=true")
    [archive] = BUILD.glob("rocketmq-all-*-source-release.zip")
    prefix = f"rocketmq-all-{VERSION}/proxy/src/main/"
    src = BUILD / "src"
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                zf.extract(name, src)
    main = src / prefix
    sources = sorted(str(p) for p in (main / "java").rglob("*.java"))
    (BUILD / "sources.txt").write_text("\n".join(sources) + "\n")
    classes = BUILD / "classes"
    classes.mkdir()
    done = subprocess.run(
        [oracle._tool("javac"), "-nowarn", "-encoding", "UTF-8", "--release", "8", "-proc:none",
         "-d", str(classes), "-cp", dep_cp, f"@{BUILD / 'sources.txt'}"],
        capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, stdin=subprocess.DEVNULL,
        check=False,
    )
    if done.returncode != 0:
        raise oracle.OracleError(f"javac of Apache's proxy failed:\n{done.stderr[-3000:]}")
    for res in (main / "resources").rglob("*"):
        if res.is_file():
            shutil.copy(res, classes / res.name)
    archive.unlink()


def proxy_classpath() -> str:
    """The classpath of Apache's compiled 5.3.1 proxy and its dependencies (built once)."""
    oracle._tool("java")
    oracle._tool("javac")
    PROXY_DIR.mkdir(exist_ok=True)
    marker = BUILD / "built.txt"
    out = PROXY_DIR / "classpath.txt"
    with exclusive(PROXY_DIR / "classpath-lock.txt"):
        dep_cp = oracle._cached_classpath(out, POM)
        if dep_cp is None:
            dep_cp = oracle._resolve_classpath(oracle._tool("mvn"), POM, out, bench=False)
        if not marker.is_file() or marker.stat().st_mtime < POM.stat().st_mtime:
            _build(dep_cp)
            marker.write_text(VERSION)
        return f"{BUILD / 'classes'}:{dep_cp}"


@attrs.frozen
class ApacheProxy:
    node: oracle.Node
    grpc_port: int
    remoting_port: int

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


@contextlib.contextmanager
def running_apache_proxy(
    root: Path, namesrv_addr: str, cluster_name: str, *, cp: str | None = None,
    quick_jvm: bool = True, extra: dict[str, object] | None = None,
) -> Iterator[ApacheProxy]:
    """Apache's proxy in cluster mode for ``cluster_name`` behind ``namesrv_addr``, plain-text
    gRPC (its default TLS test mode also accepts plain text) on a free loopback port; stopped on
    exit, failed or not."""
    cp = cp or proxy_classpath()
    root.mkdir(parents=True, exist_ok=True)
    grpc_port, remoting_port = oracle.free_port(), oracle.free_port()
    conf = {
        "rocketMQClusterName": cluster_name, "namesrvAddr": namesrv_addr,
        "grpcServerPort": grpc_port, "remotingListenPort": remoting_port,
        "proxyMode": "cluster", "enablePrintJstack": False, **(extra or {}),
    }
    conf_path = root / "conf" / "rmq-proxy.json"
    conf_path.parent.mkdir(parents=True, exist_ok=True)
    conf_path.write_text(json.dumps(conf))
    env = oracle._java_env(root)
    opts = [*oracle.JVM_BASE_OPTS, *(oracle.JVM_QUICK_OPTS if quick_jvm else ())]
    cmd = [oracle._tool("java"), *opts, f"-Duser.home={root}", "-cp", cp, MAIN,
           "-pc", str(conf_path), "-pm", "cluster"]
    node = oracle.spawn("apache-proxy", cmd, root, BOOT_RE, env)
    try:
        node.wait_boot()
        yield ApacheProxy(node, grpc_port, remoting_port)
    finally:
        oracle.stop_nodes([node])
