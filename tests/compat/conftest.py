"""Compat tests drive our nodes with real third-party RocketMQ 4.x clients.

The Node.js probes use ali-ons (Alibaba's pure-JavaScript 4.x remoting client), installed from
the npm registry on first use into tests/compat/node/node_modules. Without node and npm on the
machine these tests are skipped, saying why.

The C++ probes use Apache's rocketmq-client-cpp 1.0.1 and 2.1.0 as PyPI packages ship them (a
ctypes wrapper plus the prebuilt librocketmq.so, Linux x86-64 only), downloaded from PyPI on
first use into tests/compat/cpp/<version>. Elsewhere, or without the registry, they are skipped,
saying why.
"""

from __future__ import annotations

import hashlib
import io
import platform
import shutil
import subprocess
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.cache_lock import exclusive, inputs_digest, stamp_matches

NODE_DIR = Path(__file__).parent / "node"
CPP_DIR = Path(__file__).parent / "cpp"
#: Apache's C++ client (rocketmq-client-cpp) as PyPI packages ship it: a ctypes wrapper
#: (``rocketmq/client.py``) next to a prebuilt ``librocketmq.so`` for Linux x86-64.
#: version -> (archive URL, sha256): the 0.4.4 wheel of ``rocketmq`` bundles 1.0.1; the
#: ``rocketmq-python-cvs`` 2.1.0.3 sdist bundles 2.1.0.
CPP_CLIENTS = {
    "1.0.1": (
        "https://files.pythonhosted.org/packages/e9/ce/"
        "d7449cc585e506c06553082f715bdc082b37e8804a64203eacfabc5a197c/"
        "rocketmq-0.4.4-py2.py3-none-manylinux1_x86_64.whl",
        "19a10219f5074d1050e88cdbdfed3903a374b3f83c0dd2c8773e1e93e33ad02d",
    ),
    "2.1.0": (
        "https://files.pythonhosted.org/packages/c8/19/"
        "5a8d8a5a259f7cbecc34407ed4f6707858438806c9307bc96e7a8db93b13/"
        "rocketmq-python-cvs-2.1.0.3.tar.gz",
        "99e4ce8008554a74193a3ad94b60f939a4666c48ffabbf4c4417a109daf1419d",
    ),
}
DOWNLOAD_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def node_probes() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the ali-ons compat probes")
    with exclusive(NODE_DIR / "node_modules" / ".install.lock"):
        if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR,
                check=True,
                timeout=600,
                stdin=subprocess.DEVNULL,
            )
    return NODE_DIR


def _fetch_cpp_client(version: str) -> Path:
    """``tests/compat/cpp/<version>`` holding the ``rocketmq`` package, downloaded once (under a
    lock: parallel workers share the one download)."""
    with exclusive(CPP_DIR / f"{version}.lock"):
        return _fetch_cpp_client_unlocked(version)


