"""Rules of the code's shape that a test can check (``docs/architecture.md``).

Each rule is a function over a tree (``root``): the real tests run it over this checkout, and a
planted test per rule runs it over a small tree written to a temporary directory with the one
violation the rule must catch, so a rule that stops biting fails too.

* One import namespace: the repository's top-level folders are installed as ``rmq_cluster.<folder>``
  and every first-party import names them so; nothing imports a bare ``store`` or ``cluster``
  (those would come from the current directory or from an application's own modules).
* ``pyproject.toml`` lists every package folder, so a non-editable install holds all of them.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "rmq_cluster"
#: the repository's top-level folders that are installed, each as ``rmq_cluster.<folder>``
INSTALLED = (
    "cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos",
    "spark_jobs", "controller", "dashboard", "proxy", "cli",
)
#: folders whose Python files import the installed packages
IMPORTERS = (*INSTALLED, "tests", "bench")


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for every rule of the run."""
    return ast.parse(path.read_text(), str(path))


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
        tree = _parsed(path)
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
        tree = _parsed(path)
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


# --------------------------------------------------------------------------- resolving imports


def _module_of(root: Path, path: Path) -> tuple[str, bool]:
    """``broker/processors/send.py`` -> (``rmq_cluster.broker.processors.send``, False); a
    package by its ``__init__.py`` (True: relative imports count from the package itself)."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join((NAMESPACE, *parts[:-1])), True
    return ".".join((NAMESPACE, *parts)), False


def _product_files(root: Path) -> Iterator[Path]:
    for top in INSTALLED:
        yield from sorted((root / top).rglob("*.py"))


def _dynamic_target(node: ast.Call) -> ast.expr | None:
    """The module argument of ``importlib.import_module(x)``, ``import_module(x)`` or
    ``__import__(x)``, or None when ``node`` is another call."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name in ("import_module", "__import__") and node.args:
        return node.args[0]
    return None


