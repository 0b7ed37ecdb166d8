"""Replay scenarios: real node shapes and pod requests/lifetimes (Alibaba openb), each pod joined to a
real utilisation profile (Bitbrains). The join is synthetic and every output says so.

How an ``openb`` scenario is built (``build_openb_scenario``):

1. **Nodes**: ``n_nodes`` rows of ``openb-nodes.csv`` drawn without replacement (seeded); cpu and memory
   only (GPUs ignored), names kept (``openb-node-XXXX``).
2. **Pods**: ``openb-pods-cpu.csv`` spans 149 days, but its first ~116 days hold a handful of pods; the
   *busy period* is from the 2nd percentile of creation times to the last creation. At its real rate it
   requests under 1% of the full 1,523-node cluster (peak ~700 cores of 125,000): the trace was made for
   fill-the-cluster studies, not for replaying in time. So the replay **superposes time windows**: the
   busy period is cut into consecutive ``hours``-long windows, they are shuffled (seeded), and windows are
   added one at a time, each shifted onto the replay's [0, hours) clock, until the time-averaged requested
   cpu or memory of all chosen pods reaches ``target_load`` of the sampled nodes' capacity. Each pod keeps
   its real request, its creation offset within its window and its real lifetime; pods already running at
   a window's start arrive at time 0. Arrival and departure are rounded up to the 5-minute step grid and a
   pod lives at least one step.
3. **Usage (synthetic join)**: each pod is joined (seeded) to one of the first ``n_vms`` Bitbrains VMs and
   one of its days; at replay step k the pod uses ``request x (VM usage / VM provisioned)`` per resource,
   read at that day's bin ``start_hour * 12 + k``; 5-minute bins whose ratio exceeds 1.5 (recording errors such
   as memory usage 2048x the provisioned memory) are treated as missing and carry the previous value (all pods
   share the time of day, so the daily pattern is
   kept; different days keep two pods of the same VM from being identical).

The embedded scenario (``trace="embedded"``) reads ``kso/data/replay-openb-nodes.csv`` and
``replay-openb-pods.csv`` (written by ``write_embedded_excerpt`` from the openb trace) and the 20 Bitbrains
VMs of ``kso/data/history-excerpt.csv.gz``, so it needs no ``/work/shared``.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from forecasting.traces import TraceSource
from kso.core.resources import MIB
from optimizer.plan.openb import read_openb

STEP_S = 300.0  # the replay's step: 5 minutes, the Bitbrains sampling period
DAY_STEPS = 288
USAGE_LABEL = "usage: synthetic join (openb requests x Bitbrains utilisation)"
SOURCES = (
    "Alibaba cluster-trace-gpu-v2023 'openb' (openb-nodes.csv, openb-pods-cpu.csv): Q. Weng et al., "
    "\"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent\", USENIX ATC 2023",
    "GWA-T-12 Bitbrains Rnd 2013-08 (TU Delft Grid Workloads Archive): A. Shen et al., \"Statistical Characterization "
    "of Business-Critical Workloads Hosted in Cloud Datacenters\", CCGrid 2015",
)
EMBEDDED_NODES = "replay-openb-nodes.csv"
EMBEDDED_PODS = "replay-openb-pods.csv"
EMBEDDED_HEADER = ("# kso embedded replay excerpt: {what} from Alibaba cluster-trace-gpu-v2023 'openb' (Weng et al., "
                   "USENIX ATC 2023), values unchanged; times relative to the replay start (window superposition, "
                   "see benchmarks/sim/trace.py).\n")
# The largest usage / provisioned ratio taken as real: Bitbrains cpu reaches 1.07 (turbo); anything above 1.5 is
# a recording error (see _grid_from_series).
MAX_RATIO = 1.5
GRID_VERSION = 2  # bump when the grid's construction changes (invalidates ~/.cache/kso)
CACHE_DIR = Path(os.environ.get("KSO_CACHE_DIR", Path.home() / ".cache" / "kso"))


@dataclass
class Scenario:
    """Everything a replay needs. Pod usage is the hidden truth: the engine reads it, policies never do."""

    name: str
    step_s: float
    n_steps: int
    node_names: list[str]
    node_cpu: np.ndarray  # (N,) allocatable millicores
    node_memory: np.ndarray  # (N,) allocatable bytes
    pod_names: list[str]
    pod_cpu: np.ndarray  # (P,) request, millicores
    pod_memory: np.ndarray  # (P,) request, bytes
    pod_arrival: np.ndarray  # (P,) int step at which the pod is first offered to the scheduler
    pod_departure: np.ndarray  # (P,) int step at which it leaves (exclusive); > arrival
    pod_usage: np.ndarray  # (P, n_steps, 2) float32: usage / request per resource (cpu, memory)
    pod_qos: list[str] = field(default_factory=list)
    pod_profile: list[str] = field(default_factory=list)  # "vm:day" of the joined Bitbrains series
    node_labels: list[dict[str, str]] = field(default_factory=list)
    node_taints: list[list[tuple[str, str, str]]] = field(default_factory=list)  # (key, value, effect)
    sources: tuple[str, ...] = SOURCES
    notes: list[str] = field(default_factory=list)
    pod_cpu_limit: np.ndarray | None = None  # (P,) limits (0: none); None: no pod has limits
    pod_memory_limit: np.ndarray | None = None
    pod_owner: list[str] = field(default_factory=list)  # the Deployment of each pod ("" bare)
    usage_label: str = USAGE_LABEL  # what is real and what is synthetic about the usage, in every output

    def __post_init__(self) -> None:
        n = len(self.node_names)
        if not self.node_labels:
            self.node_labels = [{"kubernetes.io/hostname": name} for name in self.node_names]
        if not self.node_taints:
            self.node_taints = [[] for _ in range(n)]
        if not self.pod_qos:
            self.pod_qos = [""] * len(self.pod_names)
        if not self.pod_profile:
            self.pod_profile = [""] * len(self.pod_names)

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_pods(self) -> int:
        return len(self.pod_names)

    def requested_load(self) -> np.ndarray:
        """(n_steps, 2): requested cpu and memory of the pods alive at each step, as a fraction of the
        cluster's capacity (if every pod were placed at arrival)."""
        load = np.zeros((self.n_steps, 2))
        for k in range(self.n_steps):
            alive = (self.pod_arrival <= k) & (self.pod_departure > k)
            load[k] = (self.pod_cpu[alive].sum() / self.node_cpu.sum(), self.pod_memory[alive].sum() / self.node_memory.sum())
        return load

    def describe(self) -> str:
        load = self.requested_load()
        return (f"{self.name}: {self.n_nodes} nodes ({self.node_cpu.sum() / 1000:.0f} cores, "
                f"{self.node_memory.sum() / 2**40:.1f} TiB), {self.n_pods} pods over {self.n_steps} steps of "
                f"{self.step_s / 60:.0f} min; requested load mean cpu {load[:, 0].mean():.0%} / memory "
                f"{load[:, 1].mean():.0%} (peak {load[:, 0].max():.0%} / {load[:, 1].max():.0%}); {self.usage_label}")


