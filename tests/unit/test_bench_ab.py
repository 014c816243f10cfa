"""``bench/ab.py``, the interleaved A/B harness: its pure parts, and a whole run over two real
git worktrees of a throwaway repository whose "benchmark" prints a value per revision.

The whole run reuses venvs the test lays out in ``--workdir`` (``.venv/bin/python`` -> this
interpreter, and the harness's "installed" marker): creating two venvs and installing into
them takes one to five minutes on the loaded CI machine, for nothing this test would learn
(``pip install -e`` is pip's business). Everything else is the real path: ``git worktree``,
the ABBA order, each run in its own worktree and process group, the JSON parsed and reduced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_ab", ROOT / "bench" / "ab.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ab = _load()


def test_runs_alternate_abba() -> None:
    assert ab.run_order(3) == ["base", "new", "new", "base", "base", "new"]


def test_the_json_is_the_whole_stdout_or_its_last_json_line() -> None:
    assert ab.parse_output('{\n  "a": 1\n}\n') == {"a": 1}
    assert ab.parse_output('starting\n{"a": 1}\n{"a": 2}\n') == {"a": 2}
    assert ab.parse_output("no json here\n[1, 2]\n") is None


def test_fields_by_path_wildcard_and_regex() -> None:
    doc = {
        "single": {"cpu_us_per_msg": {"broker": 30.5, "nameserver": 1}, "msgs_per_s": 9000},
        "runs": [{"rate": 1}, {"rate": 2.5}],
        "ok": True,
        "bad": float("nan"),
    }
    assert ab.select(doc, "single.cpu_us_per_msg.*") == {
        "single.cpu_us_per_msg.broker": 30.5, "single.cpu_us_per_msg.nameserver": 1.0,
    }  # fmt: skip
    assert ab.select(doc, "runs.*.rate") == {"runs.0.rate": 1.0, "runs.1.rate": 2.5}
    assert ab.select(doc, "ok") == {} and ab.select(doc, "bad") == {}  # not numbers
    assert ab.numeric_leaves(doc, ab.DEFAULT_MATCH) == {
        "single.cpu_us_per_msg.broker": 30.5, "single.cpu_us_per_msg.nameserver": 1.0,
        "single.msgs_per_s": 9000.0,
    }  # fmt: skip


def test_summary_medians_and_ratio() -> None:
    values = {"x": {"base": [3.0, 1.0, 2.0], "new": [4.0, 5.0, 3.0]}, "y": {"new": [1.0]}}
    out = ab.summarize(values)
    assert out["x"]["base"] == {"median": 2.0, "values": [3.0, 1.0, 2.0]}
    assert out["x"]["new"]["median"] == 4.0 and out["x"]["new_over_base"] == 2.0
    assert out["y"]["base"]["median"] is None and out["y"]["new_over_base"] is None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def _repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository of two commits: ``bench/fake.py`` prints the tree's value.txt, its own
    path, and then fails when value.txt says so."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "fake.py").write_text(
        "import json, sys\nfrom pathlib import Path\n"
        "root = Path(__file__).resolve().parents[1]\n"
        "v = float((root / 'value.txt').read_text())\n"
        "print('progress on stdout first')\n"
        "print(json.dumps({'case': {'cpu_us_per_msg': v, 'msgs_per_s': 10 * v},"
        " 'tree': str(root), 'python': sys.executable}))\n"
    )
    (repo / "value.txt").write_text("1.5")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "value.txt").write_text("3")
    _git(repo, "commit", "-qam", "new")
    return repo, base, _git(repo, "rev-parse", "HEAD")


def _lay_out(repo: Path, workdir: Path, commit: str) -> Path:
    """What ``prepare_tree`` leaves, with this interpreter standing in for the venv's."""
    tree = workdir / commit[:12]
    _git(repo, "worktree", "add", "--detach", str(tree), commit)
    bin_dir = tree / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (tree / ".venv" / ".ab-installed").write_text(commit)
    return tree


def test_a_whole_ab_over_two_worktrees(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo, base, new = _repo(tmp_path)
    workdir = tmp_path / "work"
    trees = {"base": _lay_out(repo, workdir, base), "new": _lay_out(repo, workdir, new)}
    code = ab.main([
        "--repo", str(repo), "--base", "HEAD~1", "--new", "HEAD", "--rounds", "2",
        "--workdir", str(workdir), "--field", "case.*", "--keep-output",
        "--", "python", "bench/fake.py",
    ])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (report["base"]["commit"], report["new"]["commit"]) == (base, new)
    assert [r["side"] for r in report["runs"]] == ["base", "new", "new", "base"]
    for run in report["runs"]:  # each in its own worktree, with its venv's interpreter
        tree = trees[run["side"]]
        assert run["output"]["tree"] == str(tree.resolve())
        assert run["output"]["python"] == str(tree / ".venv" / "bin" / "python")
    cpu = report["fields"]["case.cpu_us_per_msg"]
    assert cpu["base"] == {"median": 1.5, "values": [1.5, 1.5]}
    assert cpu["new"]["values"] == [3.0, 3.0] and cpu["new_over_base"] == 2.0
    assert report["fields"]["case.msgs_per_s"]["new_over_base"] == 2.0
    assert os.path.isdir(trees["base"])  # --workdir keeps them for the next run


def test_a_failing_revision_is_reported_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, base, new = _repo(tmp_path)
    workdir = tmp_path / "work"
    _lay_out(repo, workdir, base)
    tree = _lay_out(repo, workdir, new)
    (tree / "value.txt").write_text("not a number")  # the new tree's benchmark crashes
    code = ab.main(["--repo", str(repo), "--base", base, "--new", new, "--rounds", "1",
                    "--workdir", str(workdir), "--", "python", "bench/fake.py"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    failed = [r for r in report["runs"] if "failed" in r]
    assert [r["side"] for r in failed] == ["new"] and "ValueError" in failed[0]["failed"]
    assert report["fields"]["case.cpu_us_per_msg"]["new"]["values"] == []


def test_bad_revision_exits_2(tmp_path: Path) -> None:
    repo, _base, _new = _repo(tmp_path)
    assert ab.main(["--repo", str(repo), "--base", "no-such-rev", "--", "python", "x.py"]) == 2
    with pytest.raises(SystemExit) as exc:
        ab.main(["--base", "HEAD"])  # no command
    assert exc.value.code == 2
