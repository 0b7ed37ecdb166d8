"""Where the real traces are (``kso bench``, the trace forecasts, the benchmarks and tests): the folder
``KSO_TRACE_DIR`` names, else ``../shared/data`` beside the checkout. Kept free of numpy and pandas, so that
the settings check of every command can read this declaration cheaply."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kso.core.settings import setting

CHECKOUT = Path(__file__).resolve().parents[1]
BESIDE_CHECKOUT = CHECKOUT.parent / "shared" / "data"


@dataclass
class TraceSettings:
    trace_dir: str = setting("KSO_TRACE_DIR", "", help="folder of the trace files (Bitbrains, Alibaba, openb); empty = "
                             "../shared/data beside the checkout")


def trace_dir(env: Mapping[str, str] | None = None) -> Path:
    """KSO_TRACE_DIR, else ../shared/data beside the checkout (whether or not it exists: ``missing`` says)."""
    raw = (os.environ if env is None else env).get("KSO_TRACE_DIR", "").strip()
    return Path(raw).expanduser() if raw else BESIDE_CHECKOUT


class TraceFileMissing(FileNotFoundError):
    """A trace file that is not where KSO_TRACE_DIR (or its default) says; the message names the setting."""


def require(path: Path) -> Path:
    """``path`` when it exists, else TraceFileMissing saying where it was looked for and which setting moves it."""
    if not path.exists():
        raise TraceFileMissing(missing(path))
    return path


def missing(path: Path) -> str:
    """Why ``path`` cannot be read: for a file of the trace folder, naming the setting that locates it."""
    if path.parent != trace_dir():  # a folder the caller chose
        return f"{path} does not exist"
    where = (f"KSO_TRACE_DIR={os.environ['KSO_TRACE_DIR']}" if os.environ.get("KSO_TRACE_DIR", "").strip()
             else f"KSO_TRACE_DIR is not set, so ../shared/data beside the checkout ({BESIDE_CHECKOUT}) is used")
    return f"{path} does not exist ({where}; set KSO_TRACE_DIR to the folder holding the trace files)"