# ---- Bitbrains utilisation on the 5-minute grid --------------------------------------------------------------

def _grid_from_series(trace: str, n_vms: int) -> tuple[list[str], np.ndarray]:
    """(vm names, (V, B, 2) utilisation = usage / provisioned) on a 5-minute grid from the trace's first
    timestamp; bin value = mean of its samples, empty bins carried from the previous bin (0 at the start)."""
    series = TraceSource(trace, n_series=n_vms).node_series()
    names = sorted(series, key=lambda s: (len(s), s))
    t0 = min(float(s["cpu"].t[0]) for s in series.values())
    t1 = max(float(s["cpu"].t[-1]) for s in series.values())
    n_bins = int((t1 - t0) // STEP_S) + 1
    grid = np.zeros((len(names), n_bins, 2), dtype=np.float32)
    for v, name in enumerate(names):
        for r, res in enumerate(("cpu", "memory")):
            s = series[name][res]
            ok = np.isfinite(s.y) & np.isfinite(s.t)
            b = ((s.t[ok] - t0) // STEP_S).astype(np.int64)
            sums = np.bincount(b, weights=s.y[ok], minlength=n_bins)
            cnts = np.bincount(b, minlength=n_bins)
            vals = np.full(n_bins, np.nan)
            vals[cnts > 0] = sums[cnts > 0] / cnts[cnts > 0]
            # A few samples report usage at hundreds of times the provisioned memory (e.g. 2048x: a near-zero
            # mem_capacity_kb): data errors, not load. Bins above MAX_RATIO are treated as missing.
            vals[vals > MAX_RATIO] = np.nan
            # carry forward over gaps (pandas ffill), 0 before the first sample
            vals = pd.Series(vals).ffill().fillna(0.0).to_numpy()
            grid[v, :, r] = np.clip(vals, 0.0, None)
    return names, grid


_GRID_CACHE: dict[tuple[str, int], tuple[list[str], np.ndarray]] = {}


def utilisation_grid(trace: str = "bitbrains", n_vms: int = 150) -> tuple[list[str], np.ndarray]:
    """Per-VM utilisation grid, memoised in this process and, for the shared trace, in
    ``~/.cache/kso/bitbrains-grid-<n>.npz`` (reading 150 VMs of the 4.3 M-row file takes seconds)."""
    key = (trace, n_vms)
    if key in _GRID_CACHE:
        return _GRID_CACHE[key]
    cache = CACHE_DIR / f"{trace}-grid-v{GRID_VERSION}-{n_vms}.npz" if trace == "bitbrains" else None
    if cache is not None and cache.exists():
        with np.load(cache) as z:
            out = ([str(x) for x in z["names"]], z["grid"])
    else:
        out = _grid_from_series(trace, n_vms)
        if cache is not None:
            try:
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(".tmp.npz")
                np.savez_compressed(tmp, names=np.array(out[0]), grid=out[1])
                tmp.replace(cache)
            except OSError:
                pass  # a cache we cannot write only costs time
    _GRID_CACHE[key] = out
    return out


# usage_ratio[p, k, r] = grid[vm_p, day_p * 288 + start_bin + k, r]: the joined VM's utilisation at the
# same time of day on the pod's drawn day (synthetic join).
def join_usage(n_pods: int, n_steps: int, grid: np.ndarray, names: list[str], start_hour: float,
               rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    start_bin = int(round(start_hour * 3600 / STEP_S))
    n_days = max(1, (grid.shape[1] - start_bin - n_steps) // DAY_STEPS + 1)
    if start_bin + n_steps > grid.shape[1]:
        raise ValueError(f"utilisation trace too short: {grid.shape[1]} bins for start {start_bin} + {n_steps} steps")
    vm = rng.integers(0, grid.shape[0], n_pods)
    day = rng.integers(0, n_days, n_pods)
    first = day * DAY_STEPS + start_bin
    idx = first[:, None] + np.arange(n_steps)[None, :]
    usage = grid[vm[:, None], idx, :].astype(np.float32)
    return usage, [f"{names[v]}:day{d}" for v, d in zip(vm.tolist(), day.tolist(), strict=True)]


# ---- openb pods: window superposition ------------------------------------------------------------------------

@dataclass
class PodTable:
    names: list[str]
    cpu: np.ndarray
    memory: np.ndarray  # bytes
    arrival_s: np.ndarray  # seconds from replay start
    departure_s: np.ndarray
    qos: list[str]


def superpose_windows(pods: pd.DataFrame, capacity: np.ndarray, hours: float, target_load: float,
                      rng: np.random.Generator, max_windows: int = 10_000) -> tuple[PodTable, list[str]]:
    """Pick shuffled ``hours``-long windows of the busy period until the time-averaged requested cpu or
    memory (max of the two) reaches ``target_load`` x ``capacity`` (cpu milli, memory bytes)."""
    span = hours * 3600.0
    c = pods.creation_time.to_numpy(float)
    d = pods.deletion_time.to_numpy(float)
    busy_start, busy_end = float(np.quantile(c, 0.02)), float(c.max())
    starts = busy_start + span * np.arange(max(1, int((busy_end - busy_start) // span)))
    rng.shuffle(starts)
    steps = np.arange(0.0, span, STEP_S)
    req = np.zeros((len(steps), 2))
    chosen: list[tuple[int, float, np.ndarray]] = []
    cpu_all = pods.cpu_milli.to_numpy(float)
    mem_all = pods.memory_mib.to_numpy(float) * MIB
    for j, w0 in enumerate(starts[:max_windows]):
        sel = np.flatnonzero(((c >= w0) & (c < w0 + span)) | ((c < w0) & (d > w0)))
        if not len(sel):
            continue
        a = np.maximum(c[sel] - w0, 0.0)
        e = d[sel] - w0
        alive = (a[None, :] <= steps[:, None]) & (e[None, :] > steps[:, None])
        req[:, 0] += alive @ cpu_all[sel]
        req[:, 1] += alive @ mem_all[sel]
        chosen.append((j, w0, sel))
        if (req.mean(axis=0) / capacity).max() >= target_load:
            break
    names: list[str] = []
    parts: dict[str, list[np.ndarray]] = {"cpu": [], "mem": [], "a": [], "e": []}
    qos: list[str] = []
    raw_names = pods.name.tolist()
    raw_qos = pods.qos.fillna("").tolist()
    for j, w0, sel in chosen:
        names.extend(f"{raw_names[i]}-w{j}" for i in sel.tolist())
        qos.extend(raw_qos[i] for i in sel.tolist())
        parts["cpu"].append(cpu_all[sel])
        parts["mem"].append(mem_all[sel])
        parts["a"].append(np.maximum(c[sel] - w0, 0.0))
        parts["e"].append(d[sel] - w0)
    table = PodTable(names, *(np.concatenate(parts[k]) if parts[k] else np.zeros(0) for k in ("cpu", "mem", "a", "e")), qos)
    achieved = req.mean(axis=0) / capacity
    notes = [f"pods: {len(chosen)} windows of {hours:g} h from the openb busy period (days "
             f"{busy_start / 86400:.1f}-{busy_end / 86400:.1f} of the trace) superposed until the mean requested "
             f"load reached {target_load:.0%} of capacity (achieved cpu {achieved[0]:.0%}, memory {achieved[1]:.0%})"]
    return table, notes


def _to_steps(arrival_s: np.ndarray, departure_s: np.ndarray, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    # arrival step = ceil(arrival / step) (the first step boundary at or after creation); departure step =
    # max(arrival + 1, ceil(deletion / step)): every pod lives at least one step.
    arrival = np.ceil(arrival_s / STEP_S - 1e-9).astype(np.int64)
    departure = np.maximum(arrival + 1, np.ceil(departure_s / STEP_S - 1e-9).astype(np.int64))
    return arrival, np.minimum(departure, n_steps + 1)


def _assemble(name: str, nodes: pd.DataFrame, table: PodTable, hours: float, grid_trace: str, n_vms: int,
              start_hour: float, rng: np.random.Generator, notes: list[str]) -> Scenario:
    n_steps = int(round(hours * 3600 / STEP_S))
    arrival, departure = _to_steps(table.arrival_s, table.departure_s, n_steps)
    keep = arrival < n_steps
    order = np.flatnonzero(keep)[np.argsort(table.arrival_s[keep], kind="stable")]
    vm_names, grid = utilisation_grid(grid_trace, n_vms)
    usage, profile = join_usage(len(order), n_steps, grid, vm_names, start_hour, rng)
    notes = [*notes, f"usage: each pod joined (seeded) to one of {len(vm_names)} Bitbrains VMs ({grid_trace}) and one "
             f"of its days, read from {start_hour:g}:00 on that day; usage = request x (VM usage / VM provisioned)",
             USAGE_LABEL]
    return Scenario(
        name=name, step_s=STEP_S, n_steps=n_steps,
        node_names=nodes.sn.tolist(), node_cpu=nodes.cpu_milli.to_numpy(float),
        node_memory=nodes.memory_mib.to_numpy(float) * MIB,
        pod_names=[table.names[i] for i in order.tolist()], pod_cpu=table.cpu[order], pod_memory=table.memory[order],
        pod_arrival=arrival[order], pod_departure=departure[order], pod_usage=usage,
        pod_qos=[table.qos[i] for i in order.tolist()], pod_profile=profile, notes=notes)


def build_openb_scenario(n_nodes: int = 100, hours: float = 4.0, seed: int = 0, target_load: float = 0.75,
                         start_hour: float = 9.0, n_vms: int = 150, data_dir: Path | None = None) -> Scenario:
    all_nodes, pods = read_openb(data_dir)
    rng = np.random.default_rng(seed)
    if n_nodes > len(all_nodes):
        raise ValueError(f"--nodes {n_nodes}: the openb trace has {len(all_nodes)} nodes")
    nodes = all_nodes.iloc[np.sort(rng.choice(len(all_nodes), n_nodes, replace=False))].reset_index(drop=True)
    capacity = np.array([nodes.cpu_milli.sum(), nodes.memory_mib.sum() * MIB], dtype=float)
    table, notes = superpose_windows(pods, capacity, hours, target_load, rng)
    notes.insert(0, f"nodes: {n_nodes} of the {len(all_nodes)} openb nodes drawn with seed {seed} (cpu and memory only)")
    return _assemble(f"openb-{n_nodes}n-{hours:g}h-s{seed}", nodes, table, hours, "bitbrains", n_vms, start_hour, rng, notes)


# ---- the embedded excerpt (kso demo, tests) -------------------------------------------------------------------

def write_embedded_excerpt(dest_dir: Path | None = None, n_nodes: int = 40, hours: float = 4.0, seed: int = 7,
                           target_load: float = 0.75) -> tuple[Path, Path]:
    """Write ``kso/data/replay-openb-nodes.csv`` and ``replay-openb-pods.csv``: ``n_nodes`` openb node shapes
    and the superposed pods of ``hours`` (see the module docstring), values unchanged, with a source header."""
    dest = Path(dest_dir) if dest_dir else Path(__file__).resolve().parents[2] / "kso" / "data"
    all_nodes, pods = read_openb()
    rng = np.random.default_rng(seed)
    nodes = all_nodes.iloc[np.sort(rng.choice(len(all_nodes), n_nodes, replace=False))].reset_index(drop=True)
    capacity = np.array([nodes.cpu_milli.sum(), nodes.memory_mib.sum() * MIB], dtype=float)
    table, notes = superpose_windows(pods, capacity, hours, target_load, rng)
    keep = table.arrival_s < hours * 3600
    out_pods = pd.DataFrame({
        "name": np.array(table.names)[keep], "cpu_milli": table.cpu[keep].astype(int),
        "memory_mib": (table.memory[keep] / MIB).astype(int), "qos": np.array(table.qos)[keep],
        "arrival_s": table.arrival_s[keep].astype(int),
        "departure_s": np.minimum(table.departure_s[keep], hours * 3600 + STEP_S).astype(int)})
    paths = (dest / EMBEDDED_NODES, dest / EMBEDDED_PODS)
    for path, frame, what in ((paths[0], nodes[["sn", "cpu_milli", "memory_mib"]], f"{n_nodes} node shapes"),
                              (paths[1], out_pods, f"{len(out_pods)} pods over {hours:g} h ({notes[0]})")):
        buf = io.StringIO()
        buf.write(EMBEDDED_HEADER.format(what=what))
        frame.to_csv(buf, index=False)
        path.write_text(buf.getvalue())
    return paths


def build_embedded_scenario(hours: float | None = None, seed: int = 0, start_hour: float = 9.0) -> Scenario:
    """The small scenario shipped in kso/data (no /work/shared needed); ``hours`` cuts it shorter."""
    pkg = resources.files("kso.data")
    nodes = pd.read_csv(io.StringIO(pkg.joinpath(EMBEDDED_NODES).read_text()), comment="#")
    pods = pd.read_csv(io.StringIO(pkg.joinpath(EMBEDDED_PODS).read_text()), comment="#")
    span_h = float(math.ceil(pods.arrival_s.max() / 3600.0)) if len(pods) else 1.0
    hours = min(hours or span_h, span_h)
    table = PodTable(pods.name.tolist(), pods.cpu_milli.to_numpy(float), pods.memory_mib.to_numpy(float) * MIB,
                     pods.arrival_s.to_numpy(float), pods.departure_s.to_numpy(float), pods.qos.fillna("").tolist())
    rng = np.random.default_rng(seed)
    notes = [f"embedded excerpt kso/data/{EMBEDDED_NODES}, {EMBEDDED_PODS} (openb, window superposition) and "
             "kso/data/history-excerpt.csv.gz (20 Bitbrains VMs x 3 days)"]
    return _assemble(f"embedded-{len(nodes)}n-{hours:g}h-s{seed}", nodes, table, hours, "embedded", 20, start_hour, rng,
                     notes)


def build_scenario(trace: str, n_nodes: int, hours: float, seed: int, target_load: float = 0.75,
                   start_hour: float = 9.0) -> Scenario:
    if trace == "openb":
        return build_openb_scenario(n_nodes, hours, seed, target_load, start_hour)
    if trace == "embedded":
        return build_embedded_scenario(hours, seed, start_hour)
    raise ValueError(f"unknown trace {trace!r} (openb, embedded)")
