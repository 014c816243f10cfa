"""Rules of the code's shape that a test can check (``../shared/design.md``).

* One import namespace: the repository's top-level folders are installed as ``rmq_cluster.<folder>``
  and every first-party import names them so; nothing imports a bare ``store`` or ``cluster``
  (those would come from the current directory or from an application's own modules).
* ``pyproject.toml`` lists every package folder, so a non-editable install holds all of them.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "rmq_cluster"
#: the repository's top-level folders that are installed, each as ``rmq_cluster.<folder>``
INSTALLED = (
    "cluster", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos", "spark_jobs",
)
#: folders whose Python files import the installed packages
IMPORTERS = (*INSTALLED, "tests", "bench")


def _python_files() -> Iterator[Path]:
    for top in IMPORTERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "node_modules" not in path.parts:
                yield path


def _imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_first_party_imports_use_the_namespace() -> None:
    bare = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        for line, module in _imported_modules(tree):
            if module.split(".")[0] in INSTALLED:
                bare.append(f"{path.relative_to(ROOT)}:{line}: import {module}")
    assert not bare, "imports outside the rmq_cluster namespace:\n" + "\n".join(bare)


def _names_a_module(text: str) -> bool:
    """``text`` is a dotted path into an installed folder (``"broker.processors.pull.X"``), as
    ``monkeypatch.setattr`` or ``python -m`` take them."""
    parts = text.split(".")
    if len(parts) < 2 or parts[0] not in INSTALLED or not all(p.isidentifier() for p in parts):
        return False
    below = ROOT / parts[0] / parts[1]
    return below.is_dir() or below.with_suffix(".py").is_file()


def test_module_paths_in_strings_use_the_namespace() -> None:
    """A bare dotted path in a string imports a second copy of a module from the checkout (or
    nothing, installed): a monkeypatch on it patches nothing the code under test uses."""
    bare = []
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        labels = {  # log components are names, not module paths
            id(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            for kw in node.keywords if kw.arg == "component"
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and id(node) not in labels and _names_a_module(text):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not bare, "module paths outside the rmq_cluster namespace:\n" + "\n".join(bare)


def test_pyproject_maps_every_package_folder() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    on_disk = {
        NAMESPACE + "." + ".".join(init.parent.relative_to(ROOT).parts)
        for top in INSTALLED
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert listed == on_disk
    assert mapping == {f"{NAMESPACE}.{top}": top for top in INSTALLED}
    assert not (ROOT / NAMESPACE).exists(), "rmq_cluster is a namespace mapped by pyproject.toml"
