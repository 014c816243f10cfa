"""structlog setup: a console renderer on a TTY, JSON lines otherwise; node log rotation.

Processes call ``configure_logging`` once at their entry point; library code only calls
``get_logger(**context)`` and binds ``node``, ``role`` and ``remote`` where it knows them. A
process that configures nothing logs warnings and errors to stderr (never to stdout, where a
CLI's results and an application's own output go).

A node started by ``rmq-cluster up`` writes stdout and stderr to ``logs/<node>.log``; the
supervisor names that file in ``RMQ_CLUSTER_LOG_FILE`` and the node rotates it by size
(``RMQ_CLUSTER_LOG_MAX_BYTES``, default 64 MiB; ``RMQ_CLUSTER_LOG_BACKUPS`` files kept,
default 5): ``<node>.log`` becomes ``<node>.log.1``, ``.1`` becomes ``.2`` and so on, and the
process's stdout and stderr move to a fresh ``<node>.log`` (``dup2``), so its prints and a
crash's traceback follow too.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Mapping
from typing import Any, Final, TextIO

import attrs
import orjson
import structlog

_LEVELS = {
    "debug": 10,
    "info": 20,
    "warning": 30,
    "error": 40,
    "critical": 50,
}
#: ``--log-format``: ``auto`` is console on a TTY, JSON lines otherwise.
LOG_FORMATS: Final = ("auto", "json", "console")

#: Set by the supervisor for a node it starts: the file the node's stdout/stderr go to.
LOG_FILE_ENV: Final = "RMQ_CLUSTER_LOG_FILE"
LOG_MAX_BYTES_ENV: Final = "RMQ_CLUSTER_LOG_MAX_BYTES"
LOG_BACKUPS_ENV: Final = "RMQ_CLUSTER_LOG_BACKUPS"
DEFAULT_LOG_MAX_BYTES: Final = 64 * 1024 * 1024
DEFAULT_LOG_BACKUPS: Final = 5
#: Smallest rotation size accepted (a smaller one would rotate on every line).
MIN_LOG_MAX_BYTES: Final = 4096
MAX_LOG_BACKUPS: Final = 1000


def level_for_verbosity(verbose: int, default: str = "warning") -> str:
    """``-v`` → info, ``-vv`` (or more) → debug; none → ``default``."""
    if verbose >= 2:
        return "debug"
    if verbose == 1:
        return "info" if _LEVELS[default.lower()] > _LEVELS["info"] else default
    return default


def _json_serializer(obj: Any, **_kw: Any) -> str:
    # non-str keys (a log field holding {queue_id: offset}) are written as strings: a log line
    # must never raise where the call that logs it was fine
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


# =========================================================================== rotation


@attrs.frozen
class LogRotation:
    """Rotate ``path`` when it reaches ``max_bytes``, keeping ``backups`` older files."""

    path: str
    max_bytes: int = DEFAULT_LOG_MAX_BYTES
    backups: int = DEFAULT_LOG_BACKUPS

    def __attrs_post_init__(self) -> None:
        if not self.path:
            raise ValueError("log rotation needs a file")
        if self.max_bytes < MIN_LOG_MAX_BYTES:
            raise ValueError(f"{LOG_MAX_BYTES_ENV}: must be >= {MIN_LOG_MAX_BYTES} bytes")
        if not 1 <= self.backups <= MAX_LOG_BACKUPS:
            raise ValueError(f"{LOG_BACKUPS_ENV}: must be 1..{MAX_LOG_BACKUPS}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LogRotation | None:
        """The rotation the environment asks for (None without ``RMQ_CLUSTER_LOG_FILE``);
        ValueError naming the variable when a setting is not a number in range."""
        path = env.get(LOG_FILE_ENV, "").strip()
        if not path:
            return None
        return cls(
            path,
            max_bytes=_env_int(env, LOG_MAX_BYTES_ENV, DEFAULT_LOG_MAX_BYTES),
            backups=_env_int(env, LOG_BACKUPS_ENV, DEFAULT_LOG_BACKUPS),
        )


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    text = env.get(key, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{key}: {text!r} is not a whole number") from None


def rotate_files(path: str, backups: int) -> None:
    """``path.{backups-1}`` → ``path.{backups}`` ... ``path`` → ``path.1`` (the oldest goes)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{path}.{backups}")
    for i in range(backups - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}.{i}", f"{path}.{i + 1}")
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, f"{path}.1")


_ROTATED_SUFFIX = re.compile(r"\.(\d{1,4})$")


