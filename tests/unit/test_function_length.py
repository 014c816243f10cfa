"""No product function longer than ``MAX_FUNCTION_LINES`` (issue 32, item 6).

A function is measured from its ``def`` line (decorators excluded) to its last line, nested
functions inside it included. ``ALLOWED`` lists the longer ones that are still to be split,
each with its length today: the list may only shrink. A listed function that grew, got short
enough or went away fails the test until its entry is lowered or removed; a new long function
fails it until it is split.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the product folders (what pyproject.toml installs as ``rmq_cluster.<folder>``)
PRODUCT = (
    "cluster", "client", "namesrv", "broker", "ha", "dledger", "store", "deploy", "chaos",
    "spark_jobs", "controller", "dashboard", "cli", "proxy",
)
MAX_FUNCTION_LINES = 80

#: "path:qualified name" -> its length today; split them, then lower or drop the entry (empty:
#: every product function is within the limit; a new entry needs a reason in review)
ALLOWED: dict[str, int] = {}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every function in ``tree``, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            yield name, (node.end_lineno or node.lineno) - node.lineno + 1
            yield from _functions(node, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")
        else:
            yield from _functions(node, prefix)


def function_lengths(root: Path = ROOT) -> dict[str, int]:
    """"path:qualified name" -> lines, of every product function."""
    out: dict[str, int] = {}
    for folder in PRODUCT:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            for name, lines in _functions(ast.parse(path.read_text(), rel)):
                out[f"{rel}:{name}"] = max(lines, out.get(f"{rel}:{name}", 0))
    return out


def long_function_problems(lengths: dict[str, int], allowed: dict[str, int]) -> list[str]:
    problems = []
    for name, lines in sorted(lengths.items()):
        if lines <= MAX_FUNCTION_LINES:
            continue
        if name not in allowed:
            problems.append(f"{name}: {lines} lines > {MAX_FUNCTION_LINES}: split it")
        elif lines > allowed[name]:
            problems.append(f"{name}: grew to {lines} lines (allowed {allowed[name]})")
    for name, was in sorted(allowed.items()):
        now = lengths.get(name)
        if now is None or now <= MAX_FUNCTION_LINES:
            problems.append(f"{name}: allowed {was} lines, now {now}: drop its ALLOWED entry")
        elif now < was:
            problems.append(f"{name}: now {now} lines: lower its ALLOWED entry from {was}")
    return problems


def test_no_product_function_is_longer_than_the_limit() -> None:
    problems = long_function_problems(function_lengths(), ALLOWED)
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_planted_long_function(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "store" / "planted.py").write_text(
        f"class C:\n    def short(self) -> None:\n        pass\n\n"
        f"def long() -> None:\n{body}\n"
        f"def fine() -> None:\n    pass\n"
    )
    lengths = function_lengths(tmp_path)
    assert lengths["store/planted.py:long"] == MAX_FUNCTION_LINES + 1
    assert lengths["store/planted.py:C.short"] == 2
    assert long_function_problems(lengths, {}) == [
        f"store/planted.py:long: {MAX_FUNCTION_LINES + 1} lines > {MAX_FUNCTION_LINES}: split it"
    ]
    # an entry may only shrink: a stale one (the function is short now) fails too
    assert long_function_problems({"a.py:f": 10}, {"a.py:f": 90}) == [
        "a.py:f: allowed 90 lines, now 10: drop its ALLOWED entry"
    ]
