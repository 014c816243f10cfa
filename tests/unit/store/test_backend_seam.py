"""The store's seam (issue 32, item 7): a CommitLog backend reaches its ``MessageStore`` only
through ``BackendHost``, the typed Protocol ``bind`` hands it.

mypy checks the types on both sides (``MessageStore`` must be a ``BackendHost``; each backend a
``CommitLogBackend``); this test checks what the backends' code touches: every attribute they
read, set or call on their store is a member of ``BackendHost``, none is private.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rmq_cluster.store.backend import BackendHost, CommitLogBackend
from rmq_cluster.store.message_store import FileCommitLog, MessageStore

ROOT = Path(__file__).resolve().parents[3]
#: (file, class) of every backend
BACKENDS = (
    ("store/message_store.py", "FileCommitLog"),
    ("dledger/commitlog_adapter.py", "DLedgerCommitLog"),
)


def _protocol_members(proto: type) -> set[str]:
    names = set(getattr(proto, "__annotations__", {}))
    names |= {n for n in vars(proto) if not n.startswith("_")}
    return names


def _is_store(node: ast.expr, aliases: set[str]) -> bool:
    """``node`` is a local bound to the store, or ``self.store``."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    return (isinstance(node, ast.Attribute) and node.attr == "store"
            and isinstance(node.value, ast.Name) and node.value.id == "self")  # fmt: skip


def store_uses(source: str, class_name: str) -> set[str]:
    """Attributes a class reaches on its store: ``self.store.X`` and ``X`` of a local bound to
    ``self.store`` (``store = self.store``) or of ``bind``'s ``store`` argument."""
    tree = ast.parse(source)
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    used: set[str] = set()
    for fn in (n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        aliases = {"store"} if any(a.arg == "store" for a in fn.args.args) else set()
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "store"):  # fmt: skip
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if not isinstance(node, ast.Attribute):
                continue
            if _is_store(node.value, aliases):
                used.add(node.attr)
    return used


def test_backends_use_only_the_seam() -> None:
    allowed = _protocol_members(BackendHost)
    for rel, cls in BACKENDS:
        used = store_uses((ROOT / rel).read_text(), cls)
        assert used, f"{cls}: no use of its store found (is the test still looking right?)"
        outside = sorted(used - allowed)
        assert not outside, f"{cls} reaches its store beyond BackendHost: {outside}"
        assert not [u for u in used if u.startswith("_")], f"{cls} uses private store members"


def test_the_checker_sees_a_private_reach() -> None:
    planted = (
        "class B:\n"
        "    def bind(self, store):\n        self.store = store\n        store.cqs\n"
        "    def put(self):\n        store = self.store\n        store._wake_reput()\n"
        "    def other(self):\n        self.store.retention.disk_full\n"
    )
    assert store_uses(planted, "B") == {"cqs", "_wake_reput", "retention"}


def test_the_store_and_its_file_backend_fit_the_protocols(tmp_path: Path) -> None:
    """The runtime half of what mypy checks: every member the protocols name exists."""
    from tests.unit.store.store_testlib import small_config

    store = MessageStore.open(small_config(tmp_path))
    try:
        for name in _protocol_members(BackendHost):
            assert hasattr(store, name), name
        backend = store.backend
        assert isinstance(backend, FileCommitLog)
        for name in _protocol_members(CommitLogBackend):
            assert hasattr(backend, name), name
    finally:
        store.close()
