"""Settings: dataclasses whose fields name their environment variable, parsed in one place.

A field declared with ``setting("SAFEUTILIZATION", 90, kind="percent", help=...)`` reads that variable. A
config file (YAML/JSON mapping of the same variable names) may supply values; the environment wins over
the file. One rule everywhere: a value that does not parse or lies outside its range, a config file that is
missing or unreadable, and a name kso does not read are errors (``ConfigError``, one line naming the setting
and what it accepts), never a fallback to the default.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# kube-safe-scheduler's LOG_LEVEL names -> Python levels (TRACE below DEBUG, ALERT above ERROR).
TRACE = 5
ALERT = 45
LOG_LEVELS = {"TRACE": TRACE, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING,
              "ERROR": logging.ERROR, "ALERT": ALERT}
logging.addLevelName(TRACE, "TRACE")
logging.addLevelName(ALERT, "ALERT")
log = logging.getLogger("kso.core.settings")

# Every variable declared by a setting() of the modules imported so far: name -> its field's metadata.
DECLARED: dict[str, dict[str, Any]] = {}


class ConfigError(ValueError):
    """A configuration kso cannot use: a missing or unreadable config file, a name kso does not read, a bad
    value. The message is one line naming the file or setting."""


def setting(env: str, default: Any, kind: str = "", lo: float | None = None, hi: float | None = None,
            help: str = "") -> Any:
    """A dataclass field read from environment variable ``env``.

    kind: "" (type of the default), "percent" (integer 0..100), "choice:A,B,C" (case-insensitive),
    "list" (comma-separated strings), "weights" (name=int,name=int), "dns-label" (a Kubernetes object name that
    must be an RFC 1123 label: a namespace), "dns-subdomain" (an RFC 1123 subdomain: a PriorityClass, a scheduler
    name).
    """
    meta = {"env": env, "kind": kind, "lo": lo, "hi": hi, "help": help, "default": default}
    DECLARED.setdefault(env, meta)
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass
class ConfigFileSettings:
    path: str = setting("KSO_CONFIG", "", help="settings file every command reads when not given --config (a YAML/JSON "
                        "mapping of these names to values; the environment wins over it)")


def choices(kind: str) -> list[str]:
    """The allowed values of a "choice:A,B,C" kind (else [])."""
    return kind[len("choice:"):].split(",") if kind.startswith("choice:") else []


# RFC 1123, as the API server validates names (k8s.io/apimachinery/pkg/util/validation).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_dns_name(raw: str, kind: str) -> str:
    """``raw`` if it is a DNS label (``kind`` "dns-label", at most 63 characters) or subdomain ("dns-subdomain", at
    most 253) as Kubernetes names must be; else ValueError saying what is wrong."""
    label = kind == "dns-label"
    limit, pattern = (63, _DNS_LABEL) if label else (253, _DNS_SUBDOMAIN)
    what = "an RFC 1123 DNS label" if label else "an RFC 1123 DNS subdomain"
    if not raw:
        raise ValueError(f"empty; must be {what}")
    if len(raw) > limit:
        raise ValueError(f"{len(raw)} characters; must be {what} of at most {limit}")
    if not pattern.fullmatch(raw):
        rule = "lower-case letters, digits and '-'" + ("" if label else " in '.'-separated parts")
        raise ValueError(f"not {what} ({rule}, starting and ending with a letter or digit)")
    return raw


def _parse(raw: str, default: Any, kind: str, lo: float | None, hi: float | None) -> Any:
    raw = raw.strip()
    if kind in ("dns-label", "dns-subdomain"):
        return check_dns_name(raw, kind)
    if kind == "percent":
        value = int(raw)
        if not 0 <= value <= 100:
            raise ValueError("not an integer percentage 0..100")
        return value
    if allowed := choices(kind):
        up = raw.upper()
        if up not in allowed:
            raise ValueError(f"not one of {', '.join(allowed)}{did_you_mean(up, allowed)}")
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
        raise ValueError("not a boolean (true/false, 1/0, yes/no, on/off)")
    if isinstance(default, int):
        value = int(raw)
    elif isinstance(default, float):
        value = float(raw)
        if value != value:
            raise ValueError("NaN")
    else:
        return raw
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"outside {accepted(lo, hi)}")
    return value


def accepted(lo: float | None, hi: float | None) -> str:
    """A range as the errors and the settings table write it: "1..65535", ">= 0.1", "<= 60"."""
    def num(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    if lo is not None and hi is not None:
        return f"{num(lo)}..{num(hi)}"
    return f">= {num(lo)}" if lo is not None else f"<= {num(hi)}" if hi is not None else ""


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """' (did you mean X?)' for the closest candidate, else ''."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _text(value: Any) -> str:
    """A config file's value as the environment would spell it (a YAML list for a list, a mapping for weights)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


def load_settings(cls: type[T], env: Mapping[str, str] | None = None,
                  file_values: Mapping[str, Any] | None = None) -> T:
    """Build ``cls`` from the file values, then the environment; ConfigError naming every bad value."""
    env = os.environ if env is None else env
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        meta = f.metadata
        name = meta.get("env")
        if not name:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        for source, values in (("config file", file_values or {}), ("environment", env)):
            if name not in values:
                continue
            raw = _text(values[name])
            try:
                kwargs[f.name] = _parse(raw, default, meta["kind"], meta["lo"], meta["hi"])
            except ValueError as exc:
                problems.append(f"{name}={raw!r} ({source}): {_reason(exc)}")
    if problems:
        raise ConfigError("; ".join(problems))
    return cls(**kwargs)


def _reason(exc: ValueError) -> str:
    """int('x') and float('x') say "invalid literal for int() with base 10: 'x'": say what was expected."""
    text = str(exc)
    if text.startswith("invalid literal for int()"):
        return "not an integer"
    if text.startswith("could not convert string to float"):
        return "not a number"
    return text


def read_config_file(path: str | Path | None) -> dict[str, Any]:
    """A YAML/JSON mapping of setting names; {} when ``path`` is empty. A file that is missing, unreadable or
    not such a mapping is a ConfigError (never half-loaded, never ignored)."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not YAML/JSON: {' '.join(str(exc).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ConfigError(f"config file {path}: expected a mapping of setting names to values")
    return data


