"""Interleaved A/B of one benchmark command on two git revisions; prints one JSON object.

    python3 bench/ab.py --base 4ccfe94~1 --new main --rounds 5 \\
        --field 'send_256_in_flight.broker_cpu_us_per_msg' -- python3 bench/produce.py --seconds 2

Each revision is checked out in a temporary ``git worktree`` (detached) with a venv of its own
(``python3 -m venv --system-site-packages``, then ``pip install -e .``: the machine's packages
satisfy what they can, a dependency the revision adds and the machine lacks is installed into
that venv alone), so the command, run from that worktree with the venv's ``bin`` first on
``PATH`` (a leading ``python``/``python3`` is the venv's interpreter), imports and spawns that
revision's code.
The command then runs ``--rounds`` times on each, alternating base/new and new/base round by
round (ABBA: a drift of the machine's load falls on both alike). Every run must print a JSON
object on stdout (the whole stdout, or its last line that is one).

For each chosen field (``--field``, a dotted path into that object; ``*`` matches every key
or index at its level; without ``--field``, every numeric leaf whose path matches ``--match``)
the output gives every value per revision in run order, their medians and new/base. On a
shared, loaded machine trust CPU time per message (``*cpu_us*``) over rates: it moves much
less with the load beside it. Each run's load average is recorded beside its values.

``--workdir DIR`` keeps the worktrees and venvs there, one per commit (reused by a later run:
a quiet re-run pays no install); by default they live in a temp dir removed at the end.
Runs that fail (exit status, no JSON, ``--timeout``) are listed, not fatal; the exit status is
1 when a revision has no successful run, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

#: the repository this script belongs to (``--repo`` names another)
REPO = Path(__file__).resolve().parents[1]
DEFAULT_MATCH = r"cpu_us|per_s"
SIDES = ("base", "new")
#: how much of a failed run's stderr the output keeps
STDERR_TAIL_CHARS = 2000


def log(msg: str) -> None:
    print(f"ab: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ pure parts


def run_order(rounds: int) -> list[str]:
    """The side of each run: base, new / new, base / base, new / ... (ABBA)."""
    order: list[str] = []
    for i in range(rounds):
        order += list(SIDES) if i % 2 == 0 else list(reversed(SIDES))
    return order


def parse_output(stdout: str) -> dict[str, Any] | None:
    """The JSON object a run printed: its whole stdout, else its last line that is one."""
    text = stdout.strip()
    candidates = [text, *reversed(text.splitlines())]
    for candidate in candidates:
        with contextlib.suppress(ValueError):
            value = json.loads(candidate)
            if isinstance(value, dict):
                return value
    return None


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        yield from ((str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        yield from ((str(i), v) for i, v in enumerate(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def select(doc: Any, pattern: str) -> dict[str, float]:
    """The numeric values at ``pattern`` (dotted; ``*``: any key or index) in ``doc``, by
    their concrete path."""
    found: dict[str, float] = {}

    def walk(value: Any, parts: list[str], path: list[str]) -> None:
        if not parts:
            number = _number(value)
            if number is not None:
                found[".".join(path)] = number
            return
        head, rest = parts[0], parts[1:]
        for key, child in _children(value):
            if head in ("*", key):
                walk(child, rest, [*path, key])

    walk(doc, pattern.split("."), [])
    return found


def numeric_leaves(doc: Any, match: str) -> dict[str, float]:
    """Every numeric leaf of ``doc`` whose dotted path matches the regex ``match``."""
    rx = re.compile(match)
    found: dict[str, float] = {}

    def walk(value: Any, path: list[str]) -> None:
        number = _number(value)
        if number is not None and path and rx.search(".".join(path)):
            found[".".join(path)] = number
        for key, child in _children(value):
            walk(child, [*path, key])

    walk(doc, [])
    return found


def summarize(values: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    """Per field: each side's values (run order) and median, and new/base of the medians."""
    out: dict[str, Any] = {}
    for field, sides in sorted(values.items()):
        row: dict[str, Any] = {}
        for side in SIDES:
            got = sides.get(side, [])
            row[side] = {"median": statistics.median(got) if got else None, "values": got}
        base, new = row["base"]["median"], row["new"]["median"]
        row["new_over_base"] = round(new / base, 4) if base and new is not None else None
        out[field] = row
    return out


# ------------------------------------------------------------------ trees and runs


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def prepare_tree(repo: Path, commit: str, parent: Path) -> Path:
    """A detached worktree of ``commit`` under ``parent`` with its venv, installed (reused
    when a complete one is there already)."""
    tree = parent / commit[:12]
    python = tree / ".venv" / "bin" / "python"
    done = tree / ".venv" / ".ab-installed"
    if done.exists():
        log(f"reusing {tree}")
        return tree
    if not tree.exists():
        git(repo, "worktree", "add", "--detach", str(tree), commit)
    log(f"venv and install in {tree}")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tree / ".venv")],
                   check=True)  # fmt: skip
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree)],
                   check=True, cwd=tree, stdout=sys.stderr)  # fmt: skip
    done.write_text(commit + "\n")
    return tree


def remove_tree(repo: Path, tree: Path) -> None:
    with contextlib.suppress(subprocess.CalledProcessError):
        git(repo, "worktree", "remove", "--force", str(tree))
    with contextlib.suppress(subprocess.CalledProcessError):
        git(repo, "worktree", "prune")


