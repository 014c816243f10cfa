"""The suite runs on several pytest-xdist workers: what keeps them apart is checked here.

Each worker plans its test clusters in its own slice of the test port range, and a build or
download the tests share (Maven probe builds, Apache's nodes' class path) runs once under a lock
for all workers, again only when its inputs change.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from rmq_cluster.deploy import supervisor
from rmq_cluster.deploy.topology import (
    BUILTIN_PROFILES,
    METRICS_PORT_AUTO,
    build_topology,
    plan_span,
    resolve_profile,
)
from tests import ports
from tests.cache_lock import exclusive, inputs_digest, stamp_matches
from tests.compat.conftest import _fresh_maven_build
from tests.conftest import WORKER_PORTS, _worker_slice
from tests.suite_scheduling import ALONE_MODULES, suite_scope
from tests.unit.parallel_build_child import build_in_worker, maven_goals

WORKERS = 4
#: A stand-in for mvn: counts its runs, then writes what a probe build leaves behind.
FAKE_MVN = """#!{python}
import pathlib, sys
here = pathlib.Path.cwd()
with open(here / "runs.log", "a") as log:
    log.write("start\\n")
    log.flush()
    target = here / "target"
    (target / "classes").mkdir(parents=True, exist_ok=True)
    jar = here / "dep.jar"
    jar.write_text("jar")
    out = next(a for a in sys.argv if a.startswith("-Dmdep.outputFile="))
    pathlib.Path(out.split("=", 1)[1]).write_text(str(jar))
    log.write("end\\n")
