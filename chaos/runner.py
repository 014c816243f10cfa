"""One chaos run (Trio shell): fresh cluster, workload, nemesis, heal, drain, check.

``rmq-cluster chaos run --profile P --fault F --duration S --seed N`` calls ``run_chaos``:

1. a fresh cluster of profile P behind the chaos proxies (chaos.cluster);
2. the topics on every master; producers and a consumer start recording the history;
3. the nemesis injects F in each window of the seeded schedule and undoes it after;
4. everything is healed, producers keep sending for ``settle_s`` (recovery is observed),
   stop, and the consumer drains every queue;
5. the replica audit (chaos.audit): members catch up with their live master, the nodes stop
   and ``rmq-cluster replica-diff`` proves zero divergent tails (profiles with replicas);
6. the checker gives the verdict for the profile's promise; ``history.jsonl``,
   ``result.json`` and ``timeline.svg`` (chaos.timeline) are written to the output directory.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import attrs
import orjson
import trio

from ..cluster.logging import get_logger
from ..cluster.remoting.codes import RequestCode
from .audit import AUDIT_SKIPPED, with_audit
from .checker import check
from .cluster import ChaosCluster, chaos_cluster
from .faults import Fault, FaultError, make_fault
from .nemesis import DEFAULT_OFF_S, DEFAULT_ON_S, Schedule, build_schedule
from .timeline import TIMELINE_FILE, render_svg
from .workload import (
    CHAOS_POLL_NAMESRV_S,
    History,
    Workload,
    WorkloadConfig,
    create_topics,
)

WARMUP_S: Final = 2.0
SETTLE_S: Final = 5.0
#: A slave must have the new topics' configs (SlaveSynchronize) within this before load starts.
TOPIC_SYNC_TIMEOUT_S: Final = 30.0
TOPIC_SYNC_POLL_S: Final = 0.2
PROGRESS_INTERVAL_S: Final = 1.0
#: Without a terminal a progress line is printed this often.
PROGRESS_LOG_S: Final = 5.0
PROGRESS_BAR_WIDTH: Final = 20
PROGRESS_LINE_CHARS: Final = 140
HISTORY_FILE: Final = "history.jsonl"
RESULT_FILE: Final = "result.json"

log = get_logger(component="chaos.runner")

Say = Callable[[str], Any]


@attrs.frozen
class RunOptions:
    profile: str
    fault: str
    duration_s: float
    seed: int
    out_dir: Path
    rate: float = 50.0
    base_port: int | None = None
    on_s: float = DEFAULT_ON_S
    off_s: float = DEFAULT_OFF_S
    proxy: bool = True
    warmup_s: float = WARMUP_S
    settle_s: float = SETTLE_S
    producers: int = 4
    #: Orderly topic: messages of one key go in sequence to the key's queue.
    keys: int = 8
    orderly: bool = True
    #: kill-master: start the master again at the end of each window (False: it stays dead
    #: and consumers read its slave, as in a 4.x group without a manual switch).
    restart: bool = True
    keep_cluster: bool = False
    #: end with the replica audit (None: when the profile has replicas)
    replica_audit: bool | None = None
    #: the workload clients' NameServer poll in seconds (Java's default is 30)
    route_poll_s: float = CHAOS_POLL_NAMESRV_S


@attrs.define
class RunState:
    """What the progress line shows."""

    phase: str = "starting"
    fault: str = ""
    windows_done: int = 0
    windows_total: int = 0


async def _wait_slaves_know_topics(cc: ChaosCluster, topics: tuple[str, ...]) -> None:
    slaves = [n.name for n in cc.topology.brokers if n.role == "SLAVE"]
    with trio.fail_after(TOPIC_SYNC_TIMEOUT_S):
        for slave in slaves:
            while True:
                addr = cc.topology.node(slave).addr
                resp = await cc._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
                body = bytes(resp.body) if resp is not None and resp.body else b""
                if all(t.encode() in body for t in topics):
                    break
                await trio.sleep(TOPIC_SYNC_POLL_S)  # SlaveSynchronize runs on its own timer


def progress_line(state: RunState, history: History, opts: RunOptions) -> str:
    """One progress line: elapsed, sent, acked, failures, the current fault."""
    total = opts.warmup_s + opts.duration_s
    done = min(1.0, history.now() / total) if total > 0 else 1.0
    bar = "#" * int(done * PROGRESS_BAR_WIDTH)
    return (
        f"[{bar:<{PROGRESS_BAR_WIDTH}}] {history.now():6.1f}s/{total:g}s {state.phase:<7} "
        f"sent {history.invoked} acked {history.acked} failed {history.failed} "
        f"unknown {history.unknown} recv {history.received} "
        f"fault {state.windows_done}/{state.windows_total} {state.fault or '-'}"
    )


async def _progress(state: RunState, history: History, opts: RunOptions, say: Say,
                    tty: bool) -> None:
    """On a terminal: one line on stderr redrawn every second; otherwise ``say`` a line
    every ``PROGRESS_LOG_S`` (the CLI sends ``say`` to stderr, also with ``--json``)."""
    last = -PROGRESS_LOG_S
    while True:
        await trio.sleep(PROGRESS_INTERVAL_S)  # the display's refresh period
        line = progress_line(state, history, opts)
        if tty:
            sys.stderr.write("\r" + line.ljust(PROGRESS_LINE_CHARS)[:PROGRESS_LINE_CHARS])
            sys.stderr.flush()
        elif history.now() - last >= PROGRESS_LOG_S:
            last = history.now()
            say(line)


async def _nemesis(cc: ChaosCluster, fault: Fault, schedule: Schedule, history: History,
                   state: RunState, say: Say, t_start: float) -> list[dict[str, Any]]:
    log_rows: list[dict[str, Any]] = []
    state.windows_total = len(schedule.windows)
    for window in schedule.windows:
        await trio.sleep_until(t_start + window.start_s)
        try:
            done = await fault.inject(cc, window)
        except FaultError as exc:
            history.record("phase", name="fault-skipped", fault=fault.name, reason=str(exc))
            say(f"\nfault {fault.name} skipped: {exc}")
            continue
        at = done.at_monotonic
        dated = {} if at is None else {"t": round(at - history.t0, 6)}
        ev = history.record("fault", phase="start", **done.event(), **dated)
        state.fault = f"{fault.name} {','.join(done.nodes)}"
        await trio.sleep_until(t_start + window.end_s)
        info = await fault.heal(cc, done)
        end = history.record("fault", phase="end", fault=fault.name, group=done.group,
                             nodes=done.nodes, **info)
        state.fault = ""
        state.windows_done += 1
        log_rows.append({"start": ev, "end": end})
    return log_rows


def _chosen_fault(opts: RunOptions) -> Fault:
    """The fault ``opts`` names (kill-master without --restart leaves the master dead)."""
    fault = make_fault(opts.fault)
    if opts.fault == "kill-master" and not opts.restart:
        from .faults import KillMaster

        fault = KillMaster(restart=False)
    if fault.needs_proxy and not opts.proxy:
        raise FaultError(f"{opts.fault} needs the chaos proxy")
    return fault


async def _master_addrs(cc: ChaosCluster) -> list[str]:
    """Every group's live master address; a group without one fails the run."""
    masters = []
    for group in cc.groups():
        master = await cc.live_master(group)
        if master is None:
            raise FaultError(f"group {group} has no master after up")
        masters.append(cc.topology.node(master).addr)
    return masters


