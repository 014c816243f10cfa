"""Does the tree resolve its own imports without an install? pyright on a fresh clone says.

Usage::

    python3 tools/pyright_imports.py [REPO]     # REPO: a git repository (default: this one)

It clones REPO's HEAD into a temporary directory, makes an empty virtual environment (no
rmq_cluster installed, no dependency either), runs pyright (npm ``pyright``, the version pinned
below, installed on first use under ``~/.cache/rmq-cluster-tools/``) with the clone's
``pyrightconfig.json`` and prints one JSON line: how many files it analysed, the first-party
imports it could not resolve (each with file and line), and how many third-party ones (expected:
the environment is empty). Exit 0 when no first-party import is unresolved, 1 otherwise, 2 when
pyright could not run. ``--plant FILE:LINE`` (tests) appends LINE to FILE in the clone first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

PYRIGHT_VERSION: Final = "1.1.414"
CACHE: Final = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rmq-cluster-tools"
#: the repository's product folders (pyproject.toml maps each to rmq_cluster.<folder>)
FIRST_PARTY_ROOTS: Final = frozenset({
    "rmq_cluster", "broker", "chaos", "cli", "client", "cluster", "controller", "deploy",
    "dledger", "ha", "namesrv", "spark_jobs", "store",
})
_MISSING_MODULE: Final = re.compile(r'Import "([^"]+)" could not be resolved$')
_MISSING_NAME: Final = re.compile(r'"([^"]+)" is unknown import symbol')
PYRIGHT_TIMEOUT_S: Final = 1800


def pyright() -> Path:
    """The pinned pyright's command, installed from npm on first use."""
    home = CACHE / f"pyright-{PYRIGHT_VERSION}"
    exe = home / "node_modules" / ".bin" / "pyright"
    if not exe.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed to install pyright (Node.js 18+)")
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                        "--prefix", str(home), f"pyright@{PYRIGHT_VERSION}"],
                       check=True, timeout=600)
    return exe


def first_party(diagnostic: dict[str, Any]) -> bool:
    """An unresolved import of the product's own modules (relative, or by a folder's name)."""
    message = diagnostic.get("message", "")
    if _MISSING_NAME.search(message):
        return True
    found = _MISSING_MODULE.search(message)
    return found is not None and (
        found.group(1).startswith(".") or found.group(1).split(".")[0] in FIRST_PARTY_ROOTS)


def check(repo: Path, plant: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rmq-pyright-") as tmp:
        clone, env = Path(tmp) / "clone", Path(tmp) / "env"
        subprocess.run(["git", "clone", "--quiet", str(repo), str(clone)], check=True,
                       timeout=300)
        for spec in plant:
            rel, _, line = spec.partition(":")
            with (clone / rel).open("a") as f:
                f.write(f"\n{line}\n")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True,
                       timeout=300)
        started = time.monotonic()
        run = subprocess.run([str(pyright()), "--outputjson", "--pythonpath",
                              str(env / "bin" / "python")],
                             cwd=clone, capture_output=True, text=True,
                             timeout=PYRIGHT_TIMEOUT_S, check=False)
        try:
            report = json.loads(run.stdout)
        except json.JSONDecodeError:
            raise RuntimeError(f"pyright printed no report: {run.stderr[-2000:]}") from None
        imports = [d for d in report.get("generalDiagnostics", [])
                   if d.get("rule") in ("reportMissingImports", "reportAttributeAccessIssue")]
        mine = [d for d in imports if first_party(d)]
        return {
            "pyright": PYRIGHT_VERSION,
            "files": report.get("summary", {}).get("filesAnalyzed", 0),
            "seconds": round(time.monotonic() - started, 1),
            "first_party_unresolved": [
                f"{Path(d['file']).relative_to(clone)}:{d['range']['start']['line'] + 1}: "
                f"{d['message']}" for d in mine
            ],
            "third_party_unresolved": sum(
                1 for d in imports if d not in mine and _MISSING_MODULE.search(d["message"])),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repo", nargs="?", type=Path,
                        default=Path(__file__).resolve().parents[1])
    parser.add_argument("--plant", action="append", default=[], metavar="FILE:LINE",
                        help="append LINE to FILE in the clone before the check (tests)")
    args = parser.parse_args(argv)
    try:
        result = check(args.repo, args.plant)
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"pyright_imports: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 1 if result["first_party_unresolved"] else 0


if __name__ == "__main__":
    sys.exit(main())
