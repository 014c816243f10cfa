"""structlog setup: a console renderer on a TTY, JSON lines otherwise.

Processes call ``configure_logging`` once at their entry point; library code only calls
``get_logger(**context)`` and binds ``node``, ``role`` and ``remote`` where it knows them. A
process that configures nothing logs warnings and errors to stderr (never to stdout, where a
CLI's results and an application's own output go).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Final, TextIO

import orjson
import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def _json_serializer(obj: Any, **_kw: Any) -> str:
    # non-str keys (a log field holding {queue_id: offset}) are written as strings: a log line
    # must never raise where the call that logs it was fine
    return orjson.dumps(obj, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


class _StderrLogger:
    """Writes each line to whatever ``sys.stderr`` is at the time (test capture swaps it)."""

    def msg(self, message: str) -> None:
        stream = sys.stderr
        stream.write(message + "\n")
        stream.flush()

    log = debug = info = warning = warn = error = critical = exception = fatal = msg


def _stderr_logger_factory(*_args: Any) -> _StderrLogger:
    return _StderrLogger()


def configure_logging(
    level: str = "info", *, stream: TextIO | None = None, json: bool | None = None
) -> None:
    """Route structlog to ``stream`` (the current stderr by default); JSON unless on a TTY."""
    out = stream if stream is not None else sys.stderr
    if level.lower() not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    use_json = (not out.isatty()) if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer(serializer=_json_serializer)
        if use_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=(
            structlog.PrintLoggerFactory(file=stream)
            if stream is not None
            else _stderr_logger_factory
        ),
        cache_logger_on_first_use=False,
    )


#: Level of a process that never configures logging (an application using the client, a
#: script): warnings and errors only, on stderr, never on stdout. Entry points configure theirs.
LIBRARY_LOG_LEVEL: Final = "warning"


def _quiet_unless_configured() -> None:
    """structlog's own default prints every debug line to stdout; a library must not."""
    if not structlog.is_configured():
        configure_logging(LIBRARY_LOG_LEVEL)


_quiet_unless_configured()


def get_logger(**context: Any) -> Any:
    """A logger with ``context`` bound (e.g. ``node="broker-a"``).

    Lazy: it takes the configuration in force when it logs, so module-level loggers made before
    ``configure_logging`` still follow it.
    """
    return structlog.get_logger(**context)
