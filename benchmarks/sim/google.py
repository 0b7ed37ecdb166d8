"""The real-join scenario: Google Borg 2019 tasks whose request and usage come from the same task.

How a ``google`` scenario is built (``build_google_scenario``); every rule is repeated in ``notes``:

1. **Nodes**: ``n_nodes`` openb node shapes drawn without replacement (seeded), as in the openb replay;
   they are the autoscaler's pool, in that order.
2. **Units**: Google normalises cpu and memory so that 1.0 = the cell's largest machine. One rule maps them
   onto the replay's nodes: 1.0 cpu = 128 cores and 1.0 memory = 1 TiB, the largest openb node shape
   (128 cores, 1 TiB); the same factor for requests, limits and usage.
3. **Series**: each job's tasks are put on a 5-minute grid on the *job's own clock* (bin 0 = the job's
   first window), so replicas of one job keep their real alignment and correlation; the three jobs ran in
   different periods (days 0-31, 10.4-13.5, 28.4-31) and are never aligned with each other. A task's bin is
   the mean of its windows starting there (about 1% are not 5 minutes long); gaps of up to
   ``GAP_FILL_BINS`` bins carry the previous value; a longer gap means the task was not running (its pod
   leaves, and comes back as a new pod when the task restarts). Usage = ``avg_cpu_usage`` and
   ``avg_memory_usage`` (5-minute means: bursts inside a window, ``max_cpu_usage``, are not replayed).
4. **Requests and history split**: each job's first third of its span is *history*, the rest is *replay*.
   ``requests="limit"``: a pod's request is its task's Borg limit (``cpu_limit``, ``memory_limit``) at the
   pod's first replayed bin (requests are immutable in Kubernetes: a later change of ``cpu_limit`` within
   job 399444405700's tasks is not applied to a running pod; a restarted pod takes the new value).
   ``requests="p90"`` (right-sized, what a VPA would leave): every pod of a job requests the p90 of all its
   tasks' usage samples in the job's history third (per resource); no oracle, the replay never reads the
   history. Limits are the Borg limits in both; they are not enforced (Borg cpu limits are soft and
   memory exceeds its limit in 0.8% of windows by at most 7%).
5. **Deployments (synthetic: series reuse with a time offset)**: a Deployment is one job: its replicas are
   the job's tasks, all read at the same offset ``o`` of the job's replay part (replay step k = job bin
   o + k). To fill a cluster, Deployments are added with seeded random jobs and offsets until the
   time-averaged requested cpu or memory reaches ``target_load`` of the pool's capacity: the same task's
   series is reused by several Deployments at different offsets, which is labelled synthetic.
6. **Arrival and departure (synthetic join with openb)**: each Deployment's arrival and departure are those of a
   real openb pod (a seeded random pod alive in a random ``hours``-long window of openb's busy period,
   shifted onto the replay clock: arrival = max(creation - window start, 0)).
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.sim.trace import MIB, STEP_S, Scenario
from forecasting.traces import DATA_DIR

GOOGLE_FILE = "google2019-tasks.csv.gz"
CPU_UNIT_MILLI = 128_000.0  # 1.0 normalised cpu = the largest openb node's 128 cores
MEMORY_UNIT_BYTES = 1024.0**4  # 1.0 normalised memory = the largest openb node's 1 TiB
GAP_FILL_BINS = 2
HISTORY_SHARE = 1.0 / 3.0
RIGHT_SIZE_QUANTILE = 0.90
GOOGLE_LABEL = ("usage: real join (Google Borg 2019 task requests and usage of the same task); synthetic: series "
                "reused at time offsets to fill the cluster, Deployment arrival/departure from openb lifetimes")
GOOGLE_SOURCES = (
    "Google cluster-data 2019, cell a (CC-BY 4.0): M. Tirmazi et al., \"Borg: the Next Generation\", EuroSys 2020; "
    "34 tasks of 3 jobs as exported by muse-research-lab/cloud-traces-comparison",
    "Alibaba cluster-trace-gpu-v2023 'openb' (node shapes, pod lifetimes): Q. Weng et al., USENIX ATC 2023",
)
EMBEDDED_GOOGLE_PODS = "replay-google-pods.csv.gz"
EMBEDDED_GOOGLE_USAGE = "replay-google-usage.csv.gz"
EMBEDDED_GOOGLE_NODES = "replay-openb-nodes.csv"


@dataclass
class JobSeries:
    """One job's tasks on the job's own 5-minute clock; NaN = the task is not running in that bin."""

    job: str
    tasks: list[int]
    cpu: np.ndarray  # (tasks, bins) avg cpu usage, normalised
    memory: np.ndarray
    cpu_limit: np.ndarray
    memory_limit: np.ndarray

    @property
    def n_bins(self) -> int:
        return self.cpu.shape[1]

    @property
    def history_end(self) -> int:
        return int(self.n_bins * HISTORY_SHARE)

    def right_sized(self) -> tuple[float, float]:
        """p90 of every task's cpu and memory usage samples in the history third (normalised)."""
        h = self.history_end
        cpu, mem = self.cpu[:, :h], self.memory[:, :h]
        return (float(np.nanquantile(cpu, RIGHT_SIZE_QUANTILE)), float(np.nanquantile(mem, RIGHT_SIZE_QUANTILE)))