def _imports(module: str, tree: ast.AST, is_package: bool) -> Iterator[tuple[int, str]]:
    """Every module ``module`` names in an import, absolute and resolved: ``import a.b``;
    ``from a import b`` (both ``a`` and ``a.b``: ``b`` may be a submodule); relative imports
    resolved against the package (``...`` above the namespace gives ``<outside>``); and the
    string a dynamic import (``importlib.import_module("a.b")``, ``__import__``) loads."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                if node.level - 1 >= len(anchor):
                    yield node.lineno, "<outside>"
                    continue
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call):
            target = _dynamic_target(node)
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                yield node.lineno, target.value


def _part_of(dotted: str) -> str | None:
    """The top-level part a resolved import lands in (``rmq_cluster.store.x`` -> ``store``),
    or None outside the product (the stdlib, a dependency, the bare namespace)."""
    names = dotted.split(".")
    if names[0] != NAMESPACE or len(names) < 2:
        return None
    return names[1]


# --------------------------------------------------------------------------- layers

#: What each part may import besides itself (docs/architecture.md: imports go downward only).
#: The client (``client/``) sits on the kernel; no node imports it. ``cli`` is the command
#: line on top of everything: it wires the parts' commands together, nothing imports it.
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
    # mqproxy (issue 34): the gRPC endpoint speaks remoting through the client
    "proxy": frozenset({"cluster", "client"}),
    "deploy": frozenset({"cluster", "client", "proxy"}),
    "chaos": frozenset({"cluster", "client", "deploy"}),
    "dashboard": frozenset({"cluster", "client", "deploy"}),
    "cli": frozenset({
        "cluster", "client", "store", "ha", "dledger", "broker", "namesrv", "controller",
        "spark_jobs", "deploy", "chaos", "dashboard", "proxy",
    }),
}
#: Pure cores: bytes/events in, bytes/events/decisions out; no trio, not even for types, and
#: nothing they import (however deep) imports trio either.
PURE_CORES = (
    "cluster/remoting/codec.py", "cluster/remoting/codes.py", "cluster/remoting/headers.py",
    "cluster/remoting/connection_state.py", "cluster/remoting/input_budget.py",
    "cluster/remoting/processors.py", "cluster/remoting/held.py", "cluster/remoting/errors.py",
    "cluster/remoting/address.py", "cluster/remoting/admission.py",
    "cluster/protocol/message.py", "cluster/protocol/crc.py", "cluster/protocol/route.py",
    "cluster/protocol/fastjson.py",
    "cluster/filter/sql92.py", "cluster/acl/validator.py", "cluster/acl/rules.py",
    "cluster/acl/permission.py", "cluster/acl/signing.py", "cluster/config.py",
    "cluster/clock.py", "cluster/cli_args.py", "cluster/home.py",
    "proxy/grpc_wire.py", "proxy/convert.py", "proxy/auth.py", "proxy/polling.py",
    "proxy/invisible.py", "proxy/renewal.py",
    "namesrv/route_info.py", "namesrv/processor.py",
    "store/mapped_file.py", "store/commitlog.py", "store/consume_queue.py", "store/index_file.py",
    "store/checkpoint.py", "store/recovery.py", "store/dispatcher.py", "store/record.py",
    "dledger/core.py", "dledger/messages.py", "dledger/log_storage.py",
    "ha/protocol.py", "ha/master.py", "ha/access.py",
    "cluster/protocol/names.py", "store/paths.py",
    "chaos/checker.py", "chaos/nemesis.py", "chaos/audit.py", "dledger/admin.py",
    "store/backend.py",
    "spark_jobs/decode.py",
    "controller/state.py", "cluster/protocol/controller.py", "store/epoch_file.py",
    "cluster/remoting/peer_auth.py",
    "dashboard/sessions.py", "dashboard/forms.py", "dashboard/settings.py",
)
#: Modules that do I/O or run concurrency: a pure core imports none of them directly.
IO_MODULES = frozenset({
    "trio", "socket", "selectors", "select", "ssl", "asyncio", "subprocess", "threading",
    "multiprocessing", "signal", "concurrent",
})
#: The few pure cores that use one of IO_MODULES for something that is not I/O, and why.
IO_ALLOWED: dict[tuple[str, str], str] = {
    ("cluster/protocol/message.py", "socket"): "inet_aton/inet_ntoa: address bytes, no socket",
    ("store/mapped_file.py", "threading"): "a lock around the preallocation a worker thread runs",
}
#: Product files that may import a module by a name computed at run time, and why.
DYNAMIC_IMPORTS_ALLOWED: dict[str, str] = {
    "spark_jobs/package.py": "finds the folders of the packages it zips for spark-submit",
}


def layer_violations(root: Path) -> list[str]:
    """Every first-party import (module level, in a function, under ``TYPE_CHECKING``,
    relative, dynamic) that goes to a part that is neither the importer's own nor below it."""
    out = []
    for path in _product_files(root):
        rel = path.relative_to(root)
        src = rel.parts[0]
        module, is_package = _module_of(root, path)
        for line, dotted in _imports(module, _parsed(path), is_package):
            if dotted == "<outside>":
                out.append(f"{rel}:{line}: relative import above the {NAMESPACE} namespace")
                continue
            dst = _part_of(dotted)
            if dst is not None and dst != src and dst not in LAYERS.get(src, ()):
                out.append(f"{rel}:{line}: {src} imports {dotted}")
    return sorted(set(out))


def dynamic_import_violations(root: Path) -> list[str]:
    """A product module that imports by a computed name hides an arrow from every rule."""
    out = []
    for path in _product_files(root):
        rel = str(path.relative_to(root))
        if rel in DYNAMIC_IMPORTS_ALLOWED:
            continue
        for node in ast.walk(_parsed(path)):
            target = _dynamic_target(node) if isinstance(node, ast.Call) else None
            if target is not None and not (
                isinstance(target, ast.Constant) and isinstance(target.value, str)
            ):
                out.append(f"{rel}:{node.lineno}: imports a module named at run time")
    return out


def _graph(root: Path) -> dict[str, tuple[Path, set[str], set[str]]]:
    """module -> (file, first-party modules it imports, other top-level modules it imports)."""
    out: dict[str, tuple[Path, set[str], set[str]]] = {}
    for path in _product_files(root):
        module, is_package = _module_of(root, path)
        first, other = set(), set()
        for _line, dotted in _imports(module, _parsed(path), is_package):
            if _part_of(dotted) is not None:
                first.add(dotted)
            else:
                other.add(dotted.split(".")[0])
        out[module] = (path, first, other)
    return out


def pure_core_violations(root: Path, cores: tuple[str, ...] = PURE_CORES) -> list[str]:
    """A pure core imports no I/O module itself (bar ``IO_ALLOWED``) and reaches no module that
    imports trio through its first-party imports, however deep (the chain is printed)."""
    graph = _graph(root)
    out = []
    for rel in cores:
        core, _ = _module_of(root, root / rel)
        _path, _first, other = graph[core]
        out += [f"{rel}: imports {m}" for m in sorted(other & IO_MODULES)
                if (rel, m) not in IO_ALLOWED]
        parents: dict[str, str] = {core: ""}
        frontier = [core]
        while frontier:
            module = frontier.pop()
            if module != core and "trio" in graph[module][2]:
                chain = [module]
                while parents[chain[-1]]:
                    chain.append(parents[chain[-1]])
                out.append(f"{rel}: reaches trio through " + " -> ".join(reversed(chain)))
                continue
            for dst in sorted(graph[module][1]):
                if dst in graph and dst not in parents:
                    parents[dst] = module
                    frontier.append(dst)
    return out