def _fetch_cpp_client_unlocked(version: str) -> Path:
    url, sha256 = CPP_CLIENTS[version]
    target = CPP_DIR / version
    if (target / "rocketmq" / "librocketmq.so").is_file():
        return target
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise OSError(f"{url}: sha256 mismatch")
    staging = target.with_name(f"{version}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "rocketmq").mkdir(parents=True)
    if url.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            wheel.extractall(staging)
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
            for member in sdist.getmembers():
                parts = Path(member.name).parts
                if len(parts) >= 3 and parts[1] == "rocketmq" and member.isfile():
                    src = sdist.extractfile(member)
                    assert src is not None
                    (staging / "rocketmq" / parts[-1]).write_bytes(src.read())
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


@pytest.fixture(scope="session", params=sorted(CPP_CLIENTS))
def cpp_client(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(version, directory holding the C++ client's ``rocketmq`` package)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the packaged librocketmq.so is built for Linux x86-64 only")
    try:
        return request.param, _fetch_cpp_client(request.param)
    except OSError as exc:
        pytest.skip(f"could not fetch the C++ client {request.param} from PyPI: {exc}")


# --------------------------------------------------------------------------- Apache Java client

JAVA_DIR = Path(__file__).parent / "java"
#: Apache's Java client, admin ext and mqadmin (rocketmq-client/-acl/-tools), unmodified, from
#: Maven Central: the newest 4.9.x and a 5.x release that still speaks remoting.
JAVA_CLIENTS = ("4.9.8", "5.3.1")
MAVEN_TIMEOUT_S = 1200
#: JVM options for short-lived probes: C1 only and a small heap start faster on 2 cores.
JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xss512k", "-Xmx384m")


def _java_tools() -> tuple[str, str]:
    java, mvn = shutil.which("java"), shutil.which("mvn")
    if not java or not mvn:
        pytest.fail(
            "the Java compat tests need a JDK (java, 11+) and Maven (mvn) on PATH; "
            f"found java={java}, mvn={mvn}",
            pytrace=False,
        )
    return java, mvn


def _classpath_cached(cp_file: Path) -> bool:
    if not cp_file.is_file():
        return False
    jars = [j for j in cp_file.read_text().strip().split(":") if j]
    return bool(jars) and all(Path(j).is_file() for j in jars)


def _maven_build(mvn: str, directory: Path, goals: list[str], cp_file: Path, what: str) -> None:
    """Run Maven in ``directory``: offline first when ``cp_file`` names jars all in ~/.m2."""
    attempts = [["-o", *goals], goals] if _classpath_cached(cp_file) else [goals]
    done = None
    for args in attempts:
        done = subprocess.run(
            [mvn, *args], cwd=directory, capture_output=True, text=True,
            timeout=MAVEN_TIMEOUT_S, stdin=subprocess.DEVNULL,
        )
        if done.returncode == 0:
            break
    assert done is not None
    if done.returncode != 0:
        pytest.fail(f"building {what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                    pytrace=False)


def _fresh_maven_build(mvn: str, directory: Path, target: Path, goals: list[str],
                       what: str, extra: str = "") -> str:
    """The class path of ``directory``'s Maven project built into ``target``: built once per
    change of its pom.xml and sources (a stamp in ``target``), under a lock, so parallel test
    workers and later fixtures of the same session reuse one build."""
    cp_file = target / "classpath.txt"
    stamp = target / "inputs.sha256"
    digest = inputs_digest(directory / "pom.xml", directory / "src", extra=extra)
    with exclusive(target / ".build.lock"):
        fresh = (stamp_matches(stamp, digest) and _classpath_cached(cp_file)
                 and (target / "classes").is_dir())
        if not fresh:
            stamp.unlink(missing_ok=True)
            _maven_build(mvn, directory, goals, cp_file, what)
            stamp.write_text(digest)
        return f"{target / 'classes'}:{cp_file.read_text().strip()}"


def build_java_probes(version: str, directory: Path = JAVA_DIR) -> str:
    """Build tests/compat/java (or another probe project) against rocketmq ``version`` into
    ``target-<version>`` and return the class path (probes + the client's jars). Maven runs
    offline once ``~/.m2`` holds everything the last build listed, and not at all while the
    last build is fresh (same pom.xml, sources and version)."""
    _java, mvn = _java_tools()
    target = directory / f"target-{version}"
    goals = [
        "-B", "-q", f"-Drocketmq.version={version}", "package", "dependency:build-classpath",
        f"-Dmdep.outputFile={target / 'classpath.txt'}",
    ]
    return _fresh_maven_build(mvn, directory, target, goals,
                              f"the Java probes against rocketmq {version}", extra=version)


@pytest.fixture(scope="session", params=JAVA_CLIENTS)
def java_client(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(rocketmq version, class path of the Scenarios runner and the unmodified client)."""
    return request.param, build_java_probes(request.param)


@pytest.fixture(scope="session")
def mqadmin_classpath() -> str:
    """Class path of rocketmq-tools 4.9.8 (``MQAdminStartup``, the real mqadmin)."""
    return build_java_probes(JAVA_CLIENTS[0])


@pytest.fixture(scope="session", params=JAVA_CLIENTS)
def mqadmin_tools(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(version, class path) of each pinned rocketmq-tools: 4.9.8 and 5.3.1's mqadmin."""
    return request.param, build_java_probes(request.param)


# --------------------------------------------------------------------------- Apache Go client

GO_DIR = Path(__file__).parent / "go"
#: Apache's Go client as go.mod pins it (rocketmq-client-go v2, unmodified, from the Go module
#: proxy; modules cached in the default GOMODCACHE).
GO_CLIENT = "2.1.2"
GO_BUILD_TIMEOUT_S = 900
COMPAT_CACHE = Path.home() / ".cache" / "rmq-cluster-compat"


def _go_sources_hash() -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update(name.encode() + b"\0" + (GO_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def go_probe() -> Path:
    """The Go scenario runner built against the pinned client, into
    ``~/.cache/rmq-cluster-compat/go-<hash of its sources>/probe`` (built again only when its
    sources change)."""
    go = shutil.which("go")
    if not go:
        pytest.fail("the Go compat tests need a Go toolchain (go, 1.21+) on PATH", pytrace=False)
    target = COMPAT_CACHE / f"go-{_go_sources_hash()}"
    with exclusive(target / ".build.lock"):
        return _build_go_probe(go, target)


def _build_go_probe(go: str, target: Path) -> Path:
    probe = target / "probe"
    if probe.is_file():
        return probe
    partial = target / "probe.partial"
    done = subprocess.run(
        [go, "build", "-mod=mod", "-trimpath", "-o", str(partial), "."], cwd=GO_DIR,
        capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        pytest.fail(f"building the Go probe against rocketmq-client-go {GO_CLIENT} failed:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}", pytrace=False)
    partial.rename(probe)
    return probe


# --------------------------------------------------------------------------- Spring Boot starter

SPRING_DIR = Path(__file__).parent / "spring"
#: rocketmq-spring-boot-starter (brings rocketmq-client 5.3.2) on Spring Boot 3.5.7, Java 17.
SPRING_STARTER = "2.3.4"
SPRING_BOOT = "3.5.7"


@pytest.fixture(scope="session")
def spring_classpath() -> str:
    """Class path of the Spring probe app (its classes + Spring Boot + the starter), built with
    Maven into tests/compat/spring/target; offline once ``~/.m2`` holds the last build's jars."""
    _java, mvn = _java_tools()
    target = SPRING_DIR / "target"
    goals = ["-B", "-q", "package", "dependency:build-classpath",
             f"-Dmdep.outputFile={target / 'classpath.txt'}"]
    return _fresh_maven_build(mvn, SPRING_DIR, target, goals,
                              f"the Spring probe (starter {SPRING_STARTER})")
