"""Chaos runs on disk (``rmq-cluster chaos run`` writes result.json and timeline.svg into its
output directory): found by listing the configured directories, never by a path a request
names."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import attrs

from .settings import MAX_CHAOS_RUNS, MAX_RESULT_BYTES

_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


@attrs.frozen
class ChaosRun:
    id: str
    name: str
    path: Path
    profile: str
    fault: str
    verdict: str
    sent: int
    acked: int
    lost: int
    audit: str


def roots(configured: tuple[str, ...]) -> list[Path]:
    return [Path(d) for d in configured] or [Path(tempfile.gettempdir())]


def _candidates(dirs: list[Path]) -> list[Path]:
    found = []
    for d in dirs:
        if (d / "result.json").is_file():
            found.append(d)
            continue
        try:
            found += [p for p in d.iterdir() if p.is_dir() and (p / "result.json").is_file()]
        except OSError:
            continue
    return sorted(found, key=lambda p: (p / "result.json").stat().st_mtime, reverse=True)


def read_result(path: Path) -> dict[str, Any] | str:
    """result.json, or why it cannot be shown."""
    try:
        with (path / "result.json").open("rb") as f:
            raw = f.read(MAX_RESULT_BYTES + 1)
    except OSError as exc:
        return str(exc)
    if len(raw) > MAX_RESULT_BYTES:
        return f"result.json is over {MAX_RESULT_BYTES} bytes"
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        return f"result.json is not JSON: {exc}"
    return obj if isinstance(obj, dict) else "result.json is not an object"


def list_runs(configured: tuple[str, ...]) -> list[ChaosRun]:
    runs = []
    for path in _candidates(roots(configured))[:MAX_CHAOS_RUNS]:
        if not _RUN_ID.fullmatch(path.name):
            continue
        r = read_result(path)
        if isinstance(r, str):
            runs.append(ChaosRun(path.name, path.name, path, "", "", r, 0, 0, 0, ""))
            continue
        audit = r.get("replica_audit") or {}
        runs.append(ChaosRun(
            path.name, path.name, path, str(r.get("profile", "")), str(r.get("fault", "")),
            str(r.get("verdict", "")), int(r.get("invoked", 0) or 0),
            int(r.get("acked", 0) or 0), int(r.get("lost", 0) or 0),
            str(audit.get("verdict", "")) if isinstance(audit, dict) else ""))
    return runs


def find_run(configured: tuple[str, ...], run_id: str) -> ChaosRun | None:
    if not _RUN_ID.fullmatch(run_id):
        return None
    return next((r for r in list_runs(configured) if r.id == run_id), None)
