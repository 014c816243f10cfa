"""The chaos run's replica audit (pure part): replica-diff specs, the verdict from its summary."""

from __future__ import annotations

import pytest

from rmq_cluster.chaos.audit import (
    AUDIT_ERROR,
    AUDIT_FAIL,
    AUDIT_OK,
    audit_command,
    audit_members,
    audit_reasons,
    summarize,
    with_audit,
)

GROUPS = {"broker-a": ["broker-a", "broker-a-s"], "broker-b": ["broker-b-s", "broker-b"],
          "solo": ["solo"]}
STORES = {n: f"/c/store/{n}" for g in GROUPS.values() for n in g}


def test_the_live_master_is_declared_not_the_configured_one() -> None:
    members = audit_members(GROUPS, {"broker-a": "broker-a-s", "broker-b": None},
                            {"broker-a": "broker-a", "broker-b": "broker-b"}, STORES)
    specs = [m.spec() for m in members]
    assert specs == [
        "broker-a:broker-a:SLAVE:/c/store/broker-a",
        "broker-a:broker-a-s:MASTER:/c/store/broker-a-s",
        "broker-b:broker-b:MASTER:/c/store/broker-b",  # no live master: the configured one
        "broker-b:broker-b-s:SLAVE:/c/store/broker-b-s",
    ]  # a group of one is not audited
    args = audit_command(members)
    assert args[:4] == ["replica-diff", "--json", "--quiet", "--allow-lag"]
    assert args.count("--replica") == 4


def test_without_any_master_the_first_node_and_dledger_roles() -> None:
    members = audit_members({"g": ["n2", "n1", "n3"]}, {}, {}, {f"n{i}": f"/s{i}" for i in
                                                              (1, 2, 3)}, dledger=True)
    assert [m.spec() for m in members] == ["g:n1:LEADER:/s1", "g:n2:FOLLOWER:/s2",
                                           "g:n3:FOLLOWER:/s3"]


def test_a_master_outside_its_group_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of"):
        audit_members({"g": ["a", "b"]}, {"g": "x"}, {}, {"a": "/a", "b": "/b"})


def _summary(findings_b: dict[str, int]) -> dict[str, object]:
    return {"groups": {"g": {"master": "a", "replicas": {
        "a": {"is_master": True, "end_offset": 100, "lag_bytes": 0, "findings": {},
              "verdict": "consistent"},
        "b": {"is_master": False, "end_offset": 90, "lag_bytes": 10, "findings": findings_b,
              "verdict": "x"},
    }}}}


def test_lag_is_reported_but_consistent() -> None:
    audit = summarize(_summary({"lag": 1}), 0, caught_up={"b": False})
    assert audit["verdict"] == AUDIT_OK
    assert audit["lagging"] == ["b"] and audit["divergent"] == []
    assert audit["groups"]["g"]["replicas"]["b"]["lag_bytes"] == 10
    assert audit_reasons(audit) == []


@pytest.mark.parametrize("kind", ["extra_tail", "divergent", "missing_range", "cq_mismatch"])
def test_a_divergent_tail_breaks_the_promise(kind: str) -> None:
    audit = summarize(_summary({kind: 2}), 1)
    assert audit["verdict"] == AUDIT_FAIL and audit["divergent"] == ["b"]
    assert audit_reasons(audit) == ["replica audit: divergent replicas b"]


def test_exit_1_without_findings_still_fails_and_no_summary_is_an_error() -> None:
    assert summarize(_summary({}), 1)["verdict"] == AUDIT_FAIL
    err = summarize(None, 2, stderr="replica-diff: error: no commitlog\nmore")
    assert err["verdict"] == AUDIT_ERROR and err["error"] == "replica-diff: error: no commitlog"
    assert audit_reasons(err) == ["replica audit failed: replica-diff: error: no commitlog"]
    assert summarize(_summary({}), 2)["verdict"] == AUDIT_ERROR


def test_the_audit_joins_the_result_and_only_a_broken_one_fails_it() -> None:
    passed = {"verdict": "PASS", "reasons": [], "lost": 0}
    ok = with_audit(passed, summarize(_summary({"lag": 1}), 0))
    assert ok["verdict"] == "PASS" and ok["replica_audit"]["verdict"] == AUDIT_OK
    skipped = with_audit(passed, {"verdict": "skipped", "reason": "--no-replica-audit"})
    assert skipped["verdict"] == "PASS"
    bad = with_audit(passed, summarize(_summary({"extra_tail": 1}), 1))
    assert bad["verdict"] == "FAIL"
    assert bad["reasons"] == ["replica audit: divergent replicas b"]
    assert passed == {"verdict": "PASS", "reasons": [], "lost": 0}  # not changed in place
