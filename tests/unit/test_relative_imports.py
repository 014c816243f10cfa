"""``tools/relative_imports.py``: first-party imports of product code become relative, the
converted tree imports as before once installed, and a second run changes nothing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "relative_imports.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("relative_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PYPROJECT = """
[tool.setuptools.package-dir]
"rmq_cluster.alpha" = "alpha"
"rmq_cluster.beta" = "beta"
"""

SOURCES = {
    "alpha/__init__.py": "from rmq_cluster.alpha.core import VALUE as VALUE\n",
    "alpha/core.py": "VALUE = 41\n",
    "alpha/deep/__init__.py": "",
    "alpha/deep/leaf.py": """\
        '''Run as ``python -m rmq_cluster.alpha.deep.leaf``; see rmq_cluster.beta.'''
        from __future__ import annotations

        from typing import TYPE_CHECKING

        import rmq_cluster.alpha.core as core_module
        from rmq_cluster.alpha import core
        from rmq_cluster.alpha.deep import sibling
        from rmq_cluster.beta.shell import (
            shout,
            whisper,  # a comment stays
        )
        from rmq_cluster.beta.shell \\
            import whisper as again

        if TYPE_CHECKING:
            from rmq_cluster.beta.shell import Shell

        ARGV = ["python", "-m", "rmq_cluster.alpha.deep.leaf"]


        def total(s: Shell | None = None) -> int:
            from rmq_cluster import beta

            return core.VALUE + sibling.ONE + core_module.VALUE * 0 + beta.TWO + len(
                shout() + whisper() + again())
        """,
    "alpha/deep/sibling.py": "ONE = 1\n",
    "beta/__init__.py": "TWO = 2\n",
    "beta/shell.py": """\
        from rmq_cluster.alpha.core import VALUE


        class Shell:
            pass


        def shout() -> str:
            return "x" * (VALUE - 41)


        def whisper() -> str:
            return ""
        """,
}

EXPECTED_LEAF = """\
'''Run as ``python -m rmq_cluster.alpha.deep.leaf``; see rmq_cluster.beta.'''
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import core as core_module
from .. import core
from . import sibling
from ...beta.shell import (
    shout,
    whisper,  # a comment stays
)
from ...beta.shell \\
    import whisper as again

if TYPE_CHECKING:
    from ...beta.shell import Shell

ARGV = ["python", "-m", "rmq_cluster.alpha.deep.leaf"]


def total(s: Shell | None = None) -> int:
    from ... import beta

    return core.VALUE + sibling.ONE + core_module.VALUE * 0 + beta.TWO + len(
        shout() + whisper() + again())
"""


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel, text in SOURCES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("from rmq_cluster.alpha import core\n")
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args, str(root)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_rewrites_every_form_and_leaves_strings_and_tests(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert _run(root, "--check").returncode == 1
    done = _run(root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "alpha/__init__.py", "alpha/deep/leaf.py", "beta/shell.py",
    ]
    assert (root / "alpha/deep/leaf.py").read_text() == EXPECTED_LEAF
    assert (root / "alpha/__init__.py").read_text() == "from .core import VALUE as VALUE\n"
    assert (root / "beta/shell.py").read_text().startswith("from ..alpha.core import VALUE\n")
    assert (root / "tests/test_x.py").read_text() == "from rmq_cluster.alpha import core\n"


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert _run(root).returncode == 0
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    again = _run(root, "--check")
    assert (again.returncode, again.stdout) == (0, "")
    assert _run(root).stdout == ""
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before


def test_the_converted_tree_imports_as_installed(tmp_path: Path) -> None:
    """The rewritten modules run under the namespace the install gives them (here: a
    ``rmq_cluster/`` of links to the folders, as bench/checkout.py makes)."""
    root = _tree(tmp_path)
    assert _run(root).returncode == 0
    ns = tmp_path / "ns" / "rmq_cluster"
    ns.mkdir(parents=True)
    for folder in ("alpha", "beta"):
        (ns / folder).symlink_to(root / folder)
    code = "from rmq_cluster.alpha.deep.leaf import total; print(total())"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False,
                         env={"PYTHONPATH": str(tmp_path / "ns")})
    assert (out.returncode, out.stdout.strip()) == (0, "44"), out.stderr


def test_an_import_that_binds_the_namespace_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "beta/bad.py").write_text("import rmq_cluster.alpha.core\n")
    refused = _run(root)
    assert refused.returncode == 2
    assert "beta/bad.py:1" in refused.stderr and "binds rmq_cluster itself" in refused.stderr
    # nothing was half-written: alpha/ (converted before beta/ in memory) is as it was
    assert (root / "alpha/__init__.py").read_text() == SOURCES["alpha/__init__.py"]


@pytest.mark.parametrize(("module", "target", "expected"), [
    ("rmq_cluster.broker.processors.send", "rmq_cluster.store.record", "...store.record"),
    ("rmq_cluster.broker.processors.send", "rmq_cluster.broker.processors.common", ".common"),
    ("rmq_cluster.broker.processors.send", "rmq_cluster.broker.processors", "."),
    ("rmq_cluster.broker.__init__", "rmq_cluster.broker.node", ".node"),
    ("rmq_cluster.broker.node", "rmq_cluster", ".."),
])
def test_relative_names(module: str, target: str, expected: str) -> None:
    assert _tool().relative_name(module, target) == expected
