"""mqadmin 4.9.8 and 5.3.1 (Apache's rocketmq-tools, unmodified) against Apache RocketMQ
4.9.7's own NameServer and Broker and against ours, booted from the same broker.conf
(tests/interop/oracle.py): the commands that print what the broker answers by key
(``clusterList``, ``brokerStatus``, ``getBrokerConfig``, ``brokerConsumeStats``) print every row
and column Apache's broker gives them, on ours too, and ``null`` on neither. Our extension keys
add rows; none is missing. (A 5.x broker is not booted here: its JVM alone takes longer than
this whole test on the 2-core machine; the 5.x tools are checked against 4.9.7, which they
support.)"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop import oracle

from .test_mqadmin import FAILED, NULL, OWN_NULL, jvm

pytestmark = pytest.mark.slow

CLUSTER = "InteropCluster"


def _run(classpath: str, home: Path, ns: str, broker: str) -> dict[str, str]:
    commands = {
        "clusterList": ["clusterList", "-n", ns],
        "brokerStatus": ["brokerStatus", "-n", ns, "-b", broker],
        "getBrokerConfig": ["getBrokerConfig", "-n", ns, "-b", broker],
        "brokerConsumeStats": ["brokerConsumeStats", "-n", ns, "-b", broker],
    }
    script = "".join("\t".join(args) + "\n" for args in commands.values())
    done = subprocess.run(jvm(classpath, home, "AdminBatch"), input=script,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    sections = dict(re.findall(r"@@BEGIN (\d+)\n(.*?)@@END \1\n", done.stdout, re.S))
    names = list(commands)
    return {names[int(i)]: text for i, text in sections.items()}


@pytest.fixture(scope="module")
def outputs(mqadmin_tools: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, dict[str, str]]]:
    version, classpath = mqadmin_tools
    root = tmp_path_factory.mktemp(f"mqadmin-vs-{version}")
    try:
        java_cp = oracle.java_classpath()
    except oracle.OracleError as exc:
        pytest.fail(f"Apache RocketMQ's Java nodes are not available: {exc}", pytrace=False)
    out: dict[str, dict[str, str]] = {}
    for kind in ("java", "ours"):
        cp = java_cp if kind == "java" else None
        with oracle.running_cluster(kind, root / kind, cp=cp) as cluster:
            out[kind] = _run(classpath, root / f"home-{kind}", cluster.namesrv_addr,
                             cluster.broker_addr)
    yield out


def _keys(text: str, sep: str) -> set[str]:
    return {ln.split(sep, 1)[0].strip() for ln in text.splitlines() if sep in ln}


def test_every_command_prints_what_apache_does_and_no_null(
    outputs: dict[str, dict[str, str]]
) -> None:
    java, ours = outputs["java"], outputs["ours"]
    for name in java:
        for kind, text in (("java", java[name]), ("ours", ours[name])):
            assert not FAILED.search(text), (kind, name, text[-2000:])
            nulls = [ln for ln in text.splitlines() if NULL.search(ln) and not OWN_NULL.search(ln)]
            assert not nulls, (kind, name, nulls[:5])
    # brokerStatus: "key : value" rows; getBrokerConfig: "key = value" rows
    assert _keys(java["brokerStatus"], " : ") - _keys(ours["brokerStatus"], " : ") == set()
    assert _keys(java["getBrokerConfig"], "=") - _keys(ours["getBrokerConfig"], "=") == set()
    # clusterList: the same header, and a row per broker with as many columns
    head = re.compile(r"^#.*$", re.M)
    assert head.findall(java["clusterList"]) == head.findall(ours["clusterList"])
    rows = {k: [ln.split() for ln in v["clusterList"].splitlines() if ln.startswith(CLUSTER)]
            for k, v in outputs.items()}
    assert [len(r) for r in rows["java"]] == [len(r) for r in rows["ours"]] == [len(
        rows["java"][0])]
    assert rows["java"][0][:3] == rows["ours"][0][:3]  # cluster, broker name, id
    assert head.findall(java["brokerConsumeStats"]) == head.findall(ours["brokerConsumeStats"])