async def _drive(
    cc: ChaosCluster,
    workload: Workload,
    fault: Fault,
    schedule: Schedule,
    history: History,
    state: RunState,
    opts: RunOptions,
    say: Say,
    tty: bool,
) -> tuple[bool, list[str]]:
    """The phases under load: warmup, nemesis, heal, settle, then drain the consumers;
    (drained, nodes healed at the end)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(workload.run_consumer)
        nursery.start_soon(_progress, state, history, opts, say, tty)
        async with trio.open_nursery() as producers:
            producers.start_soon(workload.run_producers)
            state.phase = "warmup"
            await trio.sleep(opts.warmup_s)  # load before the first fault
            state.phase = "nemesis"
            t_start = trio.current_time()
            await _nemesis(cc, fault, schedule, history, state, say, t_start)
            await trio.sleep_until(t_start + opts.duration_s)
            state.phase = "heal"
            history.record("phase", name="heal")
            healed = await cc.heal_all(start_dead=opts.restart)
            state.phase = "settle"
            await trio.sleep(opts.settle_s)  # recovery observed under load
            workload.stopping.set()
        history.record("phase", name="drain")
        state.phase = "drain"
        drained = await workload.drain()
        history.record("phase", name="done", drained=drained)
        nursery.cancel_scope.cancel()
    return drained, healed


async def run_chaos(opts: RunOptions, *, say: Say | None = None,
                    tty: bool | None = None) -> dict[str, Any]:
    """Run, check, write history, result and timeline; the result object (``verdict``
    PASS/FAIL). ``tty``: redraw one progress line on stderr (default: stderr is a
    terminal); otherwise progress lines go to ``say``."""
    say = say or (lambda _line: None)
    tty = sys.stderr.isatty() if tty is None else tty
    fault = _chosen_fault(opts)
    schedule = build_schedule(opts.seed, opts.duration_s, on_s=opts.on_s, off_s=opts.off_s)
    out = opts.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    history = History(out / HISTORY_FILE)
    cfg = WorkloadConfig(
        rate=opts.rate, producers=opts.producers, keys=opts.keys, route_poll_s=opts.route_poll_s,
        orderly_topic=WorkloadConfig().orderly_topic if opts.orderly else None,
    )
    state = RunState(windows_total=len(schedule.windows))
    drained = False
    healed: list[str] = []
    audit: dict[str, Any] = {"verdict": AUDIT_SKIPPED, "reason": "--no-replica-audit"}
    try:
        async with chaos_cluster(
            opts.profile, directory=out / "cluster", base_port=opts.base_port,
            proxy=opts.proxy, seed=opts.seed, purge=not opts.keep_cluster, say=say,
        ) as cc:
            await create_topics(cc.namesrv_addr, cfg, await _master_addrs(cc))
            await _wait_slaves_know_topics(cc, cfg.all_topics)
            workload = Workload(cc.namesrv_addr, cfg, history)
            history.t0 = time.monotonic()  # history times count from the workload's start
            history.record("phase", name="start", profile=opts.profile, fault=opts.fault,
                           seed=opts.seed, mode=cc.mode, schedule=schedule.to_json(),
                           orderly_topics=[cfg.orderly_topic] if cfg.orderly_topic else [])
            drained, healed = await _drive(cc, workload, fault, schedule, history, state, opts,
                                           say, tty)  # fmt: skip
            mode = cc.mode
            if opts.replica_audit is not False:
                state.phase = "audit"
                history.record("phase", name="audit")
                audit = await cc.audit_replicas()
    finally:
        history.close()
        if tty:
            sys.stderr.write("\n")
    result = check(history.events, mode=mode,
                   orderly_topics=[cfg.orderly_topic] if cfg.orderly_topic else [])
    obj = with_audit(result.to_json(), audit)
    obj.update(
        {
            "profile": opts.profile,
            "fault": opts.fault,
            "seed": opts.seed,
            "duration_s": opts.duration_s,
            "rate": opts.rate,
            "drained": drained,
            "healed_at_end": healed,
            "schedule": schedule.to_json(),
            "history": str(out / HISTORY_FILE),
            "result": str(out / RESULT_FILE),
            "timeline": str(out / TIMELINE_FILE),
        }
    )
    (out / RESULT_FILE).write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    (out / TIMELINE_FILE).write_text(render_svg(history.events, obj), encoding="utf-8")
    return obj
