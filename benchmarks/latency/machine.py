"""The machine a benchmark ran on, printed with every result."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

import psutil


def machine_info() -> list[str]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for pkg in ("uvicorn", "fastapi", "starlette", "orjson", "numpy", "uvloop", "httptools"):
        try:
            versions.append(f"{pkg} {importlib.metadata.version(pkg)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{pkg} -")
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count() or 0
    load = os.getloadavg()
    mem = psutil.virtual_memory()
    return [
        f"platform  {platform.platform()}",
        f"cpu       {cpu}; {os.cpu_count()} logical cores ({affinity} usable); "
        f"{mem.total / 2**30:.1f} GiB RAM",
        f"python    {platform.python_version()} ({platform.python_implementation()}); " + ", ".join(versions),
        f"load avg  {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start: a shared, noisy machine "
        "(other jobs run beside this one); read the numbers as indicative, p99/max especially",
    ]
