"""The rmq-cluster console script: --help and --version, as installed."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from rmq_cluster.cli.main import main


def test_help_and_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "rmq-cluster" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "rmq-cluster 0." in capsys.readouterr().out


def test_unknown_command_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2
    assert "frobnicate" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    exe = shutil.which("rmq-cluster")
    cmd = [exe] if exe else [sys.executable, "-m", "rmq_cluster.cli.main"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60, check=True)
    assert "usage: rmq-cluster" in out.stdout
    out = subprocess.run(
        [*cmd, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.startswith("rmq-cluster ")


# ============================================================ issue 23: the everyday surface
# (exit codes, global log options, log rotation and --pretty, msg rows; real-cluster tests are
# in tests/integration/deploy/test_everyday_cli.py)

import base64  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import structlog  # noqa: E402

from rmq_cluster.cli.main import EXIT_CODES_EPILOG, build_parser  # noqa: E402
from rmq_cluster.client.cli_common import body_fields  # noqa: E402
from rmq_cluster.cluster.logging import (  # noqa: E402
    LogRotation,
    configure_logging,
    get_logger,
    level_for_verbosity,
    pretty_line,
    rotate_files,
    rotated_paths,
)


def _rmq(*args: str, env: dict[str, str] | None = None,
         cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmq_cluster.cli", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=env, cwd=cwd)


def _commands(parser) -> dict[str, object]:  # type: ignore[no-untyped-def]
    import argparse

    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            out.update(action.choices)
    return out


def test_every_command_documents_the_exit_codes_and_takes_the_log_options() -> None:
    parser = build_parser()
    commands = _commands(parser)
    assert {"produce", "consume", "status", "down", "ls", "logs", "up"} <= set(commands)
    for name, p in commands.items():
        text = p.format_help()  # type: ignore[attr-defined]
        assert text.count(EXIT_CODES_EPILOG.splitlines()[0]) == 1, name  # one table
        assert "2  usage" in text or ("2  no verdict" in text and "or usage" in text), name
    args = parser.parse_args(["-vv", "status"])
    assert args.verbose == 2
    args = parser.parse_args(["status", "-v", "--log-format", "json"])
    assert args.verbose == 1 and args.log_format == "json"
    args = parser.parse_args(["status"])
    assert args.verbose == 0 and args.log_format is None


def test_verbosity_levels() -> None:
    assert level_for_verbosity(0) == "warning"
    assert level_for_verbosity(1) == "info"
    assert level_for_verbosity(2) == "debug"
    assert level_for_verbosity(5) == "debug"
    assert level_for_verbosity(0, "error") == "error"
    assert level_for_verbosity(1, "debug") == "debug"  # -v never quiets what the env asked


@pytest.mark.parametrize(
    "argv",
    [
        ["produce", "-t", "T", "--prop", "novalue"],
        ["produce", "-t", "T", "--count", "0"],
        ["produce", "-t", "T", "--delay", "-1"],
        ["produce", "-t", "T", "--body", "a", "--size", "3"],
        ["produce", "-t", "T", "--body-file", "/nonexistent/body"],
        ["consume", "-t", "T"],
        ["consume", "-t", "T", "-g", "G", "--count", "-2"],
        ["consume", "-t", "T", "-g", "G", "--timeout", "0"],
        ["up", "single", "--bind", "not-an-address"],
        ["logs", "broker-a", "-n", "-1"],
        ["status", "--log-format", "xml"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_unreachable_namesrv_is_one_line_and_exit_1() -> None:
    for argv in (["consume", "-t", "T", "-g", "G", "--count", "1"],
                 ["produce", "-t", "T"]):
        done = _rmq(*argv, "-n", "127.0.0.1:1")
        assert done.returncode == 1, done
        assert argv[0] == "produce" or done.stdout == ""  # produce: its summary, 0 sent
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("rmq-cluster: error: ") and "127.0.0.1:1" in done.stderr
    done = _rmq("consume", "-t", "T", "-g", "G", "-n", "127.0.0.1:1", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]  # a script reading stdout sees the error too


def test_cluster_home_decides_where_clusters_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """RMQ_CLUSTER_HOME: ``ls`` lists what is under it and commands find clusters there; unset,
    the home is ~/.rmq-cluster, wherever the command runs. (``ls`` of real clusters and
    ``--dir`` winning: tests/integration/deploy/test_everyday_cli.py.)"""
    home = tmp_path / "home"
    monkeypatch.setenv("RMQ_CLUSTER_HOME", str(home))
    assert main(["ls", "--json"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["status"]) == 1
    assert capsys.readouterr().err == (
        f"rmq-cluster: error: no cluster in {home.resolve() / 'default'} (no cluster.json); "
        "start one with rmq-cluster up\n")
    assert main(["down", "--name", "x"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(home / "x") in err and "no such directory" in err
    monkeypatch.delenv("RMQ_CLUSTER_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the current directory plays no part
    assert main(["ls"]) == 0
    default_home = (tmp_path / "user").resolve() / ".rmq-cluster"
    assert capsys.readouterr().out.strip() == f"no clusters in {default_home}"


def test_body_is_text_when_printable_else_base64() -> None:
    assert body_fields("héllo\n\tworld".encode()) == {"body": "héllo\n\tworld",
                                                      "bodyEncoding": "text"}
    raw = bytes([0, 1, 2, 255])
    assert body_fields(raw) == {"body": base64.b64encode(raw).decode(), "bodyEncoding": "base64"}
    assert body_fields(b"bell\x07")["bodyEncoding"] == "base64"
    assert body_fields(b"") == {"body": "", "bodyEncoding": "text"}


def test_pretty_line_renders_json_records_and_keeps_other_lines() -> None:
    line = json.dumps({"node": "broker-a", "role": "broker", "event": "consumer registered",
                       "level": "info", "timestamp": "2026-11-27T06:05:08.338238Z",
                       "group": "G1", "remote": "127.0.0.1:1", "offsets": {"0": 1}})
    assert pretty_line(line) == (
        '2026-11-27 06:05:08.338 INFO    [broker-a/broker] consumer registered group=G1 '
        'remote=127.0.0.1:1 offsets={"0":1}'
    )
    exc = json.dumps({"event": "boom", "level": "error", "exception": "Traceback\n  line\nE"})
    assert pretty_line(exc) == "ERROR   boom\nTraceback\n  line\nE"
    for raw in ("The broker[a, 1] boot success.", "{not json", '{"no": "event"}', "[1, 2]"):
        assert pretty_line(raw) == raw


def test_rotation_files_and_reading_order(tmp_path: Path) -> None:
    log = str(tmp_path / "n.log")
    for i in range(5):
        Path(log).write_text(f"gen{i}\n")
        rotate_files(log, 3)
    Path(log).write_text("current\n")
    # kept: the newest 3 rotated generations, oldest first, then the live file
    assert rotated_paths(log) == [f"{log}.3", f"{log}.2", f"{log}.1", log]
    assert [Path(p).read_text() for p in rotated_paths(log)] == [
        "gen2\n", "gen3\n", "gen4\n", "current\n"]
    (tmp_path / "n.log.bak").write_text("not a rotation")
    (tmp_path / "n.logx.1").write_text("another log")
    assert len(rotated_paths(log)) == 4


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RMQ_CLUSTER_LOG_MAX_BYTES": "10"}, "RMQ_CLUSTER_LOG_MAX_BYTES"),
        ({"RMQ_CLUSTER_LOG_MAX_BYTES": "1k"}, "not a whole number"),
        ({"RMQ_CLUSTER_LOG_BACKUPS": "0"}, "RMQ_CLUSTER_LOG_BACKUPS"),
    ],
)
def test_rotation_settings_are_checked(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogRotation.from_env({"RMQ_CLUSTER_LOG_FILE": "/tmp/x.log", **env})
    assert LogRotation.from_env({}) is None
    rot = LogRotation.from_env({"RMQ_CLUSTER_LOG_FILE": "/tmp/x.log"})
    assert rot is not None and rot.max_bytes == 64 * 1024 * 1024 and rot.backups == 5


def test_a_process_rotates_its_own_stderr_file(tmp_path: Path) -> None:
    """As a node started by the supervisor: stdout and stderr appended to the log; the node
    rotates it at the size and keeps writing (prints included) to the fresh file."""
    log = tmp_path / "node.log"
    code = (
        "from rmq_cluster.cluster.logging import configure_logging, get_logger\n"
        "configure_logging('info')\n"
        "log = get_logger(node='n')\n"
        "for i in range(200):\n"
        "    log.info('line', i=i, pad='x' * 40)\n"
        "print('printed at the end', flush=True)\n"
    )
    env = {**os.environ, "RMQ_CLUSTER_LOG_FILE": str(log), "RMQ_CLUSTER_LOG_MAX_BYTES": "4096",
           "RMQ_CLUSTER_LOG_BACKUPS": "2"}
    with open(log, "ab") as f:
        done = subprocess.run([sys.executable, "-c", code], stdout=f, stderr=subprocess.STDOUT,
                              env=env, timeout=60, check=False)
    assert done.returncode == 0
    paths = rotated_paths(str(log))
    assert paths == [f"{log}.2", f"{log}.1", str(log)]
    for p in paths[:-1]:
        assert 4096 <= os.path.getsize(p) < 4096 + 200
    lines = [ln for p in paths for ln in Path(p).read_text().splitlines()]
    numbers = [json.loads(ln)["i"] for ln in lines if ln.startswith("{")]
    assert numbers == list(range(numbers[0], 200))  # in order, none lost between files
    assert lines[-1] == "printed at the end"


def test_configure_logging_ignores_a_rotation_file_stderr_is_not(tmp_path: Path) -> None:
    log = tmp_path / "other.log"
    log.write_text("")
    try:
        configure_logging("info", rotation=LogRotation(str(log), max_bytes=4096))
        get_logger().info("x" * 5000)  # goes to (captured) stderr; nothing is renamed
        assert rotated_paths(str(log)) == [str(log)]
    finally:
        structlog.reset_defaults()
        configure_logging("warning")


def test_console_format_when_asked() -> None:
    out = io.StringIO()
    try:
        configure_logging("info", stream=out, json=False)
        get_logger(node="n").info("hello", k=1)
    finally:
        configure_logging("warning")
    assert "hello" in out.getvalue() and not out.getvalue().startswith("{")


def test_bind_address_from_up_or_the_profile(tmp_path: Path) -> None:
    from rmq_cluster.deploy.commands import _with_bind
    from rmq_cluster.deploy.topology import ProfileError, resolve_profile

    single = resolve_profile("single")
    assert _with_bind(single, None) == (single, None)
    spec, hosts = _with_bind(single, "0.0.0.0")
    assert hosts is None  # a wildcard: nodes still advertise 127.0.0.1
    assert spec.broker_properties["bindAddress"] == spec.namesrv_properties["bindAddress"]
    profile = tmp_path / "wide.toml"
    profile.write_text('base = "single"\n[broker_properties]\nbindAddress = "127.0.0.2"\n')
    spec, hosts = _with_bind(resolve_profile(str(profile)), None)
    assert hosts == ["127.0.0.2"]  # nothing listens on 127.0.0.1: advertise the bind address
    assert spec.namesrv_properties["bindAddress"] == "127.0.0.2"
    profile.write_text('base = "single"\n[broker_properties]\nbindAddress = "eth0"\n')
    with pytest.raises(ProfileError, match="bindAddress 'eth0' is not an IPv4 address"):
        _with_bind(resolve_profile(str(profile)), None)


def test_a_command_line_imports_only_the_packages_its_command_needs() -> None:
    """``rmq-cluster clusterList ...`` builds the parser up to the package that has the
    command: chaos, Spark, the dashboard and pytest stay unimported (about half a second of
    CPU per call, hundreds of calls in a test run); the global options before the command are
    skipped when finding it, and a help or an unknown command still gets every package."""
    from rmq_cluster.cli.main import command_word

    assert command_word(["-v", "--log-format", "json", "clusterList", "-n", "x"]) == "clusterList"
    assert command_word(["--help"]) is None and command_word([]) is None
    code = ("import sys; from rmq_cluster.cli.main import build_parser; p = build_parser({!r}); "
            "heavy = [m for m in sys.modules if m.split('.')[:2] in (['rmq_cluster', 'chaos'], "
            "['rmq_cluster', 'spark_jobs'], ['rmq_cluster', 'dashboard']) or m == 'pytest']; "
            "print(len(heavy), len(p._subparsers._group_actions[0].choices))")
    counts = {}
    for command in ("clusterList", "status", None):
        done = subprocess.run([sys.executable, "-c", code.format(command)], capture_output=True,
                              text=True, check=True, timeout=120)
        counts[command] = [int(x) for x in done.stdout.split()]
    assert counts["clusterList"][0] == 0 and counts["status"][0] == 0
    assert counts[None][0] > 0 and counts[None][1] > counts["clusterList"][1]
