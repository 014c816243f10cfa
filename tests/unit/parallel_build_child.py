"""What each spawned "worker" of tests/unit/test_parallel_suite.py runs. It lives in a module of
its own, imported by its dotted name: a spawned child unpickles its target by module name, and a
test module's name under ``--import-mode=importlib`` depends on the checkout's folder name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.compat.conftest import _fresh_maven_build


def maven_goals(project: Path) -> list[str]:
    return ["package", f"-Dmdep.outputFile={project / 'target' / 'classpath.txt'}"]


def build_in_worker(project: str, mvn: str, ready: Any, out: str) -> None:
    ready.wait(timeout=60)
    root = Path(project)
    cp = _fresh_maven_build(mvn, root, root / "target", maven_goals(root), "the fake probe")
    Path(out).write_text(cp)