def command_for(tree: Path, command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``command`` as run in ``tree``: its venv's python for a leading python, its venv first
    on PATH."""
    bin_dir = tree / ".venv" / "bin"
    argv = list(command)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = str(bin_dir / "python")
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(tree / ".venv")
    env.pop("PYTHONPATH", None)  # (the tree's own code, not the caller's)
    return argv, env


def run_once(tree: Path, command: Sequence[str], timeout_s: float,
             verbose: bool) -> tuple[dict[str, Any] | None, str]:  # fmt: skip
    """Run ``command`` in ``tree`` in a process group of its own (a timeout ends the group:
    the nodes a benchmark spawned too); its JSON (None: failed) and why it failed."""
    argv, env = command_for(tree, command)
    proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=None if verbose else subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"timed out after {timeout_s:g} s"
    finally:
        with contextlib.suppress(ProcessLookupError):  # leftovers of a finished run
            os.killpg(proc.pid, signal.SIGKILL)
    doc = parse_output(stdout or "")
    if proc.returncode != 0 or doc is None:
        tail = (stderr or "")[-STDERR_TAIL_CHARS:]
        return None, f"exit {proc.returncode}{'' if doc else ', no JSON'}: {tail}"
    return doc, ""


def fields_of(doc: dict[str, Any], patterns: Sequence[str], match: str) -> dict[str, float]:
    if not patterns:
        return numeric_leaves(doc, match)
    found: dict[str, float] = {}
    for pattern in patterns:
        found.update(select(doc, pattern))
    return found


def run_ab(args: argparse.Namespace, trees: dict[str, Path],
           commits: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    values: dict[str, dict[str, list[float]]] = {}
    runs: list[dict[str, Any]] = []
    for i, side in enumerate(run_order(args.rounds)):
        load = os.getloadavg()[0]
        log(f"run {i + 1}/{2 * args.rounds}: {side} ({commits[side][:12]}), load {load:.1f}")
        t0 = time.monotonic()
        doc, why = run_once(trees[side], args.command, args.timeout, args.verbose)
        run: dict[str, Any] = {"side": side, "load_avg_1m": round(load, 2),
                               "elapsed_s": round(time.monotonic() - t0, 1)}  # fmt: skip
        if doc is None:
            run["failed"] = why
            log(f"run {i + 1} failed: {why[:200]}")
        else:
            for field, value in fields_of(doc, args.field, args.match).items():
                values.setdefault(field, {}).setdefault(side, []).append(value)
            if args.keep_output:
                run["output"] = doc
        runs.append(run)
    return {
        "benchmark": "ab",
        "command": list(args.command),
        "rounds": args.rounds,
        "base": {"rev": args.base, "commit": commits["base"]},
        "new": {"rev": args.new, "commit": commits["new"]},
        "fields": summarize(values),
        "runs": runs,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Interleaved A/B of a benchmark command on two git revisions.",
        epilog="Exit: 0 done, 1 a revision had no successful run, 2 bad arguments.",
    )
    p.add_argument("--base", required=True, help="the base revision (any git rev)")
    p.add_argument("--new", default="HEAD", help="the new revision (default HEAD)")
    p.add_argument("--rounds", type=int, default=3, help="runs per revision (default 3)")
    p.add_argument("--field", action="append", default=[], metavar="PATH",
                   help="a dotted path into the run's JSON, '*' for any key (repeatable)")
    p.add_argument("--match", default=DEFAULT_MATCH,
                   help=f"without --field: numeric leaves whose path matches this regex "
                        f"(default {DEFAULT_MATCH!r})")  # fmt: skip
    p.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: this)")
    p.add_argument("--workdir", type=Path, default=None,
                   help="keep the worktrees and venvs here, one per commit, and reuse them")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (1800)")
    p.add_argument("--keep-output", action="store_true", help="each run's whole JSON too")
    p.add_argument("-v", "--verbose", action="store_true", help="the runs' stderr through")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the benchmark command")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        p.error("no benchmark command (put it after --)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repo = args.repo.resolve()
    try:
        commits = {s: git(repo, "rev-parse", "--verify", f"{getattr(args, s)}^{{commit}}")
                   for s in SIDES}  # fmt: skip
    except subprocess.CalledProcessError as exc:
        log(f"not a revision of {repo}: {exc.stderr.strip()}")
        return 2
    keep = args.workdir is not None
    parent = args.workdir.resolve() if keep else Path(tempfile.mkdtemp(prefix="rmq-ab-"))
    parent.mkdir(parents=True, exist_ok=True)
    trees: dict[str, Path] = {}
    try:
        for side in SIDES:
            trees[side] = prepare_tree(repo, commits[side], parent)
        report = run_ab(args, trees, commits)
    finally:
        if not keep:
            for tree in set(trees.values()):
                remove_tree(repo, tree)
            with contextlib.suppress(OSError):
                for tree in parent.iterdir():  # (a tree whose set-up failed half way)
                    remove_tree(repo, tree)
            shutil.rmtree(parent, ignore_errors=True)
    print(json.dumps(report, indent=2))
    ok = {r["side"] for r in report["runs"] if "failed" not in r}
    return 0 if ok == set(SIDES) else 1


if __name__ == "__main__":
    sys.exit(main())