def test_every_part_has_a_layer() -> None:
    assert set(LAYERS) == set(INSTALLED)
    for part, below in LAYERS.items():
        assert below <= set(INSTALLED) - {part}, part


def test_imports_go_downward_only() -> None:
    """No file is exempt: the command line that wires everything sits in ``cli/``, on top."""
    violations = layer_violations(ROOT)
    assert not violations, "imports that go up or sideways:\n" + "\n".join(violations)


def test_no_first_party_import_by_computed_name() -> None:
    violations = dynamic_import_violations(ROOT)
    assert not violations, "dynamic imports:\n" + "\n".join(violations)


def test_pure_cores_import_no_io_and_reach_no_trio() -> None:
    violations = pure_core_violations(ROOT)
    assert not violations, "pure cores that are not:\n" + "\n".join(violations)


# --------------------------------------------------------------------------- the tree resolves


def absolute_import_violations(root: Path) -> list[str]:
    """Product code names first-party modules relatively (``from ..store import x``): the
    folders are ``rmq_cluster.*`` only once installed, so an absolute import resolves nowhere
    on a fresh clone. Strings (``python -m rmq_cluster.broker``) stay absolute; tests and
    benchmarks import the installed package. ``tools/relative_imports.py`` does the rewrite."""
    out = []
    for path in _product_files(root):
        for node in ast.walk(_parsed(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n == NAMESPACE or n.startswith(NAMESPACE + ".") for n in names):
                out.append(f"{path.relative_to(root)}:{node.lineno}: absolute {NAMESPACE} import")
    return out


def _tree_module(root: Path, dotted: str) -> Path | None:
    """The file of ``rmq_cluster.a.b`` in the tree (``a/b.py`` or ``a/b/__init__.py``)."""
    parts = dotted.split(".")[1:]
    if not parts:
        return None
    base = root.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _binds(tree: ast.Module, name: str) -> bool:
    """``tree``'s module level defines, assigns or imports ``name``."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(x, ast.Name) and x.id == name for x in targets):
                return True
    return False


def unresolved_relative_imports(root: Path) -> list[str]:
    """Every relative import of product code lands on a file of the tree, and every name it
    takes is a submodule there or bound at that module's top level: what an editor or a type
    checker resolves from the folders as they stand, without an install."""
    out = []
    for path in _product_files(root):
        module, is_package = _module_of(root, path)
        package = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(_parsed(path)):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, node.module] if node.module else anchor)
            target = _tree_module(root, base) if anchor else None
            where = f"{path.relative_to(root)}:{node.lineno}"
            if node.module and target is None:
                out.append(f"{where}: no module {base} in the tree")
                continue
            for alias in node.names:
                if alias.name == "*" or _tree_module(root, f"{base}.{alias.name}"):
                    continue
                if target is None or not _binds(_parsed(target), alias.name):
                    out.append(f"{where}: {base} has no {alias.name}")
    return out


def test_product_imports_are_relative() -> None:
    violations = absolute_import_violations(ROOT)
    assert not violations, (
        "run python3 tools/relative_imports.py:\n" + "\n".join(violations[:50]))


def test_product_imports_resolve_from_the_tree() -> None:
    violations = unresolved_relative_imports(ROOT)
    assert not violations, "imports that resolve nowhere:\n" + "\n".join(violations)


# --------------------------------------------------------------------------- docs in the repo

#: Pointers to notes that live outside the repository (the old workspace notes).
_OUTSIDE = re.compile(r"shared/(?:design\.md|reference)|\.\./shared/")
_LINK = re.compile(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)")


def test_nothing_points_outside_the_repository() -> None:
    """The architecture notes and protocol facts the code cites live in ``docs/``. (README.md
    and SECURITY.md are merged by hand; they follow the same rule.)"""
    outside = []
    for top in (*IMPORTERS, "docs", "tools"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in (".py", ".md", ".toml") and "node_modules" not in path.parts:
                for n, line in enumerate(path.read_text().splitlines(), 1):
                    if _OUTSIDE.search(line):
                        outside.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not outside, "pointers outside the repository:\n" + "\n".join(outside)


def test_docs_links_land_on_files() -> None:
    broken = [
        f"{page.relative_to(ROOT)}: {target}"
        for page in sorted((ROOT / "docs").rglob("*.md"))
        for target in _LINK.findall(page.read_text())
        if not (page.parent / target).is_file()
    ]
    assert (ROOT / "docs" / "architecture.md").is_file()
    assert not broken, "links to missing pages:\n" + "\n".join(broken)


# --------------------------------------------------------------------------- planted violations


def _plant(root: Path, files: dict[str, str]) -> Path:
    """A tree of ``files`` (path -> source) under ``root``, package ``__init__.py`` files
    added where missing."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if str(parent) != "." and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("")
    return root


def test_planted_absolute_and_unresolvable_imports_are_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "store/a.py": "import rmq_cluster.store.b as b\nX = 1\n",
        "store/b.py": "from rmq_cluster.store import a\nfrom . import a, c\n"
                      "from .a import X, Y\nfrom ..cluster.gone import Z\n",
        "store/__init__.py": "from .a import X as PUBLIC\n",
        "broker/n.py": "from ..store import PUBLIC, a\n",
    })
    assert absolute_import_violations(root) == [
        "store/a.py:1: absolute rmq_cluster import",
        "store/b.py:1: absolute rmq_cluster import",
    ]
    assert unresolved_relative_imports(root) == [
        "store/b.py:2: rmq_cluster.store has no c",
        "store/b.py:3: rmq_cluster.store.a has no Y",
        "store/b.py:4: no module rmq_cluster.cluster.gone in the tree",
    ]


