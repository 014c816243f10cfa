"""``rmq-cluster chaos run | check``: the chaos command line.

``run`` brings a fresh cluster up behind the chaos proxies, runs the workload under the
nemesis, heals, drains, checks, prints a summary table (``--json``: the result object) and
exits 0 only when the profile's promise held (1 when it did not or the run failed - a busy
port, a node that did not start: one line on stderr -, 2 on a usage error). Progress goes to
stderr in every mode. ``history.jsonl``, ``result.json`` and ``timeline.svg`` are written to
``--out``. ``check`` re-checks a recorded history with the mode it recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from ..cluster.logging import configure_logging
from ..deploy.supervisor import SupervisorError
from ..deploy.topology import BUILTIN_PROFILES, ProfileError, resolve_profile
from .checker import (
    MODES,
    CheckResult,
    HistoryError,
    check,
    parse_history,
    recorded_mode,
    recorded_orderly_topics,
    recorded_run,
    summary_rows,
)
from .faults import FAULTS, FaultError, make_fault
from .nemesis import DEFAULT_OFF_S, DEFAULT_ON_S
from .runner import RunOptions, run_chaos
from .timeline import render_svg
from .workload import CHAOS_POLL_NAMESRV_S

PROG = "rmq-cluster chaos"


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")


def _table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _say(line: str) -> None:
    """Progress and notes: always on stderr (stdout holds only the result)."""
    with contextlib.suppress(BrokenPipeError):
        # a leading newline ends a redrawn progress line on a terminal; elsewhere it is noise
        sys.stderr.write((line if sys.stderr.isatty() else line.lstrip("\n")) + "\n")
        sys.stderr.flush()


#: Errors a run reports as one line (exit 1); anything else is a bug and keeps its traceback.
_RUN_ERRORS = (SupervisorError, FaultError, OSError, ValueError, trio.TooSlowError)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, Cancelled dropped."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [] if isinstance(exc, trio.Cancelled) else [exc]


def _one_line(exc: BaseException) -> str | None:
    """The first line of the error a run failed with, when every part of it is an error
    of the setup or of the environment (a busy port, a dead node, a bad profile, ...)."""
    leaves = _leaves(exc)
    if not leaves or not all(isinstance(e, _RUN_ERRORS) for e in leaves):
        return None
    first = leaves[0]
    text = str(first).strip().splitlines()[0] if str(first).strip() else type(first).__name__
    if isinstance(first, trio.TooSlowError):
        text = "timed out waiting for the cluster"
    return text


def cmd_run(args: argparse.Namespace) -> int:
    configure_logging(os.environ.get("RMQ_CLUSTER_LOG_LEVEL", "warning"))
    if args.duration <= 0 or args.rate <= 0 or args.producers < 1 or args.keys < 1:
        _err("--duration, --rate, --producers and --keys must be positive")
        return 2
    try:
        resolve_profile(args.profile)
    except ProfileError as exc:
        _err(str(exc))
        return 2
    if args.no_proxy and make_fault(args.fault).needs_proxy:
        _err(f"{args.fault} needs the chaos proxy (drop --no-proxy)")
        return 2
    own_tmp = not args.out
    out = Path(args.out) if args.out else Path(
        tempfile.mkdtemp(prefix=f"rmq-chaos-{Path(args.profile).stem}-{args.fault}-{args.seed}-")
    )
    opts = RunOptions(
        profile=args.profile, fault=args.fault, duration_s=args.duration, seed=args.seed,
        out_dir=out, rate=args.rate, base_port=args.base_port, on_s=args.fault_on,
        off_s=args.fault_off, proxy=not args.no_proxy, restart=not args.no_restart,
        keep_cluster=args.keep_cluster, producers=args.producers, orderly=not args.no_orderly,
        keys=args.keys, replica_audit=False if args.no_replica_audit else None,
        route_poll_s=args.route_poll,
    )
    started = time.monotonic()
    try:
        # progress on stderr in every mode: a redrawn line on a terminal, else a line every
        # few seconds (elapsed, sent, acked, failures, current fault)
        result = trio.run(lambda: run_chaos(opts, say=_say))
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        line = _one_line(exc)
        if line is None:
            raise
        _err(line)
        if own_tmp and not (out / "history.jsonl").exists():
            shutil.rmtree(out, ignore_errors=True)
        return 2 if isinstance(exc, ProfileError) else 1
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print(_table(_rows(result)))
        print(f"history:  {result['history']}\nresult:   {result['result']}\n"
              f"timeline: {result['timeline']}")
    return 0 if result["verdict"] == "PASS" else 1


def _rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    head = [
        ("profile / fault / seed", f"{result['profile']} / {result['fault']} / {result['seed']}"),
        ("duration (elapsed)", f"{result['duration_s']:g} s ({result.get('elapsed_s', '-')} s)"),
        ("drained", "yes" if result["drained"] else "NO"),
    ]
    rows = [
        *head,
        ("mode", result["mode"]),
        ("verdict", result["verdict"]),
        ("invoked", str(result["invoked"])),
        ("acked (SEND_OK)", str(result["acked"])),
        ("ok, other status", str(result["acked_weak"])),
        ("failed", str(result["failed"])),
        ("unknown (received)", f"{result['unknown']} ({result['unknown_received']})"),
        ("received (unique)", f"{result['received']} ({result['received_unique']})"),
        ("lost acked", str(result["lost"])),
        ("  in replication window", str(result["lost_in_window"])),
        ("duplicated", f"{result['duplicated']} (redelivered {result['redelivered']}, "
                       f"stored twice {result['stored_twice']})"),
        ("phantom", str(result["phantom"])),
        ("order violations", str(result["order_violations"])),
        ("longest gap without ok", f"{result['unavailable_max_s']} s"),
        ("send latency p50 / p99", f"{result['latency_p50_ms']} / {result['latency_p99_ms']} ms"),
    ]
    for n, f in enumerate(result["faults"], 1):
        rec = "-" if f["recovery_s"] is None else f"{f['recovery_s']:.2f} s"
        heal = "-" if f["heal_to_ok_s"] is None else f"{f['heal_to_ok_s']:.2f} s"
        rows.append((f"fault {n}: {f['fault']} {','.join(f['nodes'])}",
                     f"at {f['start_s']:.1f} s, group ok again after {rec} "
                     f"({heal} after heal); p99 {f['latency_p99_ms']} ms"))
    audit = result.get("replica_audit") or {}
    if audit:
        detail = audit.get("reason") or audit.get("error") or ", ".join(
            f"{g}: master {a.get('master')}" for g, a in (audit.get("groups") or {}).items())
        rows.append(("replica audit", f"{audit.get('verdict')} ({detail})" if detail
                     else str(audit.get("verdict"))))
    rows.extend(("broken", r) for r in result["reasons"])
    return rows


def cmd_check(args: argparse.Namespace) -> int:
    """Check a recorded history; the mode and orderly topics are the run's (recorded in the
    history) unless ``--mode``/``--orderly`` say otherwise; ``--timeline`` draws it."""
    try:
        with open(args.history, encoding="utf-8") as f:
            events = parse_history(f)
        mode = args.mode or recorded_mode(events)
        orderly = args.orderly if args.orderly is not None else recorded_orderly_topics(events)
        result: CheckResult = check(events, mode=mode, orderly_topics=orderly)
        if args.timeline:
            obj = {**recorded_run(events), **result.to_json()}
            Path(args.timeline).write_text(render_svg(events, obj), encoding="utf-8")
    except (OSError, HistoryError) as exc:
        _err(str(exc))
        return 2
    if args.json:
        sys.stdout.write(json.dumps(result.to_json()) + "\n")
    else:
        print(_table(summary_rows(result)))
    return 0 if result.passed else 1


def add_chaos_command(sub: Any) -> None:
    """``chaos`` with its own subcommands, on ``sub`` (the rmq-cluster subparsers)."""
    chaos = sub.add_parser("chaos", help="fault injection under load, with a history checker")
    csub = chaos.add_subparsers(dest="chaos_command", metavar="CHAOS_COMMAND")
    chaos.set_defaults(func=lambda _args: (chaos.print_help(), 2)[1])
    faults = ", ".join(FAULTS)

    p = csub.add_parser(
        "run", help="fresh cluster + workload + nemesis, then heal, drain and check",
        description=f"Faults: {faults}. Exit 0 only when the profile's promise held.",
    )
    p.add_argument("--profile", required=True, help=", ".join(BUILTIN_PROFILES))
    p.add_argument("--fault", required=True, choices=list(FAULTS), metavar="FAULT",
                   help=faults)
    p.add_argument("--duration", type=float, required=True, help="nemesis seconds")
    p.add_argument("--seed", type=int, default=0, help="schedule and target choices")
    p.add_argument("--rate", type=float, default=50.0, help="sends per second (total)")
    p.add_argument("--producers", type=int, default=4,
                   help="producers, one synchronous send in flight each")
    p.add_argument("--keys", type=int, default=8, help="sharding keys of the orderly topic")
    p.add_argument("--no-orderly", action="store_true",
                   help="no orderly topic (by default one topic is sent per key in order)")
    p.add_argument("--base-port", type=int, default=None)
    p.add_argument("--fault-on", type=float, default=DEFAULT_ON_S, help="seconds per fault")
    p.add_argument("--fault-off", type=float, default=DEFAULT_OFF_S,
                   help="quiet seconds before each fault")
    p.add_argument("--out", help="directory for history.jsonl and result.json (default: a "
                                 "new temporary directory)")
    p.add_argument("--no-proxy", action="store_true",
                   help="no chaos proxy (kill/suspend/restart faults only)")
    p.add_argument("--no-restart", action="store_true",
                   help="kill-master: leave the master dead (consumers read the slave)")
    p.add_argument("--keep-cluster", action="store_true",
                   help="keep the cluster's data directory after the run")
    p.add_argument("--no-replica-audit", action="store_true",
                   help="skip the replica audit at the end (by default every group's members "
                        "catch up, the nodes stop and replica-diff proves no divergent tail)")
    p.add_argument("--route-poll", type=float, default=CHAOS_POLL_NAMESRV_S, metavar="S",
                   help="the clients' NameServer poll, seconds (default %(default)s; "
                        "RocketMQ's clients: 30)")
    p.add_argument("--json", action="store_true", help="print the result JSON")
    p.set_defaults(func=cmd_run)

    p = csub.add_parser("check", help="check a recorded history.jsonl again")
    p.add_argument("history")
    p.add_argument("--mode", choices=MODES,
                   help="the promise to check (default: the mode the run recorded)")
    p.add_argument("--orderly", action="append",
                   help="an orderly topic (repeatable; default: the ones the run recorded)")
    p.add_argument("--timeline", metavar="FILE", help="also draw the timeline SVG to FILE")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
