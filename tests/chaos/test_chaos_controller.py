"""Chaos for controller mode (``2m-2s-controller``, RocketMQ 5.x RIP-44): real processes behind
the chaos proxies, each run checked for zero acknowledged loss (SYNC) and ended by the replica
audit (every member caught up, stopped, ``replica-diff``: zero divergent tails).

Each test is one short run (about 20 s on 2 busy cores)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq_cluster.chaos.checker import MODE_SYNC
from rmq_cluster.chaos.runner import RunOptions, run_chaos

pytestmark = pytest.mark.slow

PROFILE = "2m-2s-controller"
#: A controller elects within its heartbeat timeout (1 s) plus a scan, a broker switches
#: roles: the issue's bound is 5 s; 2 busy cores get some slack.
FAILOVER_BOUND_S = 8.0
#: the controller names a new master -> its first SEND_OK (issue 38; the kill -> election part
#: is the controller's heartbeat timeout, 1 s, and its scan).
NEW_MASTER_OK_S = 3.0


@pytest.fixture
def out_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="rmq-chaos-ctl-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _opts(out: Path, fault: str, **kw: Any) -> RunOptions:
    base: dict[str, Any] = {"duration_s": 10.0, "seed": 3, "on_s": 7.0, "off_s": 2.0,
                            "rate": 60.0, "settle_s": 2.0, "warmup_s": 1.5}
    base.update(kw)
    return RunOptions(profile=PROFILE, fault=fault, out_dir=out, **base)


def _fault_events(result: dict[str, Any]) -> list[dict[str, Any]]:
    lines = Path(result["history"]).read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == "fault" and e["phase"] == "start"]


def _promise_held(result: dict[str, Any]) -> None:
    assert result["mode"] == MODE_SYNC
    assert result["verdict"] == "PASS", result["reasons"]
    assert result["lost"] == 0 and result["phantom"] == 0 and result["order_violations"] == 0
    assert result["drained"] and result["acked"] > 100
    audit = result["replica_audit"]
    assert audit["verdict"] == "consistent", audit
    assert audit["divergent"] == [] and sorted(audit["groups"]) == ["broker-a", "broker-b"]
    for g in audit["groups"].values():
        assert len(g["replicas"]) == 2
        for r in g["replicas"].values():
            assert r["lag_bytes"] == 0 and r["end_offset"] > 0, r
    saved = json.loads(Path(result["result"]).read_text())
    assert saved["replica_audit"] == audit


async def test_kill_master_elects_the_slave_and_loses_nothing(out_dir: Path) -> None:
    """Every kill -9 of a SYNC master is followed by SEND_OK from the elected slave within
    NEW_MASTER_OK_S of its election while the old master is still dead (allAckInSyncStateSet:
    the SyncStateSet shrank to the new master, which takes writes alone), with the clients'
    route poll at RocketMQ's default 30 s (issue 38 items 1 and 2)."""
    result = await run_chaos(_opts(out_dir, "kill-master", route_poll_s=30.0))
    _promise_held(result)
    assert result["faults"]
    elected = {round(e["t"], 3): e["elected_after_s"] for e in _fault_events(result)}
    for f in result["faults"]:
        assert f["recovery_s"] is not None, f
        after_election = f["recovery_s"] - elected[round(f["start_s"], 3)]
        assert after_election < NEW_MASTER_OK_S, f
        assert f["start_s"] + f["recovery_s"] < f["end_s"], f  # before the old one restarts


async def test_kill_master_then_the_newly_elected_one(out_dir: Path) -> None:
    """The master dies, and the replica the controller names in its place dies as soon as it
    is named (still switching roles): the group has no master until the heal starts the
    newest one (the SyncStateSet's only member) first; nothing acked is lost, no tail."""
    result = await run_chaos(_opts(out_dir, "kill-master-in-election", duration_s=11.0,
                                   on_s=8.0))
    _promise_held(result)
    starts = _fault_events(result)
    assert starts
    ev = starts[0]
    assert ev["elected"] is not None, ev  # the controller named a new master ...
    assert ev["epoch"] > ev["epoch_before"] and ev["elected_after_s"] < FAILOVER_BOUND_S
    assert len(ev["nodes"]) == 2 and ev["elected"] == ev["nodes"][1]  # ... which died too
    assert result["faults"][0]["recovery_s"] is not None  # the group came back after the heal


async def test_old_master_cut_off_from_the_controllers_only(out_dir: Path) -> None:
    """Through the controllers' proxies only: the master cannot heartbeat, the controller
    elects its slave; clients still reach the old master, which acknowledges nothing
    (SEND_OK) without the slave; at the heal it rejoins as a slave without its tail."""
    result = await run_chaos(_opts(out_dir, "partition-master-controller", on_s=8.0,
                                   duration_s=11.0))
    _promise_held(result)
    ev = _fault_events(result)[0]
    assert ev["from"] == ["controller-0", "controller-1", "controller-2"]
    group, old = ev["group"], ev["nodes"][0]
    # the slave was elected: the old master is not its group's master at the end
    assert result["replica_audit"]["masters"][group] != old


async def test_restart_the_controller_leader_under_load(out_dir: Path) -> None:
    result = await run_chaos(_opts(out_dir, "restart-controller-leader", on_s=4.0))
    _promise_held(result)
    starts = _fault_events(result)
    assert starts and all(e["nodes"][0].startswith("controller-") for e in starts)
    # the masters never stopped: the cluster kept taking sends
    assert result["unavailable_max_s"] < 4.0