# bin = floor((t - t_job0) / 5 min); value = mean of the windows starting in the bin; gaps <= GAP_FILL_BINS carry
# the previous value forward, longer gaps stay NaN (task not running).
def load_jobs(path: Path | None = None) -> dict[str, JobSeries]:
    frame = pd.read_csv(path or DATA_DIR / GOOGLE_FILE)
    cols = ("avg_cpu_usage", "avg_memory_usage", "cpu_limit", "memory_limit")
    jobs: dict[str, JobSeries] = {}
    for job, g in frame.groupby("collection_id"):
        b = ((g.time - g.time.min()) // int(STEP_S * 1e6)).astype(np.int64).to_numpy()
        tasks = sorted(g.instance_index.unique().tolist())
        n_bins = int(b.max()) + 1
        arrays = []
        for c in cols:
            grid = np.full((len(tasks), n_bins), np.nan)
            for t_i, task in enumerate(tasks):
                sel = (g.instance_index == task).to_numpy()
                s = pd.Series(g[c].to_numpy(float)[sel]).groupby(b[sel]).mean()
                row = pd.Series(np.nan, index=np.arange(n_bins))
                row[s.index] = s.to_numpy()
                grid[t_i] = row.ffill(limit=GAP_FILL_BINS).to_numpy()
            arrays.append(grid)
        jobs[str(job)] = JobSeries(str(job), tasks, *arrays)
    return jobs


def openb_lifetimes(hours: float, data_dir: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Creation and deletion times (s) of openb's CPU pods and the busy-period window starts (see trace.py)."""
    pods = pd.read_csv(Path(data_dir or DATA_DIR) / "openb-pods-cpu.csv")
    c = pods.creation_time.to_numpy(float)
    d = pods.deletion_time.to_numpy(float)
    return c, d


def deployment_span(c: np.ndarray, d: np.ndarray, hours: float, rng: np.random.Generator) -> tuple[float, float]:
    """(arrival, departure) in seconds from the replay start: a random openb pod alive in a random window."""
    span = hours * 3600.0
    lo, hi = float(np.quantile(c, 0.02)), float(c.max()) - span
    while True:
        w0 = rng.uniform(lo, max(lo, hi))
        alive = np.flatnonzero((c < w0 + span) & (d > w0))
        if len(alive):
            i = int(rng.choice(alive))
            return max(c[i] - w0, 0.0), d[i] - w0


@dataclass
class PodRows:
    names: list[str]
    owners: list[str]
    cpu: list[float]
    memory: list[float]
    cpu_limit: list[float]
    memory_limit: list[float]
    arrival: list[int]
    departure: list[int]
    usage: list[np.ndarray]  # (n_steps, 2) absolute usage (milli, bytes) over the replay, 0 outside the pod's life


def _deployment_pods(rows: PodRows, job: JobSeries, dep_name: str, offset: int, arr: int, dep: int, n_steps: int,
                     requests: str) -> np.ndarray:
    """Append the pods of one Deployment; returns its requested (cpu milli, memory bytes) per step, (T, 2)."""
    scale = np.array([CPU_UNIT_MILLI, MEMORY_UNIT_BYTES])
    req_t = np.zeros((n_steps, 2))
    sized = np.array(job.right_sized()) * scale if requests == "p90" else None
    bins = offset + np.arange(n_steps)
    for t_i, task in enumerate(job.tasks):
        running = np.isfinite(job.cpu[t_i, bins]) & np.isfinite(job.memory[t_i, bins])
        running[:arr] = False
        running[dep:] = False
        edges = np.flatnonzero(np.diff(np.concatenate([[0], running.astype(np.int8), [0]])))
        for n_run, (a, e) in enumerate(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True)):
            limit = np.array([job.cpu_limit[t_i, bins[a]], job.memory_limit[t_i, bins[a]]]) * scale
            req = sized if sized is not None else limit
            use = np.zeros((n_steps, 2))
            use[a:e, 0] = job.cpu[t_i, bins[a:e]] * scale[0]
            use[a:e, 1] = job.memory[t_i, bins[a:e]] * scale[1]
            rows.names.append(f"{dep_name}-t{task}-{n_run}")
            rows.owners.append(dep_name)
            rows.cpu.append(float(req[0]))
            rows.memory.append(float(req[1]))
            rows.cpu_limit.append(float(limit[0]))
            rows.memory_limit.append(float(limit[1]))
            rows.arrival.append(a)
            rows.departure.append(e)
            rows.usage.append(use)
            req_t[a:e] += req
    return req_t


def google_notes(requests: str, n_deployments: int, achieved: np.ndarray, target_load: float) -> list[str]:
    req_rule = ("requests = each job's p90 of its tasks' usage in the job's first third (right-sized, as a VPA would "
                "leave it); the replay reads only the other two thirds" if requests == "p90" else
                "requests = the task's Borg limit (cpu_limit, memory_limit) at the pod's first replayed bin; the "
                "replay reads the last two thirds of each job (the first third is history)")
    return [
        "units: 1.0 normalised cpu = 128 cores, 1.0 normalised memory = 1 TiB (the largest openb node shape)",
        "clock: each job on its own 5-minute clock (bin 0 = its first window); replicas of a Deployment read the "
        "same bin, so their correlation is real; jobs from different periods are never aligned with each other",
        "gaps: up to 2 bins carried forward; longer: the task was not running (pod leaves, a new pod on restart)",
        "usage = the 5-minute avg cpu / memory of the task (bursts inside a window are not replayed)",
        req_rule,
        f"synthetic: {n_deployments} Deployments, each a job at a seeded random offset of its replay part (the same "
        f"task series reused at several offsets), added until the mean requested load reached {target_load:.0%} of "
        f"the pool (achieved cpu {achieved[0]:.0%}, memory {achieved[1]:.0%})",
        "synthetic: each Deployment's arrival/departure = a real openb pod's lifetime in a random window of openb's "
        "busy period",
        GOOGLE_LABEL,
    ]


def build_google_scenario(n_nodes: int = 100, hours: float = 24.0, seed: int = 0, target_load: float = 0.6,
                          requests: str = "limit", data_dir: Path | None = None, nodes: pd.DataFrame | None = None) -> Scenario:
    """The scenario of the module docstring; ``nodes`` (sn, cpu_milli, memory_mib) replaces the node draw."""
    if requests not in ("limit", "p90"):
        raise ValueError(f"requests must be 'limit' or 'p90', not {requests!r}")
    data = Path(data_dir) if data_dir else DATA_DIR
    jobs = load_jobs(data / GOOGLE_FILE)
    rng = np.random.default_rng(seed)
    if nodes is None:
        all_nodes = pd.read_csv(data / "openb-nodes.csv")
        if n_nodes > len(all_nodes):
            raise ValueError(f"--nodes {n_nodes}: the openb trace has {len(all_nodes)} nodes")
        nodes = all_nodes.iloc[np.sort(rng.choice(len(all_nodes), n_nodes, replace=False))].reset_index(drop=True)
        where = f"{n_nodes} of the {len(all_nodes)} openb node shapes drawn with seed {seed}"
    else:
        n_nodes, where = len(nodes), f"the {len(nodes)} given openb node shapes"
    capacity = np.array([nodes.cpu_milli.sum(), nodes.memory_mib.sum() * MIB], dtype=float)
    n_steps = int(round(hours * 3600 / STEP_S))
    for j in jobs.values():
        if j.n_bins - j.history_end < n_steps:
            raise ValueError(f"job {j.job}: {j.n_bins - j.history_end} replay bins < {n_steps} steps; use fewer --hours")
    c, d = openb_lifetimes(hours, data)
    rows = PodRows([], [], [], [], [], [], [], [], [])
    req = np.zeros((n_steps, 2))
    names = sorted(jobs)
    n_dep = 0
    while (req.mean(axis=0) / capacity).max() < target_load:
        job = jobs[names[int(rng.integers(len(names)))]]
        offset = int(rng.integers(job.history_end, job.n_bins - n_steps + 1))
        a_s, d_s = deployment_span(c, d, hours, rng)
        arr = int(np.ceil(a_s / STEP_S - 1e-9))
        dep = min(n_steps, max(arr + 1, int(np.ceil(d_s / STEP_S - 1e-9))))
        if arr >= n_steps:
            continue
        req += _deployment_pods(rows, job, f"g{job.job[-4:]}-d{n_dep:04d}", offset, arr, dep, n_steps, requests)
        n_dep += 1
    notes = [f"nodes: {where} (the autoscaler's pool, in this order)",
             *google_notes(requests, n_dep, req.mean(axis=0) / capacity, target_load)]
    kind = "rightsized" if requests == "p90" else "limits"
    return _scenario(f"google-{kind}-{n_nodes}n-{hours:g}h-s{seed}", nodes, rows, n_steps, notes)


def _scenario(name: str, nodes: pd.DataFrame, rows: PodRows, n_steps: int, notes: list[str]) -> Scenario:
    order = np.argsort(np.array(rows.arrival), kind="stable")
    cpu = np.array(rows.cpu)[order]
    mem = np.array(rows.memory)[order]
    usage = np.stack([rows.usage[i] for i in order.tolist()]) if len(order) else np.zeros((0, n_steps, 2))
    ratio = (usage / np.stack([cpu, mem], axis=1)[:, None, :]).astype(np.float32)
    # departure beyond the replay is the replay's end + 1 (outlives it), as in trace._to_steps
    departure = np.array(rows.departure)[order]
    departure = np.where(departure >= n_steps, n_steps + 1, departure)
    return Scenario(
        name=name, step_s=STEP_S, n_steps=n_steps, node_names=nodes.sn.tolist(),
        node_cpu=nodes.cpu_milli.to_numpy(float), node_memory=nodes.memory_mib.to_numpy(float) * MIB,
        pod_names=[rows.names[i] for i in order.tolist()], pod_cpu=cpu, pod_memory=mem,
        pod_arrival=np.array(rows.arrival, dtype=np.int64)[order], pod_departure=departure.astype(np.int64),
        pod_usage=ratio, pod_qos=["Burstable"] * len(order), pod_profile=[rows.owners[i] for i in order.tolist()],
        sources=GOOGLE_SOURCES, notes=notes, pod_cpu_limit=np.array(rows.cpu_limit)[order],
        pod_memory_limit=np.array(rows.memory_limit)[order], pod_owner=[rows.owners[i] for i in order.tolist()],
        usage_label=GOOGLE_LABEL)


# ---- the embedded excerpt (kso demo) ----------------------------------------------------------------------------
# The rule, fixed before any result was seen: the first EMBEDDED_HOURS hours of seed 0 of the right-sized
# scenario on the 40 node shapes of kso/data/replay-openb-nodes.csv, target load 0.6.
EMBEDDED_HOURS = 4.0
EMBEDDED_HEADER = ("# kso embedded excerpt of the Google 2019 real-join replay (benchmarks/sim/google.py): the first {hours:g} h "
                   "of seed 0, right-sized requests, on kso/data/replay-openb-nodes.csv; Google cluster-data 2019 "
                   "(CC-BY 4.0, Tirmazi et al., EuroSys 2020) usage in absolute units after the stated unit rule.\n")


def write_embedded_google_excerpt(dest_dir: Path | None = None) -> tuple[Path, Path]:
    """Write kso/data/replay-google-pods.csv.gz and replay-google-usage.csv.gz (usage per pod and step,
    millicores and MiB, space-separated) by the rule above."""
    dest = Path(dest_dir) if dest_dir else Path(__file__).resolve().parents[2] / "kso" / "data"
    nodes = pd.read_csv(dest / EMBEDDED_GOOGLE_NODES, comment="#")
    s = build_google_scenario(hours=EMBEDDED_HOURS, seed=0, target_load=0.6, requests="p90", nodes=nodes)
    pods = pd.DataFrame({"name": s.pod_names, "owner": s.pod_owner, "cpu_milli": np.round(s.pod_cpu).astype(int),
                         "memory_mib": np.round(s.pod_memory / MIB).astype(int),
                         "cpu_limit_milli": np.round(s.pod_cpu_limit).astype(int),
                         "memory_limit_mib": np.round(s.pod_memory_limit / MIB).astype(int),
                         "arrival_step": s.pod_arrival, "departure_step": s.pod_departure})
    absolute = s.pod_usage * np.stack([s.pod_cpu, s.pod_memory / MIB], axis=1)[:, None, :]
    usage = pd.DataFrame({"name": s.pod_names,
                          "cpu_milli": [" ".join(map(str, np.round(u).astype(int))) for u in absolute[:, :, 0]],
                          "memory_mib": [" ".join(map(str, np.round(u).astype(int))) for u in absolute[:, :, 1]]})
    paths = (dest / EMBEDDED_GOOGLE_PODS, dest / EMBEDDED_GOOGLE_USAGE)
    header = EMBEDDED_HEADER.format(hours=EMBEDDED_HOURS)
    notes = "".join(f"# {n}\n" for n in s.notes)
    for path, frame in zip(paths, (pods, usage), strict=True):
        with gzip.open(path, "wt") as f:
            f.write(header + notes)
            frame.to_csv(f, index=False)
    return paths


def build_embedded_google_scenario(hours: float | None = None) -> Scenario:
    """The excerpt shipped in kso/data (no ../shared needed); ``hours`` cuts it shorter."""
    pkg = resources.files("kso.data")
    nodes = pd.read_csv(io.StringIO(pkg.joinpath(EMBEDDED_GOOGLE_NODES).read_text()), comment="#")
    texts = [gzip.decompress(pkg.joinpath(name).read_bytes()).decode() for name in (EMBEDDED_GOOGLE_PODS, EMBEDDED_GOOGLE_USAGE)]
    notes = [ln[2:] for ln in texts[0].splitlines() if ln.startswith("# ")][1:]
    pods = pd.read_csv(io.StringIO(texts[0]), comment="#")
    usage = pd.read_csv(io.StringIO(texts[1]), comment="#")
    full = int(round(EMBEDDED_HOURS * 3600 / STEP_S))
    n_steps = min(full, int(round((hours or EMBEDDED_HOURS) * 3600 / STEP_S)))
    keep = (pods.arrival_step < n_steps).to_numpy()
    cpu_use = np.array([np.array(v.split(), dtype=float) for v in usage.cpu_milli])[keep, :n_steps]
    mem_use = np.array([np.array(v.split(), dtype=float) for v in usage.memory_mib])[keep, :n_steps] * MIB
    pods = pods[keep].reset_index(drop=True)
    cpu, mem = pods.cpu_milli.to_numpy(float), pods.memory_mib.to_numpy(float) * MIB
    ratio = np.stack([cpu_use / cpu[:, None], mem_use / mem[:, None]], axis=2).astype(np.float32)
    departure = pods.departure_step.to_numpy(np.int64)
    departure = np.where(departure >= n_steps, n_steps + 1, departure)
    return Scenario(
        name=f"google-embedded-{len(nodes)}n-{n_steps * STEP_S / 3600:g}h-s0", step_s=STEP_S, n_steps=n_steps,
        node_names=nodes.sn.tolist(), node_cpu=nodes.cpu_milli.to_numpy(float),
        node_memory=nodes.memory_mib.to_numpy(float) * MIB, pod_names=pods.name.tolist(), pod_cpu=cpu, pod_memory=mem,
        pod_arrival=pods.arrival_step.to_numpy(np.int64), pod_departure=departure, pod_usage=ratio,
        pod_qos=["Burstable"] * len(pods), pod_profile=pods.owner.tolist(), sources=GOOGLE_SOURCES,
        notes=[f"embedded excerpt kso/data/{EMBEDDED_GOOGLE_PODS}, {EMBEDDED_GOOGLE_USAGE}: the first "
               f"{EMBEDDED_HOURS:g} h of seed 0 of the right-sized scenario (rule fixed before any result)", *notes],
        pod_cpu_limit=pods.cpu_limit_milli.to_numpy(float), pod_memory_limit=pods.memory_limit_mib.to_numpy(float) * MIB,
        pod_owner=pods.owner.tolist(), usage_label=GOOGLE_LABEL)
