"""docs/architecture.md: pure cores import no trio, read no clock, start no threads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PURE = [
    "dledger/core.py", "dledger/log_storage.py", "dledger/messages.py", "dledger/config.py",
]
FORBIDDEN_MODULES = {"trio", "time", "threading", "asyncio", "concurrent", "datetime", "socket"}


@pytest.mark.parametrize("rel", PURE)
def test_pure_module(rel: str) -> None:
    tree = ast.parse((ROOT / rel).read_text())
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert name.split(".")[0] not in FORBIDDEN_MODULES, f"{rel} imports {name}"
        # randomness only through an injected random.Random: no module-level random.* calls
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "random"
        ):
            raise AssertionError(f"{rel}:{node.lineno} calls random.{node.func.attr}")
