"""The machine a benchmark ran on, printed beside every result (one line)."""

from __future__ import annotations

import importlib.metadata
import os
import platform


def _cpu_model() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        return cpu


def machine_line(load: tuple[float, float, float] | None = None) -> str:
    """Platform, CPU model, logical CPUs, load average (``load``, else now), Python and OR-Tools versions."""
    try:
        avg = load if load is not None else os.getloadavg()
        load_text = "/".join(f"{x:.2f}" for x in avg)
    except OSError:
        load_text = "n/a"
    try:
        ortools = importlib.metadata.version("ortools")
    except importlib.metadata.PackageNotFoundError:
        ortools = "?"
    return (f"{platform.platform()}, {_cpu_model()}, {os.cpu_count()} logical CPUs, load average {load_text} "
            f"(1/5/15 min), Python {platform.python_version()}, OR-Tools {ortools}")
