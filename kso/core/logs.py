"""kso's log lines: one handler on the root logger, so kso's own lines, uvicorn's and the libraries' share one
format: text (``2026-01-02 03:04:05,678 INFO kso.extender: message``) or JSON, one object per line, as
Kubernetes components write with ``--logging-format=json`` (``KSO_LOG_FORMAT`` / ``--log-format``)."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kso.core.settings import parse_log_level, setting

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = "TRACE,DEBUG,INFO,WARNING,ERROR,ALERT"


@dataclass
class LogSettings:
    level: str = setting("LOG_LEVEL", "INFO", kind=f"choice:{LEVELS}",
                         help="level of kso's own log lines (other libraries, uvicorn included, log warnings and above)")
    format: str = setting("KSO_LOG_FORMAT", "TEXT", kind="choice:TEXT,JSON",
                          help="TEXT: one line per record; JSON: one JSON object per line (ts, level, logger, msg) "
                               "for clusters that ship logs as JSON (--log-format)")

    @property
    def level_number(self) -> int:
        return parse_log_level(self.level)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``ts`` (seconds since the epoch, as Kubernetes' JSON logs),
    ``level``, ``logger``, ``msg``, and ``exc`` (the traceback's text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"ts": round(record.created, 6), "level": record.levelname, "logger": record.name,
                               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format.upper() == "JSON" else logging.Formatter(TEXT_FORMAT)


class KsoHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The stderr handler configure_logging installs (told apart from a host's, e.g. pytest's)."""


def configure_logging(level: int = logging.WARNING, log_format: str = "TEXT") -> None:
    """kso's loggers ("kso.*") at ``level``; the others (uvicorn's too) at WARNING and above, or at ``level`` when
    higher; every record through one stderr handler in ``log_format`` (TEXT or JSON). A second call replaces
    the first one's handler (the extender's LOG_LEVEL after the command's default); handlers someone else
    installed (a test harness) are left alone."""
    handler = KsoHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, KsoHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))
    logging.getLogger("kso").setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # their records reach the root handler only
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True
        uvicorn_logger.setLevel(max(level, logging.WARNING))


def logging_is_hosted() -> bool:
    """Someone other than kso configured the root logger (pytest, an application embedding kso)."""
    return any(not isinstance(h, KsoHandler) for h in logging.getLogger().handlers)


def current_format() -> str:
    """"JSON" when kso's handler writes JSON (configure_logging), else "TEXT"."""
    ours = [h for h in logging.getLogger().handlers if isinstance(h, KsoHandler)]
    return "JSON" if ours and isinstance(ours[-1].formatter, JsonFormatter) else "TEXT"


def fields(values: Mapping[str, Any]) -> str:
    """``k=v k=v`` for a log line (floats to 4 significant digits, lists joined by commas): no Python reprs."""
    def text(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        if isinstance(v, (list, tuple, set)):
            return ",".join(text(x) for x in v) or "-"
        if isinstance(v, Mapping):
            return ",".join(f"{k}={text(x)}" for k, x in v.items()) or "-"
        return str(v)

    return " ".join(f"{k}={text(v)}" for k, v in values.items())


def uvicorn_level(level: int) -> str:
    """uvicorn's ``log_level`` name for kso's LOG_LEVEL: as the other libraries, warnings and above unless kso's
    level is higher (its own "serving ... on" line replaces uvicorn's startup lines)."""
    level = max(level, logging.WARNING)
    for limit, name in ((logging.WARNING, "warning"), (logging.ERROR, "error")):
        if level <= limit:
            return name
    return "critical"


class FirstWarnings:
    """A failure that repeats (every round, every pod) logged at WARNING the first time each of its kinds occurs (an
    HTTP status, say) and at DEBUG after, so the log says what is wrong once instead of once per attempt."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._seen: set[Any] = set()
        self._lock = threading.Lock()

    def log(self, kind: Any, msg: str, *args: Any) -> None:
        with self._lock:
            first = kind not in self._seen
            self._seen.add(kind)
        self.logger.log(logging.WARNING if first else logging.DEBUG, msg, *args)
