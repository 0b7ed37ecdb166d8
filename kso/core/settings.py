"""Settings: dataclasses whose fields name their environment variable, parsed in one place.

A field declared with ``setting("SAFEUTILIZATION", 90, kind="percent")`` reads that variable; a value
that does not parse or lies outside its range falls back to the default with a logged warning, as
kube-safe-scheduler did. A config file (YAML/JSON mapping of the same variable names) may supply
values; the environment wins over the file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml

log = logging.getLogger("kso.core.settings")

T = TypeVar("T")

# kube-safe-scheduler's LOG_LEVEL names -> Python levels (TRACE below DEBUG, ALERT above ERROR).
TRACE = 5
ALERT = 45
LOG_LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
              "ERROR": logging.ERROR, "ALERT": ALERT}
logging.addLevelName(TRACE, "TRACE")
logging.addLevelName(ALERT, "ALERT")


class ConfigError(ValueError):
    """A config file that cannot be used at all (unreadable, not a mapping)."""


def setting(env: str, default: Any, kind: str = "", lo: float | None = None, hi: float | None = None,
            help: str = "") -> Any:
    """A dataclass field read from environment variable ``env``.

    kind: "" (type of the default), "percent" (integer 0..100), "choice:A,B,C" (case-insensitive),
    "list" (comma-separated strings), "weights" (name=int,name=int).
    """
    meta = {"env": env, "kind": kind, "lo": lo, "hi": hi, "help": help}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _parse(raw: str, default: Any, kind: str, lo: float | None, hi: float | None) -> Any:
    raw = raw.strip()
    if kind == "percent":
        value = int(raw)
        if not 0 <= value <= 100:
            raise ValueError("outside 0..100")
        return value
    if kind.startswith("choice:"):
        choices = kind[len("choice:"):].split(",")
        up = raw.upper()
        if up not in choices:
            raise ValueError(f"not one of {', '.join(choices)}")
        return up
    if kind == "list":
        return [p.strip() for p in raw.split(",") if p.strip()]
    if kind == "weights":
        out: dict[str, int] = {}
        for part in raw.split(","):
            if not part.strip():
                continue
            name, eq, w = part.partition("=")
            weight = int(w) if eq else 1
            if weight < 0:
                raise ValueError(f"negative weight for {name.strip()}")
            out[name.strip()] = weight
        return out
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError("not a boolean")
    if isinstance(default, int):
        value = int(raw)
    elif isinstance(default, float):
        value = float(raw)
        if value != value:
            raise ValueError("NaN")
    else:
        return raw
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"outside {lo}..{hi}")
    return value


def load_settings(cls: type[T], env: Mapping[str, str] | None = None,
                  file_values: Mapping[str, Any] | None = None) -> T:
    """Build ``cls`` from the file values, then the environment; bad values keep the default."""
    env = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = f.metadata
        name = meta.get("env")
        if not name:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        for source, values in (("config file", file_values or {}), ("environment", env)):
            if name not in values:
                continue
            raw = values[name]
            try:
                kwargs[f.name] = _parse(str(raw) if not isinstance(raw, str) else raw, default,
                                        meta["kind"], meta["lo"], meta["hi"])
            except ValueError as exc:
                _warn_ignored(source, name, str(raw), str(exc), repr(kwargs.get(f.name, default)))
    return cls(**kwargs)


@lru_cache(maxsize=256)
def _warn_ignored(source: str, name: str, raw: str, why: str, using: str) -> None:
    """Once per bad value: several settings classes share a name (U* and eps in SafeParams and PlanSettings),
    and one typo should be one warning, not one per class that reads it."""
    log.warning("%s %s=%r ignored (%s); using %s", source, name, raw, why, using)


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """Read a YAML/JSON mapping of setting names. A corrupt file is reported and ignored as a whole
    (never half-loaded): the caller gets {} and a logged error."""
    if not path:
        return {}
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        log.error("config file %s ignored: %s", path, exc)
        return {}
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        log.error("config file %s ignored: expected a mapping of setting names to values", path)
        return {}
    return data


def parse_log_level(raw: str | None) -> int:
    """LOG_LEVEL as kube-safe-scheduler reads it: TRACE..ALERT, case-insensitive; else INFO + warning."""
    if raw is None or raw == "":
        return logging.INFO
    level = LOG_LEVELS.get(raw.strip().upper())
    if level is None:
        log.warning("LOG_LEVEL=%r is not one of %s; using INFO", raw, ", ".join(LOG_LEVELS))
        return logging.INFO
    return level
