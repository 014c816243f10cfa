"""On a fresh clone, without an install, pyright resolves every first-party import of the
product code (issue 32: the folder tree is the import tree). ``tools/pyright_imports.py`` does
the clone, the empty environment and the pinned pyright; here two broken imports are planted in
the clone, so the check must find exactly those two: it runs, it reads the product code, and
nothing else is unresolved. Slow: pyright reads every product file (about a minute)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_fresh_clone_resolves_every_first_party_import() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "pyright_imports.py"), str(ROOT),
         "--plant", "cluster/clock.py:from .no_such_module import GONE",
         "--plant", "store/paths.py:from . import no_such_name"],
        capture_output=True, text=True, timeout=1900, check=False,
    )
    assert run.returncode == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["files"] > 150
    unresolved = [line.split(":")[0] + ": " + line.split(": ", 1)[1]
                  for line in result["first_party_unresolved"]]
    assert unresolved == [
        'cluster/clock.py: Import ".no_such_module" could not be resolved',
        'store/paths.py: "no_such_name" is unknown import symbol',
    ], result["first_party_unresolved"]
