"""The tools bench/vs_java.py fetches, builds and starts besides the brokers.

* ``bench_client()``: bench/java/BenchClient.java compiled against bench/java/pom.xml's pinned
  classpath (Maven Central once, offline after), cached under ``~/.cache/rmq-cluster-tools/
  bench-client-<hash of the sources>/``; ``grpc_sdk_client()`` the same for bench/grpc_sdk.py's
  bench/java/grpc_sdk/GrpcSdkBench.java (``grpc-sdk-client-<hash>/``);
* ``nats_server()``: nats-server ``NATS_VERSION`` built from the Go module proxy by ``go install``
  into ``~/.cache/rmq-cluster-tools/nats-server-<version>/`` (once);
* ``running_nats(root)``: a JetStream-enabled nats-server on a free loopback port, always stopped;
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import oracle  # tests/interop/oracle.py (bench/vs_java.py puts it on sys.path)

from tests.cache_lock import exclusive

BENCH_JAVA: Final = Path(__file__).resolve().parent / "java"
CACHE: Final = Path.home() / ".cache" / "rmq-cluster-tools"
NATS_VERSION: Final = "v2.10.22"
NATS_MODULE: Final = "github.com/nats-io/nats-server/v2"
NATS_READY_RE: Final = re.compile(r"Server is ready")
BUILD_TIMEOUT_S: Final = 900.0


def _run(cmd: list[str], what: str, **kw: object) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    except subprocess.TimeoutExpired:
        raise oracle.OracleError(f"{what} took over {BUILD_TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        raise oracle.OracleError(f"{what} failed:\n{(done.stdout + done.stderr)[-3000:]}")


def bench_client() -> str:
    """The classpath that runs ``BenchClient`` (its classes first), built on first use."""
    return java_program(BENCH_JAVA / "pom.xml", BENCH_JAVA / "BenchClient.java", "bench-client")


def grpc_sdk_client() -> str:
    """The classpath that runs bench/grpc_sdk.py's ``GrpcSdkBench`` (its classes first)."""
    folder = BENCH_JAVA / "grpc_sdk"
    return java_program(folder / "pom.xml", folder / "GrpcSdkBench.java", "grpc-sdk-client")


def java_program(pom: Path, src: Path, name: str) -> str:
    """``src`` compiled against ``pom``'s pinned classpath into ``CACHE/<name>-<hash>/`` (once
    per version of the two files, one build at a time); the classpath that runs it."""
    digest = hashlib.sha256(pom.read_bytes() + src.read_bytes()).hexdigest()[:16]
    out = CACHE / f"{name}-{digest}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with exclusive(CACHE / f"{name}-lock.txt"):
        cp_file = out / "classpath.txt"
        if not (out / f"{src.stem}.class").is_file() or not cp_file.is_file():
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            cp = oracle._resolve_classpath(oracle._tool("mvn"), pom, tmp / "classpath.txt",
                                           bench=False)
            _run([oracle._tool("javac"), "-nowarn", "-cp", cp, "-d", str(tmp), str(src)],
                 f"javac {src.name}")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
        return f"{out}{os.pathsep}{cp_file.read_text().strip()}"


def nats_server() -> Path:
    """The pinned nats-server binary, built with ``go install`` on first use."""
    out = CACHE / f"nats-server-{NATS_VERSION}"
    binary = out / "nats-server"
    CACHE.mkdir(parents=True, exist_ok=True)
    with exclusive(CACHE / "nats-server-lock.txt"):
        if not binary.is_file():
            env = {**os.environ, "GOBIN": str(out), "GOFLAGS": "-buildvcs=false"}
            _run([oracle._tool("go"), "install", f"{NATS_MODULE}@{NATS_VERSION}"],
                 f"go install nats-server {NATS_VERSION}", env=env)
    return binary


@contextlib.contextmanager
def running_nats(root: Path) -> Iterator[tuple[oracle.Node, str]]:
    """nats-server with JetStream (its store under ``root``) on a free loopback port, and its
    URL; stopped (SIGTERM, then SIGKILL) when the block ends."""
    port = oracle.free_port()
    cmd = [str(nats_server()), "-a", "127.0.0.1", "-p", str(port), "-js",
           "-sd", str(root / "jetstream")]
    node = oracle.spawn("nats-server", cmd, root, NATS_READY_RE, dict(os.environ))
    try:
        node.wait_boot()
        yield node, f"nats://127.0.0.1:{port}"
    finally:
        node.stop()
