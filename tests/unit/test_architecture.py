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
    "cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos",
    "spark_jobs", "controller",
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


# --------------------------------------------------------------------------- layers

#: What each part may import besides itself (design.md: imports go downward only). The client
#: (``client/``) sits on the kernel; no node imports it.
LAYERS: dict[str, frozenset[str]] = {
    "cluster": frozenset(),
    "client": frozenset({"cluster"}),
    "store": frozenset({"cluster"}),
    "ha": frozenset({"cluster", "store"}),
    "dledger": frozenset({"cluster", "store"}),
    "broker": frozenset({"cluster", "store", "ha", "dledger"}),
    "namesrv": frozenset({"cluster"}),
    "controller": frozenset({"cluster", "store", "dledger"}),
    "spark_jobs": frozenset({"cluster", "dledger"}),
    "deploy": frozenset({"cluster", "client"}),
    "chaos": frozenset({"cluster", "client", "deploy"}),
}
#: The entry modules on top of everything: they wire the parts' commands together.
ENTRY_MODULES = frozenset({"deploy/cli.py", "deploy/__main__.py"})
#: Pure cores: bytes/events in, bytes/events/decisions out; no trio, not even for types.
PURE_CORES = (
    "cluster/remoting/codec.py", "cluster/remoting/codes.py", "cluster/remoting/headers.py",
    "cluster/remoting/connection_state.py", "cluster/remoting/input_budget.py",
    "cluster/remoting/dispatch.py", "cluster/remoting/held.py", "cluster/remoting/errors.py",
    "cluster/remoting/address.py",
    "cluster/protocol/message.py", "cluster/protocol/route.py", "cluster/protocol/fastjson.py",
    "cluster/filter/sql92.py", "cluster/acl/validator.py", "cluster/acl/rules.py",
    "cluster/acl/permission.py", "cluster/acl/signing.py", "cluster/config.py",
    "cluster/clock.py",
    "namesrv/route_info.py", "namesrv/processor.py",
    "store/mapped_file.py", "store/commitlog.py", "store/consume_queue.py", "store/index_file.py",
    "store/checkpoint.py", "store/recovery.py", "store/dispatcher.py", "store/record.py",
    "dledger/core.py", "dledger/messages.py", "dledger/log_storage.py",
    "ha/protocol.py", "ha/master.py", "ha/access.py",
    "cluster/protocol/names.py", "store/paths.py",
    "chaos/checker.py", "chaos/nemesis.py",
    "spark_jobs/decode.py",
    "controller/state.py", "cluster/protocol/controller.py", "store/epoch_file.py",
)


def _part(parts: tuple[str, ...]) -> str:
    """``("store", "x")`` -> ``store``: a part is a top-level folder."""
    return parts[0]


def test_imports_go_downward_only() -> None:
    """Every first-party import, wherever it stands (module level, inside a function, under
    ``TYPE_CHECKING``), goes to the importing part itself or to a part below it."""
    upward = []
    for top in INSTALLED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if str(rel) in ENTRY_MODULES:
                continue
            src = _part(rel.parts)
            for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
                names = module.split(".")
                if names[0] != NAMESPACE or len(names) < 2:
                    continue
                dst = _part(tuple(names[1:]))
                if dst != src and dst not in LAYERS[src]:
                    upward.append(f"{rel}:{line}: {src} imports {module}")
    assert not upward, "imports that go up or sideways:\n" + "\n".join(upward)


def test_pure_cores_import_no_trio() -> None:
    offenders = []
    for rel in PURE_CORES:
        path = ROOT / rel
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path))):
            if module.split(".")[0] == "trio":
                offenders.append(f"{rel}:{line}: import {module}")
    assert not offenders, "trio in a pure core:\n" + "\n".join(offenders)
