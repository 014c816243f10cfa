"""Rewrite the product's first-party imports as explicit relative imports (issue 32, item 2).

The repository has no ``rmq_cluster/`` folder: ``pyproject.toml`` maps each top-level folder into
the ``rmq_cluster`` namespace when the package is installed. An absolute ``from
rmq_cluster.store.record import X`` therefore resolves only against an install; ``from
..store.record import X`` resolves from the tree itself (an editor, pyright, a structure tool on
a fresh clone) and, installed, to the very same module.

Usage (from the repository root; stdlib only, Python 3.11+)::

    python3 tools/relative_imports.py            # rewrite in place, print each changed file
    python3 tools/relative_imports.py --check    # change nothing; exit 1 if a file would change

What it rewrites, in the product folders only (those ``[tool.setuptools.package-dir]`` maps):

* ``from rmq_cluster.a.b import c`` (one line or many, in parentheses or continued with a
  backslash, at module level, in a function or under ``TYPE_CHECKING``) -> ``from ..a.b import c``
  with as many dots as the importing module's package needs;
* ``import rmq_cluster.a.b as z`` -> ``from ..a import b as z``.

What it leaves alone: strings (``python -m rmq_cluster.broker``, entry points, monkeypatch
targets, docstrings), tests and benchmarks (they import the installed package), relative imports
(so a second run changes nothing). ``import rmq_cluster.a`` without ``as`` binds the name
``rmq_cluster`` and cannot be rewritten without its uses: the script refuses such a file
(exit 2) and names the line. Deterministic: files in sorted order, edits from the end.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

NAMESPACE = "rmq_cluster"
#: ``from`` + the module's dotted name (spaces and backslash continuations allowed) + ``import``
_FROM = re.compile(rb"from(?:\s|\\\n)+([A-Za-z_][\w.\s\\]*?)(?:\s|\\\n)+import\b")


class Unconvertible(ValueError):
    """An import the script cannot rewrite by itself (the message names file and line)."""


def package_dirs(root: Path) -> dict[str, str]:
    """``{"rmq_cluster.broker": "broker", ...}`` from ``pyproject.toml``."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return {name: folder for name, folder in sorted(mapping.items())
            if name.startswith(NAMESPACE + ".")}


def product_files(root: Path) -> Iterator[tuple[Path, str]]:
    """Every product ``.py`` file and its module name, in a fixed order."""
    for name, folder in package_dirs(root).items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            yield path, ".".join((name, *parts))


def relative_name(module: str, target: str) -> str:
    """``target`` as seen from ``module`` (``rmq_cluster.broker.processors.send``, whose
    package is ``rmq_cluster.broker.processors``; a package's ``__init__`` is named
    ``pkg.__init__``): ``rmq_cluster.store.record`` -> ``...store.record``."""
    package = module.split(".")[:-1]
    wanted = target.split(".")
    common = 0
    while common < min(len(package), len(wanted)) and package[common] == wanted[common]:
        common += 1
    if common == 0:
        raise ValueError(f"{target} is not under {package[0]}")
    dots = "." * (len(package) - common + 1)
    return dots + ".".join(wanted[common:])


def _is_first_party(name: str | None) -> bool:
    return name is not None and (name == NAMESPACE or name.startswith(NAMESPACE + "."))


def _line_starts(data: bytes) -> list[int]:
    starts = [0]
    starts += [i + 1 for i, b in enumerate(data) if b == 0x0A]
    return starts


def _edits(path: Path, module: str, data: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, replacement) byte ranges of ``data`` that make its imports relative."""
    starts = _line_starts(data)
    out = []
    for node in ast.walk(ast.parse(data, str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_first_party(node.module):
            at = starts[node.lineno - 1] + node.col_offset
            match = _FROM.match(data, at)
            if match is None:
                raise Unconvertible(f"{path}:{node.lineno}: cannot find the module name")
            assert node.module is not None
            new = relative_name(module, node.module).encode()
            out.append((match.start(1), match.end(1), new))
        elif isinstance(node, ast.Import) and any(_is_first_party(a.name) for a in node.names):
            out.append(_import_edit(path, module, node, starts))
    return out


def _import_edit(
    path: Path, module: str, node: ast.Import, starts: list[int]
) -> tuple[int, int, bytes]:
    """``import rmq_cluster.a.b as z`` (one name per statement) -> ``from ..a import b as z``."""
    if len(node.names) != 1 or node.names[0].asname is None or "." not in node.names[0].name:
        raise Unconvertible(
            f"{path}:{node.lineno}: 'import {', '.join(a.name for a in node.names)}' binds "
            f"{NAMESPACE} itself: write 'from {NAMESPACE}.x import y' (or 'import ... as') first"
        )
    alias = node.names[0]
    parent, _, leaf = alias.name.rpartition(".")
    assert node.end_lineno is not None and node.end_col_offset is not None
    start = starts[node.lineno - 1] + node.col_offset
    end = starts[node.end_lineno - 1] + node.end_col_offset
    new = f"from {relative_name(module, parent)} import {leaf} as {alias.asname}"
    return start, end, new.encode()


def convert_source(path: Path, module: str, data: bytes) -> bytes:
    """``data`` (the file at ``path``, module ``module``) with relative first-party imports."""
    for start, end, new in sorted(_edits(path, module, data), reverse=True):
        data = data[:start] + new + data[end:]
    return data


def convert_tree(root: Path, *, write: bool) -> list[Path]:
    """The product files whose imports change (rewritten when ``write``). Every file is
    converted in memory first: a refused import leaves the whole tree untouched."""
    changed = {}
    for path, module in product_files(root):
        data = path.read_bytes()
        new = convert_source(path, module, data)
        if new != data:
            changed[path] = new
    if write:
        for path, new in changed.items():
            path.write_bytes(new)
    return list(changed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=".", type=Path,
                        help="the repository root (holds pyproject.toml); default: .")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 when some file would change")
    args = parser.parse_args(argv)
    try:
        changed = convert_tree(args.root, write=not args.check)
    except (Unconvertible, SyntaxError) as exc:
        print(f"relative_imports: {exc}", file=sys.stderr)
        return 2
    for path in changed:
        print(path.relative_to(args.root))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
