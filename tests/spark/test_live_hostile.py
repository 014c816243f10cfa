"""``replica-diff --live`` against hostile brokers (issue 31 item 9): fake brokers on real
sockets, the CLI in its own process.  Whatever a broker does (drip bytes, send bad frames or
lie about its offset), the audit ends within its ``--node-timeout``, calls the group
unverifiable (exit 2) with the reason per node, and never shows a traceback; honest brokers
of identical stores still give exit 0."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.cluster.remoting.codec import RemotingCommand, encode
from rmq_cluster.spark_jobs.model import MAX_NODE_TIMEOUT_S
from tests.spark import hostile_brokers as hb

NODE_TIMEOUT_S = 2.0
#: Python's and PySpark's start on a loaded 2-core machine, on top of the node timeout.
SLACK_S = 30.0


def audit(directory: Path, *extra: str, timeout: float = NODE_TIMEOUT_S) -> dict[str, Any]:
    args = [sys.executable, "-m", "rmq_cluster.spark_jobs.replica_diff", "--dir", str(directory),
            "--live", "--json", "--node-timeout", str(timeout), *extra]  # fmt: skip
    t0 = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout * 2 + SLACK_S,
                       check=False)  # fmt: skip
    elapsed = time.monotonic() - t0
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    summary = json.loads(lines[0]) if len(lines) == 1 else None  # JSON lines: one summary
    return {"code": p.returncode, "summary": summary, "stderr": p.stderr, "elapsed": elapsed}


def _frame_with_header(header: bytes) -> bytes:
    return struct.pack(">II", 4 + len(header), len(header)) + header


HOSTILE = {
    "drip": (hb.drip, f"no answer within {NODE_TIMEOUT_S:g} s"),
    "silent": (hb.silent, f"no answer within {NODE_TIMEOUT_S:g} s"),
    "four zero bytes": (hb.raw(b"\0\0\0\0"), "bad frame: 'frame length 0 is shorter"),
    "oversized length": (hb.raw(struct.pack(">I", 0x7FFFFFF0)), "bad frame: 'frame of"),
    "over the answer bound": (hb.raw(struct.pack(">I", 2 << 20)), "1048576-byte limit"),
    "truncated then closed": (hb.raw(struct.pack(">I", 100) + b"\0\0", hold=False),
                              "closed the connection before answering (6 bytes of a frame)"),
    "garbage header": (hb.raw(_frame_with_header(b"{not json")), "bad frame: 'header is not"),
    "unknown serialize type": (hb.raw(struct.pack(">II", 4, 7 << 24)), "unknown serialize"),
    "flood of other answers": (hb.flood, "without answering"),
    "error code": (hb.answer({}, 1, "no\n" * 5000), "answered code 1 'no\\nno"),
    "bad body": (hb.raw(encode(RemotingCommand(0, opaque=1, flag=1, body=b"\xff{"))),
                 "bad runtime-info body"),
    "no offset": (hb.answer({"brokerVersion": "x"}), "gave no commitLogMaxOffset"),
    "negative offset": (hb.offset(-1), "bad commitLogMaxOffset '-1'"),
    "float offset": (hb.offset("1e9"), "bad commitLogMaxOffset '1e9'"),
    "offset past a long": (hb.offset("9" * 30), "bad commitLogMaxOffset"),
    "offset past its files": (hb.offset(1 << 40), "beyond the 65536 bytes its store's files"),
    "refused": (None, "connection failed"),
}


def _reason(out: dict[str, Any], group: str) -> str:
    assert out["summary"] is not None, (out["code"], out["stderr"])
    return str(out["summary"]["unverifiable"].get(group, ""))


def _consistent(out: dict[str, Any], group: str, end: int) -> None:
    g = out["summary"]["groups"][group]
    assert g["compared_bytes"] == end
    assert {r["verdict"] for r in g["replicas"].values()} == {"consistent"}


def test_hostile_brokers_make_their_groups_unverifiable(tmp_path: Path) -> None:
    """One audit of a cluster with one group per hostile behaviour (its slave) beside an
    honest group: every hostile group is unverifiable with its reason, the honest one is
    audited, all within the node timeout."""
    cases = sorted(HOSTILE)
    slaves = {f"g{i}-s": HOSTILE[case][0] for i, case in enumerate(cases)}
    with hb.cluster_dir(tmp_path, {**slaves, "honest": hb.honest}) as c:
        out = audit(c["dir"])
    assert out["code"] == 2 and out["summary"]["verdict"] == "unverifiable", out
    for i, case in enumerate(cases):
        why = _reason(out, f"g{i}")
        assert why.startswith(f"g{i}-s at 127.0.0.1:") and HOSTILE[case][1] in why, (case, why)
        assert "\n" not in why and len(why) < 400, (case, why)
        assert out["summary"]["live"]["nodes"][f"g{i}-s"]["error"] in why
        assert f"g{i}" not in out["summary"]["groups"]  # nothing of it was audited
    assert set(out["summary"]["groups"]) == {"honest", "broker-a"}
    _consistent(out, "honest", c["end"])
    assert out["elapsed"] < NODE_TIMEOUT_S + SLACK_S


@pytest.mark.parametrize("claim", [0, 100])
def test_nothing_compared_is_unverifiable(tmp_path: Path, claim: int) -> None:
    """A broker reporting an offset below the group's first complete record: 0 bytes compared,
    so no verdict (main called that group consistent)."""
    with hb.cluster_dir(tmp_path, {"broker-a-s": hb.offset(claim)}) as c:
        out = audit(c["dir"])
    assert out["code"] == 2 and out["summary"]["verdict"] == "unverifiable", out
    assert _reason(out, "broker-a").startswith(f"0 bytes compared: its confirmed offset {claim}")
    g = out["summary"]["groups"]["broker-a"]
    assert g["compared_bytes"] == 0
    assert {r["verdict"] for r in g["replicas"].values()} == {"unverifiable"}


@pytest.mark.parametrize(("later", "reason"), [
    (hb.offset(10), "commitLogMaxOffset went back from"),
    (hb.drip, f"after the audit: no answer within {NODE_TIMEOUT_S:g} s"),
])  # fmt: skip
def test_a_broker_that_changes_its_story_is_caught(tmp_path: Path, later: Any,
                                                   reason: str) -> None:  # fmt: skip
    """Honest when asked for the limit, then lower (or gone bad) when asked again after the
    audit: the bytes compared may have changed under the audit."""
    with hb.cluster_dir(tmp_path, {"broker-a-s": hb.first_then(hb.honest, later)}
                        ) as c:  # fmt: skip
        out = audit(c["dir"])
    assert out["code"] == 2, out
    assert reason in _reason(out, "broker-a")


def test_honest_brokers_are_consistent(tmp_path: Path) -> None:
    with hb.cluster_dir(tmp_path, {"broker-b": hb.honest}) as c:
        out = audit(c["dir"])
    assert out["code"] == 0 and out["summary"]["verdict"] == "consistent", out
    assert out["summary"]["unverifiable"] == {}
    for g in ("broker-a", "broker-b"):
        _consistent(out, g, c["end"])


def test_every_group_unverifiable_in_text(tmp_path: Path) -> None:
    """Nothing left to audit: no Spark, a line per group on stdout, exit 2 (through
    ``rmq-cluster replica-diff``); the report names the reasons, a broker's words escaped."""
    bad = hb.answer({}, 1, "<script>x</script>")
    with hb.cluster_dir(tmp_path / "c", {"broker-a": bad, "broker-b-s": None}) as c:
        args = [sys.executable, "-m", "rmq_cluster.cli", "replica-diff", "--dir",
                str(c["dir"]), "--live", "--node-timeout", str(NODE_TIMEOUT_S),
                "--out", str(tmp_path / "out")]  # fmt: skip
        p = subprocess.run(args, capture_output=True, text=True, timeout=SLACK_S, check=False)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("broker-a: unverifiable: broker-a at 127.0.0.1:")
    assert lines[0].endswith("answered code 1 '<script>x</script>'")
    assert lines[1].startswith("broker-b: unverifiable: broker-b-s at 127.0.0.1:")
    assert "connection failed" in lines[1]
    assert lines[2:] == ["verdict: unverifiable"]
    assert "starting Spark" not in p.stderr
    report = (tmp_path / "out" / "report.html").read_text()
    assert "&lt;script&gt;x&lt;/script&gt;" in report and "<script>" not in report
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert set(summary["unverifiable"]) == {"broker-a", "broker-b"} and summary["exit_code"] == 2


