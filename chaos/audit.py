"""The replica audit that ends a chaos run (pure: no trio, no sockets, no files).

After the drain every group's members are left to catch up with its live master, the nodes are
stopped (the stores are quiet), and ``rmq-cluster replica-diff`` compares each member's store
with its master's, byte for byte. This module builds that command's ``--replica`` specs (the
*live* master declared, since a controller-mode or DLedger group's master is elected, not
configured) and turns its JSON summary into the run's ``replica_audit`` verdict:

* ``divergent``, ``extra_tail``, ``missing_range``, ``missing_segment``, ``cq_mismatch``:
  a member holds bytes its master does not (a divergent tail) or lacks some in the middle:
  the promise "zero divergent tails" is broken;
* ``lag`` (the member is behind: a tail not copied yet) is reported, not a failure (the run
  passes ``--allow-lag``; a member that did not catch up in time is named in ``lagging``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .checker import VERDICT_FAIL

AUDIT_OK: Final = "consistent"
AUDIT_FAIL: Final = "divergent"
AUDIT_ERROR: Final = "error"
AUDIT_SKIPPED: Final = "skipped"
#: Why the audit did not run where PySpark is not installed (the quick-start install).
NEEDS_SPARK: Final = "skipped: needs the spark extra (python3 -m pip install -e '.[spark]')"
#: replica-diff finding kinds that only say "behind the master".
LAG_KINDS: Final = frozenset({"lag", "cq_dangling", "consumer_offset_lag"})


@attrs.frozen
class Member:
    group: str
    node: str
    store: str
    #: this member is the group's master (DLedger: leader) for the audit
    master: bool
    dledger: bool = False

    def spec(self) -> str:
        """``GROUP:NODE:ROLE:STORE`` for ``replica-diff --replica``."""
        if self.dledger:
            role = "LEADER" if self.master else "FOLLOWER"
        else:
            role = "MASTER" if self.master else "SLAVE"
        return f"{self.group}:{self.node}:{role}:{self.store}"


def audit_members(
    groups: Mapping[str, Sequence[str]],
    masters: Mapping[str, str | None],
    configured: Mapping[str, str | None],
    stores: Mapping[str, str],
    *,
    dledger: bool = False,
) -> list[Member]:
    """One member per node of every group with more than one node. The declared master is the
    live one (``masters``), else the configured one, else the group's first node by name."""
    out: list[Member] = []
    for group in sorted(groups):
        nodes = sorted(groups[group])
        if len(nodes) < 2:
            continue
        master = masters.get(group) or configured.get(group) or nodes[0]
        if master not in nodes:
            raise ValueError(f"group {group}: master {master!r} is not one of {nodes}")
        out.extend(Member(group, n, stores[n], n == master, dledger) for n in nodes)
    return out


def spark_available() -> bool:
    """PySpark imports here (``replica-diff`` runs with this interpreter)."""
    try:
        importlib.import_module("pyspark")
    except ImportError:
        return False
    return True


def audit_command(members: Sequence[Member]) -> list[str]:
    """``replica-diff`` arguments (after the program) for ``members``."""
    args = ["replica-diff", "--json", "--quiet", "--allow-lag"]
    for m in members:
        args += ["--replica", m.spec()]
    return args


def summarize(
    summary: Mapping[str, Any] | None, exit_code: int, *, stderr: str = "",
    caught_up: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    """The ``replica_audit`` object of result.json from replica-diff's JSON summary (None when
    it printed none) and its exit code."""
    caught_up = dict(caught_up or {})
    lagging = sorted(n for n, ok in caught_up.items() if not ok)
    if summary is None or not isinstance(summary.get("groups"), Mapping):
        first = stderr.strip().splitlines()[:1]
        return {"verdict": AUDIT_ERROR, "exit_code": exit_code, "groups": {},
                "divergent": [], "lagging": lagging,
                "error": first[0] if first else f"replica-diff exited {exit_code}"}
    groups: dict[str, Any] = {}
    divergent: list[str] = []
    for gname, g in sorted(summary["groups"].items()):
        reps = {}
        for node, r in sorted((g.get("replicas") or {}).items()):
            findings = dict(r.get("findings") or {})
            bad = {k: v for k, v in findings.items() if k not in LAG_KINDS and v}
            if bad:
                divergent.append(node)
            reps[node] = {
                "master": bool(r.get("is_master")),
                "end_offset": r.get("end_offset"),
                "lag_bytes": r.get("lag_bytes"),
                "ahead_bytes": r.get("ahead_bytes"),
                "proven_identical_to": r.get("proven_identical_to"),
                "findings": findings,
                "verdict": r.get("verdict"),
            }
        groups[gname] = {"master": g.get("master"), "replicas": reps}
    if exit_code not in (0, 1):
        verdict = AUDIT_ERROR
    else:
        verdict = AUDIT_FAIL if divergent or exit_code == 1 else AUDIT_OK
    return {"verdict": verdict, "exit_code": exit_code, "groups": groups,
            "divergent": sorted(divergent), "lagging": lagging}


def with_audit(result: Mapping[str, Any], audit: Mapping[str, Any]) -> dict[str, Any]:
    """The checker's result object with ``replica_audit`` added; a broken audit turns the
    verdict to FAIL and adds its reasons."""
    out = dict(result)
    reasons = audit_reasons(audit)
    if reasons:
        out["verdict"] = VERDICT_FAIL
        out["reasons"] = [*out.get("reasons", []), *reasons]
    out["replica_audit"] = dict(audit)
    return out


def audit_reasons(audit: Mapping[str, Any]) -> list[str]:
    """Why the audit breaks the run's promise (empty: it holds or was skipped)."""
    verdict = audit.get("verdict")
    if verdict == AUDIT_FAIL:
        return [f"replica audit: divergent replicas {', '.join(audit.get('divergent') or [])}"
                .rstrip()]
    if verdict == AUDIT_ERROR:
        return [f"replica audit failed: {audit.get('error', 'no summary')}"]
    return []
