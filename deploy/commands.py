"""``rmq-cluster up | down | status | nodes | kill | pause | resume | restart | promote | logs |
render | demo``: the cluster-in-a-box commands.

``cli/main.py`` only wires these into its parser (``add_commands``); every parser gets
``func(args) -> exit code``. Every command takes ``--dir`` (default
``$RMQ_CLUSTER_HOME/<name>``, the home defaulting to ``./.rmq-cluster``), ``--name`` (default
``default``) and ``--json``; an error is one line on stderr and exit status 1 (``up`` adds the
failed node's log tail below that line); ``status`` exits 1 while any node is not running;
``down`` on a stopped cluster is a success (exit 0).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from ..cluster.acl.local import (
    acl_path,
    generate_admin,
    local_admin,
    write_local_acl,
    write_private,
)
from ..cluster.acl.signing import Credentials
from ..cluster.cli_args import non_negative
from ..cluster.logging import pretty_line, rotated_paths
from ..cluster.metrics import ExpositionError, parse_exposition, sample_value
from ..cluster.metrics_server import METRICS_PATH, fetch_metrics
from . import supervisor
from .proxy_up import proxy_rows
from .render import DEFAULT_INSTALL_DIR
from .supervisor import ClusterState, SupervisorError
from .topology import (
    BUILTIN_PROFILES,
    KIND_BROKER,
    KIND_NAMESRV,
    METRICS_PORT_AUTO,
    ROLE_AUTO,
    ROLE_DLEDGER,
    ProfileError,
    ProfileSpec,
    build_topology,
    metrics_port_of,
    resolve_profile,
)

PROG = "rmq-cluster"
DEFAULT_LOG_LINES = 20
#: ``--foreground``: how often the attached supervisor looks for nodes that died.
FOREGROUND_CHECK_INTERVAL_S = 1.0


def _err(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _say(line: str) -> None:
    """A progress line: on stderr (stdout carries results only); a closed stream must not
    abort what is being done."""
    with contextlib.suppress(BrokenPipeError):
        print(line, file=sys.stderr, flush=True)


def _dir(args: argparse.Namespace) -> Path:
    if args.dir:
        return Path(args.dir)
    return supervisor.default_dir(args.name)


def _state(args: argparse.Namespace) -> ClusterState:
    return supervisor.load_state(_dir(args).resolve())


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        # logging is configured once by the entry point (cli/main.py: -v, --log-format,
        # $RMQ_CLUSTER_LOG_LEVEL); the client's and probes' chatter stays on stderr
        try:
            return fn(args)
        except (SupervisorError, ProfileError) as exc:
            _err(str(exc))
            return 1
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # stdout closed by the reader (``| head``): the work is done, say nothing more
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - interpreter exit flushes it
            return 0

    return run


# =========================================================================== tables


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def format_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    header = [title for _key, title in columns]
    body = [[_cell(r.get(key)) for key, _title in columns] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=False)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *body]]
    return "\n".join(lines)


NODE_COLUMNS = [
    ("name", "NAME"),
    ("kind", "KIND"),
    ("group", "GROUP"),
    ("role", "ROLE"),
    ("broker_id", "ID"),
    ("addr", "ADDR"),
    ("pid", "PID"),
    ("state", "STATE"),
]
STATUS_COLUMNS = [*NODE_COLUMNS, ("commitlog_max_offset", "MAXOFFSET"), ("diff_bytes", "DIFF")]
DLEDGER_STATUS_COLUMNS = [("term", "TERM"), ("leader", "LEADER"), ("commit_index", "COMMIT")]
#: controller mode: master epoch and the group's SyncStateSet (brokerIds)
CONTROLLER_STATUS_COLUMNS = [("epoch", "EPOCH"), ("sync_state_set", "SYNCSTATESET")]


def metrics_urls(state: ClusterState) -> dict[str, str]:
    """Node name -> its /metrics URL, for every node of the cluster that serves one (``up
    --metrics``: brokers and NameServers; controllers have none)."""
    spec = state.topology.spec
    urls = {}
    for rec in state.records():
        if rec.spec.kind == KIND_BROKER:
            props = spec.broker_properties
        elif rec.spec.kind == KIND_NAMESRV:
            props = spec.namesrv_properties
        else:
            continue
        if props.get("metricsPort") == METRICS_PORT_AUTO:
            urls[rec.name] = f"http://{rec.spec.host}:{metrics_port_of(rec.spec)}{METRICS_PATH}"
    return urls


#: Configured roles the group decides (DLedger's election, the controller): ``up`` shows the
#: role and brokerId each such node holds now, as ``status`` does.
_ELECTED_ROLES = (ROLE_DLEDGER, ROLE_AUTO)


def _node_rows(state: ClusterState) -> list[dict[str, Any]]:
    urls = metrics_urls(state)
    live: dict[str, dict[str, Any]] = {}
    if any(r.spec.role in _ELECTED_ROLES for r in state.records()):
        live = {n["name"]: n for n in supervisor.status(state)["nodes"]}
    rows = []
    for rec in state.records():
        st = rec.state()
        rows.append(
            {
                "name": rec.name,
                "kind": rec.spec.kind,
                "group": rec.spec.group,
                "role": live.get(rec.name, {}).get("role", rec.spec.role),
                "broker_id": live.get(rec.name, {}).get("broker_id", rec.spec.broker_id),
                "addr": rec.spec.addr,
                "pid": rec.pid if st != "dead" else None,
                "alive": st != "dead",
                "state": st,
                "log": rec.log,
                "metrics_url": urls.get(rec.name),
            }
        )
    return rows


# =========================================================================== up / down


def _with_acl(spec: ProfileSpec, directory: Path) -> tuple[ProfileSpec, Credentials | None]:
    """``up --acl``: brokers verify every request, and NameServers every request that changes
    the cluster (or reads its config), against ``conf/plain_acl.yml`` holding one generated
    admin account (kept across restarts); brokers sign their registrations with it. The new
    credentials, or None if reused."""
    directory = directory.resolve()
    admin = local_admin(directory)
    fresh = None
    if admin is None:
        admin = fresh = generate_admin()
        write_local_acl(directory, admin)
    acl = {"aclEnable": "true", "aclFile": str(acl_path(directory)),
           "metricsToken": metrics_token(admin)}
    broker_props = {
        **spec.broker_properties,
        **acl,
        "aclAccessKey": admin.access_key,
        "aclSecretKey": admin.secret_key,
    }
    namesrv_props = {**spec.namesrv_properties, **acl}
    return (
        attrs.evolve(spec, broker_properties=broker_props, namesrv_properties=namesrv_props),
        fresh,
    )


def metrics_token(admin: Credentials) -> str:
    """``up --acl``: the bearer token every node's /metrics asks for, derived from the cluster's
    admin secret (the same across restarts, never the secret itself)."""
    return hmac.new(admin.secret_key.encode(), b"rmq-cluster metricsToken",
                    hashlib.sha256).hexdigest()


def cmd_up(args: argparse.Namespace) -> int:
    spec = resolve_profile(args.profile, groups=args.groups)
    directory = _dir(args)
    say = _say  # progress goes to stderr in every mode
    fresh: Credentials | None = None
    if getattr(args, "metrics", False):
        spec = attrs.evolve(
            spec, broker_properties={**spec.broker_properties, "metricsPort": METRICS_PORT_AUTO},
            namesrv_properties={**spec.namesrv_properties, "metricsPort": METRICS_PORT_AUTO},
        )
    spec, hosts = _with_bind(spec, getattr(args, "bind", None))
    if getattr(args, "acl", False):
        created_dir = not directory.exists()
        spec, fresh = _with_acl(spec, directory)
        try:
            return _cmd_up(args, spec, directory, say, fresh, hosts)
        except BaseException:
            if created_dir and not (directory / supervisor.STATE_FILE).exists():
                shutil.rmtree(directory, ignore_errors=True)  # nothing started: leave nothing
            raise
    return _cmd_up(args, spec, directory, say, fresh, hosts)


def _with_bind(spec: ProfileSpec, bind: str | None) -> tuple[ProfileSpec, list[str] | None]:
    """``up --bind ADDR`` (or a profile's ``broker_properties.bindAddress``): every node
    listens on ADDR. A wildcard (0.0.0.0, ::) keeps the nodes advertising 127.0.0.1; any
    other address is also what they advertise (brokerIP1, the NameServer addresses), as
    nothing listens on loopback then. Returns the spec and the hosts of the plan."""
    bind = bind or spec.broker_properties.get("bindAddress") or None
    if bind is None:
        return spec, None
    try:
        addr = ipaddress.IPv4Address(bind.strip())
    except ValueError:
        raise ProfileError(f"profile {spec.name}: bindAddress {bind!r} is not an IPv4 address") \
            from None
    bind = str(addr)
    spec = attrs.evolve(
        spec,
        broker_properties={**spec.broker_properties, "bindAddress": bind},
        namesrv_properties={**spec.namesrv_properties, "bindAddress": bind},
    )
    return spec, (None if addr.is_unspecified else [bind])


def _cmd_up(
    args: argparse.Namespace,
    spec: ProfileSpec,
    directory: Path,
    say: Callable[[str], None],
    fresh: Credentials | None,
    hosts: list[str] | None = None,
) -> int:
    result = supervisor.up(
        spec,
        directory=directory,
        name=args.name,
        base_port=args.base_port,
        timeout=args.timeout,
        progress=say,
        hosts=hosts,
    )
    state = result.state
    rows = _node_rows(state)
    if args.json:
        _print_json(
            {
                "name": state.name,
                "profile": state.profile,
                "dir": str(state.dir),
                "namesrv_addr": state.topology.namesrv_addr,
                "already_running": result.already_running,
                "started": list(result.started),
                "ready_s": round(result.ready_s, 3),
                "nodes": rows,
                **(
                    {"acl": {"accessKey": fresh.access_key, "secretKey": fresh.secret_key}}
                    if fresh is not None and not result.already_running
                    else {}
                ),
            }
        )
    else:
        if result.already_running:
            print(
                f"cluster {state.name} ({state.profile}) is already running in {state.dir}: "
                f"{len(rows)}/{len(rows)} nodes alive; nothing to do"
            )
        elif len(result.started) < len(rows):
            print(
                f"cluster {state.name} ({state.profile}) was partly running in {state.dir}: "
                f"started {', '.join(result.started)} in {result.ready_s:.2f} s"
            )
        else:
            print(
                f"cluster {state.name} ({state.profile}) ready in {result.ready_s:.2f} s; "
                f"data in {state.dir}"
            )
        print(format_table(rows, NODE_COLUMNS))
        print(f"NAMESRV_ADDR={state.topology.namesrv_addr}")
        _print_metrics_urls(rows)
        if fresh is not None and not result.already_running:
            # printed once, on its own line (kept in conf/plain_acl.yml, mode 0600)
            print(f"accessKey={fresh.access_key} secretKey={fresh.secret_key}")
    if args.foreground:
        return _foreground(state, quiet=args.json)
    return 0


def _print_metrics_urls(rows: list[dict[str, Any]]) -> None:
    """``up --metrics``: every /metrics URL, one node a line."""
    served = [r for r in rows if r.get("metrics_url")]
    if served:
        print(format_table(served, [("name", "NODE"), ("metrics_url", "METRICS")]))


def _foreground(state: ClusterState, *, quiet: bool) -> int:
    """Stay attached until Ctrl-C/SIGTERM, then stop every node. Restarts nothing."""

    async def watch() -> None:
        reported: set[str] = set()
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            if not quiet:
                print("attached: Ctrl-C stops the cluster", flush=True)
            while True:
                with trio.move_on_after(FOREGROUND_CHECK_INTERVAL_S):
                    async for signum in signals:
                        if not quiet:
                            print(f"{signal.Signals(signum).name}: stopping", flush=True)
                        return
                for rec in state.records():
                    if rec.name not in reported and not rec.alive:
                        reported.add(rec.name)
                        if not quiet:
                            print(f"node {rec.name} is not running (not restarted)", flush=True)

    try:
        trio.run(watch)
    finally:
        result = supervisor.down(state)
        if not quiet:
            print(f"stopped {', '.join(result['stopped']) or 'nothing'}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    directory = _dir(args).resolve()
    if not (directory / supervisor.STATE_FILE).exists():
        if not directory.exists():
            raise SupervisorError(f"no cluster in {directory} (no such directory)")
        if args.purge:
            raise SupervisorError(
                f"refusing to purge {directory}: no {supervisor.STATE_FILE} in it"
            )
        raise SupervisorError(f"no cluster in {directory}")
    with supervisor.locked(directory):
        state = supervisor.load_state(directory)
        result = supervisor.down(state, purge=args.purge)
    if args.json:
        _print_json(result)
    else:
        if result["stopped"]:
            print(f"cluster {state.name}: stopped {', '.join(result['stopped'])}")
        elif not result["strays"]:
            print(f"cluster {state.name} was not running: nothing to stop")
        if result["killed"]:
            print(f"needed SIGKILL: {', '.join(result['killed'])}")
        if result["strays"]:
            print(f"also stopped pids {result['strays']} running this cluster's nodes "
                  "(not in its state file)")
        if result["purged"]:
            print(f"deleted {directory}")
    return 0


# =========================================================================== status


def cmd_status(args: argparse.Namespace) -> int:
    state = _state(args)
    report = supervisor.status(state)
    nodes = report["nodes"]
    urls = metrics_urls(state)
    for node in nodes:
        node["metrics_url"] = urls.get(node["name"])
    report["proxies"] = proxies = proxy_rows(state.dir)
    # a script's health check: every node running (a paused or dead one is not), every
    # proxy ``up --proxy`` started taking connections
    healthy = all(n["state"] == "running" for n in nodes) and all(
        p["state"] == "up" for p in proxies)
    if args.json:
        if getattr(args, "metrics", False):
            report["metrics"] = _metrics_rows(state)
        report["healthy"] = healthy
        _print_json(report)
        return 0 if healthy else 1
    alive = sum(1 for n in nodes if n["alive"])
    print(
        f"cluster {report['name']} ({report['profile']}): {alive}/{len(nodes)} nodes alive; "
        f"NAMESRV_ADDR={report['namesrv_addr']}"
    )
    columns = STATUS_COLUMNS
    if any("term" in n for n in nodes):  # DLedger groups: who leads, in which term, how far
        columns = [*STATUS_COLUMNS, *DLEDGER_STATUS_COLUMNS]
    if any("epoch" in n for n in nodes):
        columns = [*columns, *CONTROLLER_STATUS_COLUMNS]
    print(format_table(nodes, columns))
    if proxies:
        rows = [{**p, "tls": "TLS" if p["tls"] else "plain text"} for p in proxies]
        print(format_table(rows, PROXY_STATUS_COLUMNS))
    if getattr(args, "metrics", False):
        _print_metrics(state)
    if not healthy:
        down = [n["name"] for n in nodes if n["state"] != "running"]
        down += [p["name"] for p in proxies if p["state"] != "up"]
        _err(f"cluster {report['name']} is not healthy: {', '.join(down)} not running")
        return 1
    return 0


#: ``status``: the proxies ``up --proxy`` started (key, column title)
PROXY_STATUS_COLUMNS = [("name", "PROXY"), ("address", "GRPC"), ("tls", "TRANSPORT"),
                        ("pid", "PID"), ("state", "STATE")]


#: ``status --metrics``: the figures shown per broker (sample name, column title).
METRICS_COLUMNS = [
    ("rocketmq_broker_tps", "TPS"),
    ("rocketmq_broker_qps", "QPS"),
    ("rmq_broker_put_messages_total", "PUT"),
    ("rmq_broker_get_messages_total", "GET"),
    ("rmq_broker_long_poll_holds", "HOLDS"),
    ("rmq_broker_replication_lag_bytes", "REPL_LAG"),
    ("rmq_acl_denials_total", "ACL_DENIED"),
]
#: ... and per NameServer.
NAMESRV_METRICS_COLUMNS = [
    ("rmq_namesrv_live_brokers", "BROKERS"),
    ("rmq_namesrv_topics", "TOPICS"),
    ("rmq_namesrv_requests_total", "REQUESTS"),
    ("rmq_namesrv_broker_registrations_total", "REGISTRATIONS"),
    ("rmq_namesrv_connections", "CONNS"),
]


def _metrics_rows(state: ClusterState) -> list[dict[str, Any]] | None:
    """Scrape every node's /metrics (``up --metrics``: NameServers, then brokers); None when
    the cluster serves none."""
    urls = metrics_urls(state)
    if not urls:
        return None
    spec = state.topology.spec
    rows = []
    for kind, props, columns in ((KIND_NAMESRV, spec.namesrv_properties, NAMESRV_METRICS_COLUMNS),
                                 (KIND_BROKER, spec.broker_properties, METRICS_COLUMNS)):
        for rec in state.records(kind):
            if rec.name in urls:
                row = _scrape_row(urls[rec.name], columns, props.get("metricsToken", ""))
                rows.append({"name": rec.name, "kind": kind, **row})
    return rows


def _scrape_row(url: str, columns: list[tuple[str, str]], token: str) -> dict[str, Any]:
    """One node's figures (``columns``) from a scrape of ``url``; ``error`` when it failed."""
    addr = url.removeprefix("http://").removesuffix(METRICS_PATH)
    row: dict[str, Any] = {"metrics": addr, "metrics_url": url}
    try:
        fams = parse_exposition(fetch_metrics(addr, token=token))
    except (OSError, ExpositionError) as exc:
        row["error"] = str(exc)
        return row
    for sample, _title in columns:
        value = sample_value(fams, sample)
        row[sample] = None if value is None else round(value, 2)
    return row


def _print_metrics(state: ClusterState) -> None:
    rows = _metrics_rows(state)
    if rows is None:
        print("metrics: not enabled for this cluster (rmq-cluster up PROFILE --metrics)")
        return
    for kind, columns in ((KIND_NAMESRV, NAMESRV_METRICS_COLUMNS), (KIND_BROKER, METRICS_COLUMNS)):
        part = [r for r in rows if r["kind"] == kind]
        if part:
            print(format_table(part, [("name", "NODE"), ("metrics", "METRICS"), *columns]))


def cmd_nodes(args: argparse.Namespace) -> int:
    state = _state(args)
    if args.json:
        _print_json([r.name for r in state.records()])
    else:
        for rec in state.records():
            print(rec.name)
    return 0


# =========================================================================== one node


def _signal_node(args: argparse.Namespace, signum: int, verb: str) -> int:
    state = _state(args)
    rec = state.node(args.node)
    if not rec.signal(signum):
        raise SupervisorError(f"{rec.name} is not running")
    if args.json:
        _print_json({"node": rec.name, "pid": rec.pid, "signal": signal.Signals(signum).name})
    else:
        print(f"{verb} {rec.name} (pid {rec.pid}, {signal.Signals(signum).name})")
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    signum = signal.SIGKILL if args.signal == "KILL" else signal.SIGTERM
    if not args.wait:
        return _signal_node(args, signum, "killed")
    state = _state(args)
    rec = state.node(args.node)
    pid = rec.pid
    if not rec.signal(signum):
        raise SupervisorError(f"{rec.name} is not running")
    if signum == signal.SIGTERM:
        rec.signal(signal.SIGCONT)
    deadline = time.monotonic() + supervisor.STOP_TIMEOUT_S
    while rec.alive and time.monotonic() < deadline:
        time.sleep(supervisor.EXIT_POLL_INTERVAL_S)
    if rec.alive:
        raise SupervisorError(f"{rec.name} (pid {pid}) is still running after {args.signal}")
    if args.json:
        _print_json({"node": rec.name, "pid": pid, "signal": args.signal, "alive": False})
    else:
        print(f"killed {rec.name} (pid {pid}, SIG{args.signal}); it is gone")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _signal_node(args, signal.SIGSTOP, "paused")


def cmd_resume(args: argparse.Namespace) -> int:
    return _signal_node(args, signal.SIGCONT, "resumed")


def cmd_restart(args: argparse.Namespace) -> int:
    """``restart NODE`` (a node, or a group: all its members); a DLedger member whose group
    has no quorum running brings its stopped peers back with it."""
    state = _state(args)
    with supervisor.locked(state.dir):
        state = supervisor.load_state(state.dir)
        records = supervisor.group_records(state, args.node)
        extra = [p for r in records for p in supervisor.dead_quorum_peers(state, r)
                 if p not in records]
        records += list({p.name: p for p in extra}.values())
        took = supervisor.restart_nodes(state, records, timeout=args.timeout)
    rec = records[0]
    if args.json:
        _print_json({"node": rec.name, "pid": rec.pid, "ready_s": round(took, 3),
                     "restarted": {r.name: r.pid for r in records}})
    else:
        names = ", ".join(f"{r.name} (pid {r.pid})" for r in records)
        print(f"restarted {names}, ready in {took:.2f} s")
        if extra:
            print(f"(started {', '.join(r.name for r in extra)} too: group "
                  f"{rec.spec.group} needs a majority running to elect a leader)")
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    state = _state(args)
    with supervisor.locked(state.dir):
        state = supervisor.load_state(state.dir)
        rec = state.node(args.node)
        took = supervisor.promote_node(state, rec)
    if args.json:
        _print_json({"node": rec.name, "role": rec.spec.role, "broker_id": rec.spec.broker_id,
                     "ready_s": round(took, 3)})
    else:
        print(f"promoted {rec.name} to {rec.spec.role} (brokerId 0), ready in {took:.2f} s")
    return 0


def log_lines(path: str, lines: int) -> list[str]:
    """The last ``lines`` lines of a node's log, read across its rotated files in order
    (``<node>.log.N`` ... ``<node>.log.1``, ``<node>.log``)."""
    if lines <= 0:
        return []
    out: list[str] = []
    for part in reversed(rotated_paths(path)):  # newest first, until there are enough
        out = [*supervisor.log_tail(part, lines - len(out)), *out]
        # log_tail reads the last 64 KiB of a file: a rotated file's older lines are further
        # back, but one file rarely holds fewer lines than a tail asks for
        if len(out) >= lines:
            break
    return out[-lines:]


def _show(line: str, pretty: bool) -> str:
    return pretty_line(line) if pretty else line


def cmd_logs(args: argparse.Namespace) -> int:
    state = _state(args)
    rec = state.node(args.node)
    pretty = getattr(args, "pretty", False)
    if not rotated_paths(rec.log) and not args.follow:
        raise SupervisorError(f"{rec.name} has no log yet ({rec.log})")
    for line in log_lines(rec.log, args.lines):
        print(_show(line, pretty))
    sys.stdout.flush()
    if not args.follow:
        return 0
    try:
        _follow(rec.log, pretty)
    except KeyboardInterrupt:
        return 0
    return 0


def _follow(path: str, pretty: bool) -> None:
    """Print what is appended to ``path``; when the node rotates it, finish the old file and
    go on with the new one from its start."""
    f = None
    from_start = False
    buf = b""

    def emit(data: bytes) -> bytes:
        *done, rest = data.split(b"\n")
        for raw in done:
            sys.stdout.write(_show(raw.decode("utf-8", "replace"), pretty) + "\n")
        sys.stdout.flush()
        return rest

    try:
        while True:
            if f is None:
                try:
                    f = open(path, "rb")  # noqa: SIM115 - kept open across loop turns
                except FileNotFoundError:
                    time.sleep(supervisor.FOLLOW_POLL_INTERVAL_S)
                    continue
                except OSError as exc:
                    raise SupervisorError(f"cannot read {path}: {exc.strerror}") from exc
                if not from_start:
                    f.seek(0, os.SEEK_END)
            chunk = f.read()
            if chunk:
                buf = emit(buf + chunk)
                continue
            try:
                rotated = os.stat(path).st_ino != os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                rotated = True
            if rotated:
                buf = emit(buf + f.read())  # what was written before the switch
                f.close()
                f, from_start = None, True
                continue
            time.sleep(supervisor.FOLLOW_POLL_INTERVAL_S)
    finally:
        if f is not None:
            f.close()


# =========================================================================== ls


def _cluster_summary(directory: Path) -> dict[str, Any]:
    try:
        state = supervisor.load_state(directory)
    except SupervisorError as exc:
        return {"name": directory.name, "dir": str(directory), "profile": None, "alive": 0,
                "total": 0, "state": "unreadable", "error": str(exc)}
    states = [r.state() for r in state.records()]
    running = sum(1 for st in states if st == "running")
    alive = sum(1 for st in states if st != "dead")
    if running == len(states) and states:
        what = "running"
    elif alive == 0:
        what = "stopped"
    else:
        what = "degraded"
    return {"name": state.name, "dir": str(directory), "profile": state.profile,
            "alive": alive, "total": len(states), "state": what,
            "namesrv_addr": state.topology.namesrv_addr}


def cmd_ls(args: argparse.Namespace) -> int:
    home = Path(args.home) if args.home else supervisor.cluster_home()
    rows = []
    if home.is_dir():
        for entry in sorted(home.iterdir()):
            if entry.is_dir() and (entry / supervisor.STATE_FILE).exists():
                rows.append(_cluster_summary(entry.resolve()))
    if args.json:
        for row in rows:  # one JSON object per line (jq -c friendly)
            sys.stdout.write(json.dumps(row, sort_keys=True) + "\n")
        sys.stdout.flush()
        return 0
    if not rows:
        print(f"no clusters in {home.resolve()}")
        return 0
    for row in rows:
        row["nodes"] = f"{row['alive']}/{row['total']}"
    print(format_table(rows, [("name", "NAME"), ("profile", "PROFILE"), ("nodes", "NODES"),
                              ("state", "STATE"), ("dir", "DIR")]))
    return 0


# =========================================================================== render / demo


def cmd_render(args: argparse.Namespace) -> int:
    from . import render

    spec = resolve_profile(args.profile, groups=args.groups)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()] if args.hosts else None
    topo = build_topology(
        spec, base_port=args.base_port if args.base_port is not None else 9876, hosts=hosts
    )
    topo = render.per_host_plan(topo)  # each host's own plan: NameServer 9876, brokers 10911
    files = render.host_files(topo, data_root=args.data_root, install_dir=args.install_dir)
    out = Path(args.out)
    written = []
    for rel, text in files.items():
        path = out / rel
        # properties owner-only (a profile's broker_properties may hold secrets), scripts 0755
        write_private(path, text, mode=render.file_mode(rel), durable=False)
        written.append(str(path))
    if args.json:
        _print_json({"profile": spec.name, "namesrv_addr": topo.namesrv_addr,
                     "nodes": [n.to_json() for n in topo.nodes], "files": written})
    else:
        for host in dict.fromkeys(n.host for n in topo.nodes):
            names = ", ".join(n.name for n in topo.nodes if n.host == host)
            print(f"{host}: {names} -> {out / host}/start.sh")
        print(f"NAMESRV_ADDR={topo.namesrv_addr}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    state = _state(args)
    down_nodes = [r.name for r in state.records() if not r.alive]
    if down_nodes and len(down_nodes) == len(state.nodes):
        raise SupervisorError(f"cluster {state.name} is not running (rmq-cluster up first)")
    access_key, secret_key = args.access_key, args.secret_key
    if access_key is None and secret_key is None:
        admin = local_admin(state.dir.resolve())  # a cluster started with --acl
        if admin is not None:
            access_key, secret_key = admin.access_key, admin.secret_key
    report = demo.run_demo(
        state.topology.namesrv_addr, count=args.count, topic=args.topic,
        say=None if args.json else (lambda line: print(line, flush=True)),
        access_key=access_key, secret_key=secret_key,
    )
    if args.json:
        _print_json(report)
    if not report["ok"]:
        _err(report["error"] or "demo failed")
        return 1
    return 0


# =========================================================================== wiring


def _bind_address(text: str) -> str:
    """``up --bind``: an IPv4 address to listen on (0.0.0.0: every interface)."""
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="cluster directory (default $RMQ_CLUSTER_HOME/<name>, the "
                                 "home defaulting to ./.rmq-cluster)")
    p.add_argument("--name", default=supervisor.DEFAULT_NAME, help="cluster name (default default)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _node_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("node", help="node name (rmq-cluster nodes lists them)")


def add_commands(sub: Any) -> None:
    """Add the cluster commands to ``sub`` (argparse subparsers)."""
    profiles = ", ".join(BUILTIN_PROFILES)
    _add_cluster_commands(sub, profiles)
    _add_node_commands(sub)
    _add_tool_commands(sub, profiles)


def _add_cluster_commands(sub: Any, profiles: str) -> None:
    """up, down, status, nodes: a whole cluster."""
    p = sub.add_parser("up", help="start a cluster and wait until it is ready",
                       description=f"Profiles: {profiles}, or a .toml profile file.")
    p.add_argument("profile", help=f"{profiles} or a .toml file")
    _common(p)
    p.add_argument("--base-port", type=int, default=None,
                   help="shift the port plan (NameServers at P, P+1; brokers at P+1035, +10 ...)")
    p.add_argument("--groups", type=int, default=None, help="broker groups (DLedger groups)")
    p.add_argument("--foreground", action="store_true",
                   help="stay attached; Ctrl-C or SIGTERM stops every node")
    p.add_argument("--timeout", type=float, default=supervisor.READY_TIMEOUT_S,
                   help="seconds to wait for readiness")
    p.add_argument("--acl", action="store_true",
                   help="brokers and NameServers enforce plain ACL; prints generated admin "
                        "credentials once")
    p.add_argument("--metrics", action="store_true",
                   help="brokers serve Prometheus /metrics on listenPort + 4, NameServers on "
                        "listenPort + 100 (loopback unless --bind); up prints every URL")
    p.add_argument("--bind", type=_bind_address, default=None, metavar="ADDR",
                   help="every node listens on ADDR (default 127.0.0.1; 0.0.0.0: every "
                        "interface, still advertising 127.0.0.1; another address is also "
                        "advertised); a profile file may set broker_properties.bindAddress")
    p.set_defaults(func=_guarded(cmd_up))

    p = sub.add_parser("down", help="stop every node (--purge: and delete the data)")
    _common(p)
    p.add_argument("--purge", action="store_true", help="delete the cluster directory")
    p.set_defaults(func=_guarded(cmd_down))

    p = sub.add_parser("status", help="nodes, pids, liveness, roles and CommitLog offsets")
    _common(p)
    p.add_argument("--metrics", action="store_true",
                   help="also scrape each node's /metrics (clusters started with --metrics)")
    p.set_defaults(func=_guarded(cmd_status))

    p = sub.add_parser("nodes", help="list node names")
    _common(p)
    p.set_defaults(func=_guarded(cmd_nodes))


def _add_node_commands(sub: Any) -> None:
    """kill, pause, resume, restart, promote, logs: one node."""
    p = sub.add_parser("kill", help="signal a node (default SIGKILL)")
    _node_arg(p)
    _common(p)
    p.add_argument("--signal", choices=("KILL", "TERM"), default="KILL")
    p.add_argument("--wait", action="store_true", help="wait until the process is gone")
    p.set_defaults(func=_guarded(cmd_kill))

    p = sub.add_parser("pause", help="SIGSTOP a node")
    _node_arg(p)
    _common(p)
    p.set_defaults(func=_guarded(cmd_pause))

    p = sub.add_parser("resume", help="SIGCONT a paused node")
    _node_arg(p)
    _common(p)
    p.set_defaults(func=_guarded(cmd_resume))

    p = sub.add_parser("restart", help="stop a node (or every node of a group) if it runs, "
                                       "start it, wait until ready; a DLedger group without a "
                                       "running majority gets its stopped members back too")
    _node_arg(p)
    _common(p)
    p.add_argument("--timeout", type=float, default=supervisor.READY_TIMEOUT_S)
    p.set_defaults(func=_guarded(cmd_restart))

    p = sub.add_parser("promote", help="make a slave its group's master (4.x manual switch)")
    _node_arg(p)
    _common(p)
    p.set_defaults(func=_guarded(cmd_promote))

    p = sub.add_parser(
        "logs", help="a node's log (across its rotated files)",
        description="A node's log, oldest to newest across logs/<node>.log.N ... <node>.log. "
                    "Nodes rotate their log at $RMQ_CLUSTER_LOG_MAX_BYTES (default 64 MiB), "
                    "keeping $RMQ_CLUSTER_LOG_BACKUPS files (default 5), read when a node starts.")
    _node_arg(p)
    _common(p)
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("-n", "--lines", type=non_negative, default=DEFAULT_LOG_LINES)
    p.add_argument("--pretty", action="store_true",
                   help="render JSON log lines for a human (time LEVEL [node] event key=value)")
    p.set_defaults(func=_guarded(cmd_logs))


def _add_tool_commands(sub: Any, profiles: str) -> None:
    """ls, render, demo."""
    p = sub.add_parser("ls", help="clusters under $RMQ_CLUSTER_HOME and their state",
                       description="Every cluster directory under the home ($RMQ_CLUSTER_HOME, "
                                   "default ./.rmq-cluster): profile, nodes alive/total, state "
                                   "(running, degraded, stopped).")
    p.add_argument("--home", help="look here instead of $RMQ_CLUSTER_HOME")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=_guarded(cmd_ls))

    p = sub.add_parser("render", help="per-host configs and start scripts for a deployment")
    p.add_argument("profile", help=f"{profiles} or a .toml file")
    p.add_argument("--hosts", help="h1,h2,...: nodes are spread over these (brokerIP1 = host)")
    p.add_argument("--out", required=True, help="output directory (one subdirectory per host)")
    p.add_argument("--base-port", type=int, default=None)
    p.add_argument("--groups", type=int, default=None)
    p.add_argument("--data-root", default="data",
                   help="each node's data parent directory (relative: under the host directory)")
    p.add_argument("--install-dir", default=DEFAULT_INSTALL_DIR,
                   help="where each host's directory is copied (the systemd units' paths)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_guarded(cmd_render))

    p = sub.add_parser("demo", help="send a few messages to the running cluster and read them back")
    _common(p)
    p.add_argument("--count", type=int, default=5)
    p.add_argument("--topic", default="RmqClusterDemo")
    p.add_argument("--access-key", default=os.environ.get("RMQ_ACCESS_KEY"),
                   help="ACL accessKey (default: $RMQ_ACCESS_KEY, else the --acl cluster's admin)")
    p.add_argument("--secret-key", default=os.environ.get("RMQ_SECRET_KEY"),
                   help="ACL secretKey (default: $RMQ_SECRET_KEY)")
    p.set_defaults(func=_guarded(cmd_demo))