@pytest.mark.parametrize("value", ["0", "-1", "nan", str(MAX_NODE_TIMEOUT_S * 2)])
def test_node_timeout_is_range_checked(tmp_path: Path, value: str) -> None:
    with hb.cluster_dir(tmp_path, {}) as c:
        out = audit(c["dir"], "--node-timeout", value)
    assert out["code"] == 2 and out["summary"] is None
    assert f"bad input: --node-timeout {float(value)}" in out["stderr"]


def _group(verdict: str, end: int = 100) -> dict[str, Any]:
    rep = {"first_offset": 0, "end_offset": end, "audited_to": end, "verdict": verdict}
    return {"master": "m", "replicas": {"m": {**rep, "verdict": "consistent"}, "s": rep}}


@pytest.mark.parametrize(("verdicts", "allow_lag", "code"), [
    (("consistent",), False, 0),
    (("divergent",), False, 1),
    (("divergent", "unverifiable"), False, 1),  # a proven divergence wins
    (("lagging", "unverifiable"), False, 1),
    (("lagging", "unverifiable"), True, 2),
    (("consistent", "unverifiable"), False, 2),
])  # fmt: skip
def test_exit_codes(verdicts: tuple[str, ...], allow_lag: bool, code: int) -> None:
    from rmq_cluster.spark_jobs.live import LivePlan, judge

    groups = {f"g{i}": _group(v) for i, v in enumerate(verdicts) if v != "unverifiable"}
    left_out = {f"g{i}": "x" for i, v in enumerate(verdicts) if v == "unverifiable"}
    summary = {"groups": groups, "allow_lag": allow_lag, "exit_code": 0, "verdict": "consistent"}
    out = judge(summary, LivePlan((), {}, left_out, 1.0), {})
    assert out["exit_code"] == code
    assert out["verdict"] == ["consistent", "divergent", "unverifiable"][code]


@pytest.mark.parametrize("port", [0, 70000])
def test_bad_port_in_cluster_json_is_bad_input(tmp_path: Path, port: int) -> None:
    with hb.cluster_dir(tmp_path, {}) as c:
        path = c["dir"] / "cluster.json"
        obj = json.loads(path.read_text())
        obj["topology"]["nodes"][1]["port"] = port
        path.write_text(json.dumps(obj))
        out = audit(c["dir"])
    assert out["code"] == 2 and out["summary"] is None
    assert "bad input:" in out["stderr"] and f"bad address '127.0.0.1':{port}" in out["stderr"]
