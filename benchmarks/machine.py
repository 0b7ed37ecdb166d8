"""The machine a benchmark ran on, printed beside every result: one description (``machine_facts``), as one
line (``machine_line``: the solver, forecast and replay benchmarks) or as a block (``machine_info``: the
latency benchmarks, with the versions of the HTTP stack)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass

# The versions the latency benchmarks print (the HTTP stack and numpy).
HTTP_PACKAGES = ("uvicorn", "fastapi", "starlette", "orjson", "numpy", "uvloop", "httptools")


@dataclass(frozen=True)
class MachineFacts:
    platform: str
    cpu_model: str
    logical_cpus: int
    usable_cpus: int  # this process's affinity (a container may get fewer than the machine has)
    ram_gib: float
    load: tuple[float, float, float] | None  # 1/5/15-minute load average; None where the OS has none
    python: str
    python_implementation: str


def _cpu_model() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        return cpu


def _ram_gib() -> float:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def machine_facts(load: tuple[float, float, float] | None = None) -> MachineFacts:
    """The machine now (``load``: a load average taken earlier, e.g. before a run)."""
    try:
        avg = load if load is not None else os.getloadavg()
    except OSError:
        avg = None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return MachineFacts(platform.platform(), _cpu_model(), os.cpu_count() or 0, usable, _ram_gib(),
                        tuple(avg) if avg is not None else None,  # type: ignore[arg-type]
                        platform.python_version(), platform.python_implementation())


def machine_line(load: tuple[float, float, float] | None = None) -> str:
    """Platform, CPU model, logical CPUs, load average (``load``, else now), Python and OR-Tools versions."""
    m = machine_facts(load)
    load_text = "/".join(f"{x:.2f}" for x in m.load) if m.load is not None else "n/a"
    ortools = package_version("ortools")
    ortools = "?" if ortools == "-" else ortools
    return (f"{m.platform}, {m.cpu_model}, {m.logical_cpus} logical CPUs, load average {load_text} "
            f"(1/5/15 min), Python {m.python}, OR-Tools {ortools}")


def machine_info(packages: tuple[str, ...] = HTTP_PACKAGES) -> list[str]:
    """The machine as a block of lines, with the versions of ``packages``."""
    m = machine_facts()
    load = " ".join(f"{x:.2f}" for x in m.load) if m.load is not None else "n/a"
    return [
        f"platform  {m.platform}",
        f"cpu       {m.cpu_model}; {m.logical_cpus} logical cores ({m.usable_cpus} usable); {m.ram_gib:.1f} GiB RAM",
        f"python    {m.python} ({m.python_implementation}); " + ", ".join(f"{p} {package_version(p)}" for p in packages),
        f"load avg  {load} at start: a shared, noisy machine "
        "(other jobs run beside this one); read the numbers as indicative, p99/max especially",
    ]