"""


@pytest.mark.parametrize("count", [2, 3, 4])
def test_worker_port_slices_are_disjoint_and_hold_every_profile(count: int) -> None:
    slices = []
    for i in range(count):
        low, _, high = _worker_slice(f"gw{i}", count).partition("-")
        slices.append((int(low), int(high)))
    widest = max(plan_span(spec) for spec in BUILTIN_PROFILES.values())
    for (low, high), nxt in zip(slices, [*slices[1:], None], strict=True):
        assert WORKER_PORTS[0] <= low < high <= WORKER_PORTS[1]
        assert high - low > 4 * widest  # room for several plans, not just one
        if nxt is not None:
            assert high <= nxt[0]


def test_free_base_port_stays_in_the_workers_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(supervisor.TEST_PORTS_ENV, "20000-22500")
    spec = resolve_profile("2m-2s-async")
    assert supervisor.ports_for_tests() == (20000, 22500)
    for _ in range(50):
        base = supervisor.free_base_port(spec)
        assert base >= 20000 and base + plan_span(spec) < 22500
    # explicit bounds still win; a malformed variable leaves the default range
    assert 12000 <= supervisor.free_base_port(spec, low=12000, high=14500) < 14500
    monkeypatch.setenv(supervisor.TEST_PORTS_ENV, "9-5")
    assert supervisor.ports_for_tests() == (supervisor.TEST_PORT_LOW, supervisor.TEST_PORT_HIGH)


def test_free_base_port_probes_the_metrics_ports_of_up_metrics() -> None:
    """``up --metrics`` binds /metrics beside each node (a NameServer's listen port + 100): a
    base whose metrics port is taken is not free, whether or not the spec asks for metrics."""
    spec = resolve_profile("single")
    low = supervisor.free_base_port(spec)  # free now, metrics ports included
    only = {"low": low, "high": low + plan_span(spec) + 1}  # a range of one base: ``low``
    assert supervisor.free_base_port(spec, **only) == low
    metrics = build_topology(attrs.evolve(
        spec, namesrv_properties={"metricsPort": METRICS_PORT_AUTO}), base_port=low)
    (namesrv,) = metrics.namesrvs
    port = metrics.bind_ports(namesrv)["metricsPort"]
    assert port == namesrv.port + 100 and (port, "namesrv-0 metricsPort") in metrics.ports()
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        with pytest.raises(supervisor.SupervisorError):
            supervisor.free_base_port(spec, **only)


def _fake_project(tmp: Path) -> tuple[Path, str]:
    project = tmp / "probe"
    (project / "src").mkdir(parents=True)
    (project / "pom.xml").write_text("<project/>")
    (project / "src" / "A.java").write_text("class A {}")
    mvn = tmp / "mvn"
    mvn.write_text(FAKE_MVN.format(python=sys.executable))
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    return project, str(mvn)


def test_a_probe_build_runs_once_for_all_workers_and_again_on_a_change(tmp_path: Path) -> None:
    project, mvn = _fake_project(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(WORKERS)
    outs = [tmp_path / f"cp-{i}" for i in range(WORKERS)]
    procs = [ctx.Process(target=build_in_worker, args=(str(project), mvn, ready, str(out)))
             for out in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [proc.exitcode for proc in procs] == [0] * WORKERS
    paths = [out.read_text() for out in outs]
    runs = (project / "runs.log").read_text().split()
    assert runs == ["start", "end"]  # one build, not interleaved with another
    assert len(set(paths)) == 1 and paths[0].endswith(str(project / "dep.jar"))
    _fresh_maven_build(mvn, project, project / "target", maven_goals(project), "the fake probe")
    assert (project / "runs.log").read_text().split() == ["start", "end"]  # still fresh
    (project / "src" / "A.java").write_text("class A { int x; }")
    _fresh_maven_build(mvn, project, project / "target", maven_goals(project), "the fake probe")
    assert (project / "runs.log").read_text().split() == ["start", "end"] * 2
    os.unlink(project / "dep.jar")  # a jar gone from ~/.m2: built again
    _fresh_maven_build(mvn, project, project / "target", maven_goals(project), "the fake probe")
    assert (project / "runs.log").read_text().split() == ["start", "end"] * 3


def test_stamp_and_lock(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_text("1")
    first = inputs_digest(src, extra="4.9.8")
    assert first != inputs_digest(src, extra="5.3.1")
    (src / "a").write_text("2")
    assert first != inputs_digest(src, extra="4.9.8")
    assert not stamp_matches(tmp_path / "missing", first)
    with exclusive(tmp_path / "deep" / "x.lock"):
        assert (tmp_path / "deep" / "x.lock").exists()


def test_work_goes_out_by_module_and_shared_session_directory() -> None:
    assert suite_scope("tests/spark/test_exact.py::test_a[x]") == "tests/spark"
    assert suite_scope("tests/spark/sub/test_b.py::T::test_b") == "tests/spark"
    assert suite_scope("tests/interop/test_differential.py::test_step[ns]") == "tests/interop"
    one = "tests/compat/test_java_client.py"
    assert suite_scope(f"{one}::test_a[4.9.8]") == suite_scope(f"{one}::test_b") == one
    assert suite_scope("tests/unit/test_cli.py::test_c") == "tests/unit/test_cli.py"
    # an alone module in a shared-session directory is its own unit
    alone = "tests/interop/test_proxy_differential.py"
    assert alone in ALONE_MODULES and suite_scope(f"{alone}::test_x[y]") == alone


#: A project run with -n 3 under our scheduler: ``test_alone.py`` is one of its alone modules.
ALONE_CONFTEST = """
import pytest
from tests.suite_scheduling import SuiteScopes

class Scopes(SuiteScopes):
    alone_modules = frozenset({"test_alone.py"})

@pytest.hookimpl
def pytest_xdist_make_scheduler(config, log):
    return Scopes(config, log)
"""
#: Each test stands for a test of ``busy_s`` (long enough for neighbours to overlap) and
#: writes its worker and its window.
RECORDING_TESTS = """
import os, time, pytest

@pytest.mark.parametrize("i", range({n}))
def test_t(i):
    start = time.time()
    time.sleep({busy_s})
    with open({out!r}, "a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}} {{start}} {{time.time()}}\\n")
"""


def _run_xdist(project: Path, workers: int, *args: str) -> list[tuple[str, str, float, float]]:
    out = project / "windows.txt"
    out.unlink(missing_ok=True)
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", str(workers), "-q", "-p", "no:cacheprovider",
         "--rootdir", str(project), *args],
        cwd=project, env={**os.environ, "PYTHONPATH": str(repo)}, capture_output=True,
        text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in out.read_text().splitlines()]
    return [(name, worker, float(a), float(b)) for name, worker, a, b in rows]


def test_alone_modules_run_last_on_one_worker_with_no_neighbours(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(ALONE_CONFTEST)
    out = str(tmp_path / "windows.txt")
    for name, n in [("test_a", 4), ("test_b", 4), ("test_c", 4), ("test_d", 2),
                    ("test_alone", 3)]:
        (tmp_path / f"{name}.py").write_text(RECORDING_TESTS.format(n=n, busy_s=0.2, out=out))
    windows = _run_xdist(tmp_path, 3)
    assert len(windows) == 17  # every test ran once
    alone = [w for w in windows if w[0] == "test_alone"]
    others = [w for w in windows if w[0] != "test_alone"]
    assert len(alone) == 3 and len({w[1] for w in alone}) == 1
    assert len({w[1] for w in others}) > 1  # the rest was shared out
    assert min(w[2] for w in alone) >= max(w[3] for w in others)  # after all of it, alone
    # selected on its own, an alone module still runs (one worker, the others shut down)
    assert len(_run_xdist(tmp_path, 2, "test_alone.py")) == 3


def test_alone_modules_exist() -> None:
    repo = Path(__file__).resolve().parents[2]
    assert all((repo / module).is_file() for module in ALONE_MODULES), ALONE_MODULES


def test_ports_a_test_picks_itself_stay_in_the_workers_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node a test starts by itself gets a port of the worker's slice (below the ephemeral
    range), with its RocketMQ neighbours free, never one already taken."""
    monkeypatch.setenv(supervisor.TEST_PORTS_ENV, "20000-20400")
    taken: set[int] = set()
    for _ in range(20):
        port = ports.free_port(neighbours=(-2, 1), taken=taken)
        assert port - 2 >= 20000 and port + 1 < 20400
        assert {port - 2, port, port + 1} <= taken
    assert len(taken) == 60  # twenty groups of three, none overlapping
    many = ports.free_ports(10)
    assert len(set(many)) == 10 and all(20000 <= p < 20400 for p in many)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        monkeypatch.setenv(supervisor.TEST_PORTS_ENV, f"{held.getsockname()[1]}-"
                                                       f"{held.getsockname()[1] + 1}")
        with pytest.raises(RuntimeError):
            ports.free_port()  # the only port of the range is held


def _binds_port_zero(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "bind" and node.args
                and isinstance(node.args[0], ast.Tuple) and len(node.args[0].elts) == 2):
            port = node.args[0].elts[1]
            if isinstance(port, ast.Constant) and port.value == 0:
                return True
    return False


def test_no_port_picker_asks_the_kernel_for_a_port_to_hand_on() -> None:
    """A helper of tests/ or bench/ that picks a port for a node (a function with "port" in
    its name, not a test: a test may bind 0 for a socket it keeps) takes it from tests/ports.py,
    never from a bind to port 0 released at once: the kernel's port lies in the ephemeral
    range, where an outgoing connection may take it before the node binds it."""
    repo = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted([*(repo / "tests").rglob("*.py"), *(repo / "bench").glob("*.py")]):
        text = path.read_text()
        if ", 0))" not in text:  # (no bind to port 0 here: skip the parse)
            continue
        for fn in ast.walk(ast.parse(text, str(path))):
            if (isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
                    and "port" in fn.name.lower() and not fn.name.startswith("test_")
                    and _binds_port_zero(fn)):
                found.append(f"{path.relative_to(repo)}:{fn.lineno} {fn.name}")
    assert not found, found