def check_names(names: Iterable[str], known: Iterable[str], where: str) -> None:
    """ConfigError naming each of ``names`` that is not in ``known`` (with the closest known name)."""
    known = sorted(known)
    unknown = [f"{name}{did_you_mean(name, known)}" for name in sorted(names) if name not in known]
    if unknown:
        raise ConfigError(f"{where} names {'a setting' if len(unknown) == 1 else 'settings'} kso does not read: "
                          + ", ".join(unknown))


def settings_fields(classes: Iterable[type]) -> list[tuple[type, dataclasses.Field[Any]]]:
    """(class, field) of every declared setting of ``classes``, each variable once (the first class that has
    it: inherited settings are listed with their base)."""
    seen: set[str] = set()
    out = []
    for cls in classes:
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = f.metadata.get("env")
            if name and name not in seen:
                seen.add(name)
                out.append((cls, f))
    return out


def describe_default(meta: Mapping[str, Any]) -> str:
    """A setting's default as the settings table writes it (in backticks; "(none)" when empty)."""
    default = meta["default"]
    if default == "" or default == [] or default == {}:
        return "(none)"
    text = f"{default:g}" if isinstance(default, float) else _text(default)
    return f"`{text}`"


def describe_values(meta: Mapping[str, Any]) -> str:
    """What a setting accepts, as the settings table writes it."""
    kind, default = meta["kind"], meta["default"]
    if kind == "percent":
        return "0..100"
    if allowed := choices(kind):
        return ", ".join(allowed)
    if kind == "list":
        return "comma-separated"
    if kind == "weights":
        return "name=weight,..."
    if kind == "dns-label":
        return "DNS label"
    if kind == "dns-subdomain":
        return "DNS subdomain"
    if isinstance(default, bool):
        return "true, false"
    if isinstance(default, (int, float)):
        kind_name = "integer" if isinstance(default, int) else "number"
        bounds = accepted(meta["lo"], meta["hi"])
        return f"{kind_name} {bounds}".strip()
    return "text"


def markdown_table(sections: Iterable[tuple[str, Iterable[type]]]) -> str:
    """The configuration table: one row per variable, grouped under each section's title."""
    rows = ["| variable | default | accepts | meaning |", "|---|---|---|---|"]
    seen: set[str] = set()
    for title, classes in sections:
        fields = [(c, f) for c, f in settings_fields(classes) if f.metadata["env"] not in seen]
        if not fields:
            continue
        rows.append(f"| **{title}** | | | |")
        for _, f in fields:
            meta = f.metadata
            seen.add(meta["env"])
            cells = [f"`{meta['env']}`", describe_default(meta), describe_values(meta), meta["help"]]
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def parse_log_level(raw: str | None) -> int:
    """LOG_LEVEL as kube-safe-scheduler reads it: TRACE..ALERT, case-insensitive; else INFO + warning."""
    if raw is None or raw == "":
        return logging.INFO
    level = LOG_LEVELS.get(raw.strip().upper())
    if level is None:
        log.warning("LOG_LEVEL=%r is not one of %s; using INFO", raw, ", ".join(LOG_LEVELS))
        return logging.INFO
    return level