def rotated_paths(path: str) -> list[str]:
    """Every file of ``path``'s log that exists, oldest first: ``path.N`` ... ``path.1``,
    ``path``."""
    directory, base = os.path.split(path)
    numbered: list[tuple[int, str]] = []
    try:
        names = os.listdir(directory or ".")
    except OSError:
        names = []
    for name in names:
        if not name.startswith(base + "."):
            continue
        m = _ROTATED_SUFFIX.fullmatch(name[len(base):])
        if m:
            numbered.append((int(m.group(1)), os.path.join(directory, name)))
    out = [p for _n, p in sorted(numbered, reverse=True)]
    if os.path.exists(path):
        out.append(path)
    return out


class _StderrLogger:
    """Writes each line to whatever ``sys.stderr`` is at the time (test capture swaps it);
    with a ``rotation``, rotates the file fd 2 writes to when it reaches its size."""

    def __init__(self, rotation: LogRotation | None = None) -> None:
        self.rotation = rotation
        self._lock = threading.Lock()  # the stop watchdog thread logs too

    def msg(self, message: str) -> None:
        stream = sys.stderr
        stream.write(message + "\n")
        stream.flush()
        if self.rotation is not None:
            self._maybe_rotate(self.rotation)

    def _maybe_rotate(self, rot: LogRotation) -> None:
        with self._lock:
            try:
                if os.fstat(2).st_size < rot.max_bytes:
                    return
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(OSError, ValueError):
                        stream.flush()
                rotate_files(rot.path, rot.backups)
                fd = os.open(rot.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                finally:
                    os.close(fd)
            except OSError:
                # a full or read-only disk: keep writing where we are rather than fail a log
                return

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _writes_to(path: str) -> bool:
    """fd 2 is ``path`` (the rotation only ever moves a file this process writes to)."""
    try:
        mine, there = os.fstat(2), os.stat(path)
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino)


def configure_logging(
    level: str = "info",
    *,
    stream: TextIO | None = None,
    json: bool | None = None,
    rotation: LogRotation | None = None,
) -> None:
    """Route structlog to ``stream`` (the current stderr by default); JSON unless on a TTY.

    Without a ``stream``, a ``rotation`` (or, when none is given, ``RMQ_CLUSTER_LOG_FILE`` and
    its settings in the environment) rotates the file stderr writes to, if it is that file."""
    out = stream if stream is not None else sys.stderr
    if level.lower() not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    if stream is None and rotation is None:
        rotation = LogRotation.from_env(os.environ)
    if rotation is not None and not _writes_to(rotation.path):
        rotation = None
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_serializer)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    if stream is not None:
        factory: Any = structlog.PrintLoggerFactory(file=stream)
    else:
        logger = _StderrLogger(rotation)

        def factory(*_args: Any) -> _StderrLogger:
            return logger

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )


#: Level of a process that never configures logging (an application using the client, a
#: script): warnings and errors only, on stderr, never on stdout. Entry points configure theirs.
LIBRARY_LOG_LEVEL: Final = "warning"


def _quiet_unless_configured() -> None:
    """structlog's own default prints every debug line to stdout; a library must not."""
    if not structlog.is_configured():
        configure_logging(LIBRARY_LOG_LEVEL, rotation=None)


_quiet_unless_configured()


def get_logger(**context: Any) -> Any:
    """A logger with ``context`` bound (e.g. ``node="broker-a"``).

    Lazy: it takes the configuration in force when it logs, so module-level loggers made before
    ``configure_logging`` still follow it.
    """
    return structlog.get_logger(**context)


# =========================================================================== reading logs

#: Fields ``pretty_line`` shows in its fixed columns (the rest follow as key=value).
_HEAD_FIELDS: Final = ("timestamp", "level", "event", "node", "role", "exception")


def pretty_line(line: str) -> str:
    """One log line for a human: a JSON log record as ``time LEVEL [node/role] event k=v``
    (an exception's traceback on the lines below); anything else (a boot line, a raw
    traceback) unchanged."""
    text = line.rstrip("\n")
    if not text.startswith("{"):
        return text
    try:
        rec = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if not isinstance(rec, dict) or "event" not in rec:
        return text
    stamp = str(rec.get("timestamp", ""))
    if "T" in stamp:  # 2026-11-27T06:00:20.123456Z -> 2026-11-27 06:00:20.123
        day, _, clock = stamp.partition("T")
        stamp = f"{day} {clock.rstrip('Z')[:12]}"
    level = str(rec.get("level", "")).upper()
    who = "/".join(str(rec[k]) for k in ("node", "role") if rec.get(k) is not None)
    parts = [p for p in (stamp, f"{level:<7}" if level else "", f"[{who}]" if who else "") if p]
    parts.append(str(rec["event"]))
    for key, value in rec.items():
        if key in _HEAD_FIELDS:
            continue
        shown = value if isinstance(value, str) and value and " " not in value else (
            _json_serializer(value))
        parts.append(f"{key}={shown}")
    out = " ".join(parts)
    exc = rec.get("exception")
    if exc:
        out += "\n" + str(exc).rstrip("\n")
    return out