def test_planted_relative_upward_import_is_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "store/low.py": "from ..broker import node\n",
        "store/deep/low.py": "def f():\n    from ...broker.node import BrokerNode\n",
        "broker/node.py": "from ..store import low\n",
        "cluster/x.py": "from ... import elsewhere\n",
    })
    assert layer_violations(root) == [
        "cluster/x.py:1: relative import above the rmq_cluster namespace",
        "store/deep/low.py:2: store imports rmq_cluster.broker.node",
        "store/deep/low.py:2: store imports rmq_cluster.broker.node.BrokerNode",
        "store/low.py:1: store imports rmq_cluster.broker",
        "store/low.py:1: store imports rmq_cluster.broker.node",
    ]


def test_planted_dynamic_import_is_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "store/a.py": "import importlib\nimportlib.import_module('rmq_cluster.broker.node')\n",
        "store/b.py": "import importlib\n\ndef f(n):\n    return importlib.import_module(n)\n",
        "store/c.py": "def f(n):\n    return __import__(n)\n",
        "store/d.py": "crc = __import__('zlib').crc32\n",
    })
    assert layer_violations(root) == ["store/a.py:2: store imports rmq_cluster.broker.node"]
    assert dynamic_import_violations(root) == [
        "store/b.py:4: imports a module named at run time",
        "store/c.py:2: imports a module named at run time",
    ]


def test_planted_pure_core_reaching_trio_is_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "cluster/core.py": "from .mid import x\n",
        "cluster/mid.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                          "    from .shell import y\nx = 1\n",
        "cluster/shell.py": "import trio\ny = 2\n",
    })
    assert pure_core_violations(root, ("cluster/core.py",)) == [
        "cluster/core.py: reaches trio through rmq_cluster.cluster.core -> "
        "rmq_cluster.cluster.mid -> rmq_cluster.cluster.shell",
    ]
    assert pure_core_violations(root, ("cluster/shell.py",)) == ["cluster/shell.py: imports trio"]


def test_planted_socket_in_connection_state_is_caught(tmp_path: Path) -> None:
    root = _plant(tmp_path, {
        "cluster/remoting/connection_state.py": "from __future__ import annotations\n"
                                                "import socket\n",
        "cluster/protocol/message.py": "import socket\n",
    })
    cores = ("cluster/remoting/connection_state.py", "cluster/protocol/message.py")
    assert pure_core_violations(root, cores) == [
        "cluster/remoting/connection_state.py: imports socket",
    ]


def test_planted_deploy_importing_chaos_is_caught(tmp_path: Path) -> None:
    """The arrow ``deploy/cli.py`` once had an exemption for: no file is exempt now."""
    root = _plant(tmp_path, {
        "deploy/cli.py": "def build():\n    from rmq_cluster.chaos.cli import add_chaos_command\n",
        "cli/main.py": "from ..chaos import cli\nfrom ..deploy import commands\n",
    })
    assert layer_violations(root) == [
        "deploy/cli.py:2: deploy imports rmq_cluster.chaos.cli",
        "deploy/cli.py:2: deploy imports rmq_cluster.chaos.cli.add_chaos_command",
    ]


