"""Rules of the code's shape that a test can check (``../shared/design.md``).

* One import namespace: the repository's top-level folders are installed as ``rmq_cluster.<folder>``
  and every first-party import names them so; nothing imports a bare ``store`` or ``cluster``
  (those would come from the current directory or from an application's own modules).
* ``pyproject.toml`` lists every package folder, so a non-editable install holds all of them.
"""

from __future__ import annotations

import ast
import itertools
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "rmq_cluster"
#: the repository's top-level folders that are installed, each as ``rmq_cluster.<folder>``
INSTALLED = (
    "cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos",
    "spark_jobs", "controller", "cli",
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
    "cli": frozenset({
        "cluster", "client", "store", "ha", "dledger", "broker", "namesrv", "controller",
        "spark_jobs", "deploy", "chaos",
    }),
}
#: Pure cores: bytes/events in, bytes/events/decisions out; no trio, not even for types.
PURE_CORES = (
    "cluster/remoting/codec.py", "cluster/remoting/codes.py", "cluster/remoting/headers.py",
    "cluster/remoting/connection_state.py", "cluster/remoting/input_budget.py",
    "cluster/remoting/processors.py", "cluster/remoting/held.py", "cluster/remoting/errors.py",
    "cluster/remoting/address.py", "cluster/remoting/admission.py",
    "cluster/protocol/message.py", "cluster/protocol/route.py", "cluster/protocol/fastjson.py",
    "cluster/filter/sql92.py", "cluster/acl/validator.py", "cluster/acl/rules.py",
    "cluster/acl/permission.py", "cluster/acl/signing.py", "cluster/config.py",
    "cluster/clock.py", "cluster/cli_args.py", "cluster/home.py",
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
        tree = ast.parse(path.read_text(), str(path))
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