# --------------------------------------------------------------------------- no import cycles


def _module_names() -> dict[str, Path]:
    """Every installed module (``rmq_cluster.broker.processors.send``; a package by its
    ``__init__.py``) and its file."""
    out = {}
    for top in INSTALLED:
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((NAMESPACE, *parts))] = path
    return out


def _module_edges(
    module: str, tree: ast.AST, known: frozenset[str] | set[str], is_package: bool = False
) -> Iterator[tuple[int, str]]:
    """The installed modules ``module`` imports, wherever the import stands (module level, in a
    function, under ``TYPE_CHECKING``): ``import a.b`` and ``from a.b import x`` are edges to
    ``a.b``, except that ``from a import b`` naming a submodule ``a.b`` is an edge to it (and
    to ``a`` as well when it also names something else). Relative imports are resolved."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
            if len(subs) < len(node.names) and base in known:
                yield node.lineno, base
            for sub in subs:
                yield node.lineno, sub


def _import_graph() -> dict[str, dict[str, str]]:
    """module -> {imported module: "file:line" of the (first) import}."""
    modules = _module_names()
    known = frozenset(modules)
    graph: dict[str, dict[str, str]] = {}
    for module, path in modules.items():
        tree = _parsed(path)
        edges = graph.setdefault(module, {})
        for line, dst in _module_edges(module, tree, known, path.name == "__init__.py"):
            if dst != module:
                edges.setdefault(dst, f"{path.relative_to(ROOT)}:{line}")
    return graph


def _cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """One shortest cycle (as a closed path) per strongly connected component of more than one
    module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    cycles = []
    for component in components:
        inside = set(component)
        start = component[0]
        # breadth-first from start back to start, inside the component: a shortest cycle
        parents: dict[str, str] = {}
        frontier = [start]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, {})):
                    if w == start:
                        found = v
                        break
                    if w in inside and w not in parents:
                        parents[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        assert found is not None
        path = [start, found]
        while path[-1] != start:
            path.append(parents.get(path[-1], start))
        path.reverse()  # start -> ... -> found -> start
        cycles.append(path)
    return cycles


def _describe(cycle: list[str], graph: dict[str, dict[str, str]]) -> str:
    hops = [f"    {a} -> {b}  ({graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return "\n".join([" -> ".join(m.removeprefix(NAMESPACE + ".") for m in cycle), *hops])


def test_no_import_cycles() -> None:
    """The module import graph (every import: module level, in functions, under
    ``TYPE_CHECKING``) has no cycle: a part that needs something of a higher one takes a
    ``typing.Protocol`` defined below (``broker/context.py``) or the shared piece moves down."""
    graph = _import_graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(_describe(c, graph) for c in cycles)


def test_cycle_rule_sees_hidden_imports() -> None:
    """The rule's own machinery: imports under TYPE_CHECKING, inside functions, relative and
    ``from pkg import submodule`` are edges, and a cycle through them is found and printed."""
    known = {"rmq_cluster.p", "rmq_cluster.p.a", "rmq_cluster.p.b", "rmq_cluster.p.c"}
    a = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rmq_cluster.p.b import B\n"
    )
    b = ast.parse("def f():\n    from rmq_cluster.p import c\n")
    c = ast.parse("from . import a\nfrom .. import p\n")
    graph = {
        name: {dst: f"{name}:{line}" for line, dst in _module_edges(name, tree, known)}
        for name, tree in (("rmq_cluster.p.a", a), ("rmq_cluster.p.b", b), ("rmq_cluster.p.c", c))
    }
    assert graph["rmq_cluster.p.a"] == {"rmq_cluster.p.b": "rmq_cluster.p.a:3"}
    assert set(graph["rmq_cluster.p.b"]) == {"rmq_cluster.p.c"}
    assert set(graph["rmq_cluster.p.c"]) == {"rmq_cluster.p.a", "rmq_cluster.p"}
    (cycle,) = _cycles(graph)
    assert cycle == ["rmq_cluster.p.a", "rmq_cluster.p.b", "rmq_cluster.p.c", "rmq_cluster.p.a"]
    assert "p.a -> p.b -> p.c -> p.a" in _describe(cycle, graph)
    del graph["rmq_cluster.p.c"]["rmq_cluster.p.a"]
    assert _cycles(graph) == []
