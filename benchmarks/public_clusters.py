"""Clusters built from public cluster traces, as Kubernetes objects (a ``kubectl get nodes,pods -o json`` List):
the solver's tuning set, so that its knobs are not chosen on the clusters it is reported on
(benchmarks.clusters, the held-out set, which this module does not share shapes or code paths with).

What one holds (seeded; every count scales with the node and pod numbers asked for):
  * nodes: rows of the openb trace's ``openb-nodes.csv`` (Alibaba cluster-trace-gpu-v2023: real Kubernetes
    nodes, cpu_milli, memory_mib, GPUs and model) drawn with replacement, allocatable as the trace states it
    less a system reserve (100m, 512Mi), 110 pods, ``nvidia.com/gpu`` where the node has GPUs (not tainted: in
    openb, CPU pods run on GPU nodes), spread over 3 zones; one node cordoned;
  * load: about half of the nodes run bound pods (openb CPU pods, within 60% of the node's cpu and memory)
    and carry kube-safe-scheduler's cpu load annotations from the Alibaba 2018 ``machine_usage`` trace (real
    co-located machines): cpu utilisation mean and std over a random hour of a random machine. Their memory
    load is the bound pods' requests: the trace's memory utilisation (median 91%, page cache and co-located
    batch included) would leave every busy node without memory room, which no Kubernetes node reports;
  * pending pods, grouped into ReplicaSets of one request shape (sizes split at random):
      - ``openb_share``: openb CPU-only pods' requests (``openb-pods-cpu.csv``);
      - ``gpu_share``: openb GPU pods (``openb-pods.csv``, num_gpu >= 1, a shared GPU counted whole);
      - the rest: Google cluster-data 2019 tasks' requests (``google2019-tasks.csv.gz``, cpu_limit and
        memory_limit), whose units are normalised to the largest machine: scaled here to the largest openb
        node (a SYNTHETIC mapping: the trace has no machine capacities);
      - ``zone_share`` of the workloads have a zone nodeSelector (Kubernetes structure, not trace data).
Requests and capacities are the traces'; how pods group into owners, zones and the node/load join are ours.
Sources are printed by the solver benchmark (SOURCES). Nothing here reads kso or optimizer code.
"""

from __future__ import annotations

import functools
import gzip
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.clusters import GPU, ZONE, ZONES, _pod, _split

SOURCES = ("nodes and pods: openb, Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC 2023); tasks: Google "
           "cluster-data 2019 cell a (Tirmazi et al., EuroSys 2020; CC-BY 4.0), normalised requests scaled to the "
           "largest openb node (synthetic mapping); node load: Alibaba cluster-trace-v2018 machine_usage")
RESERVE_CPU_MILLI = 100
RESERVE_MEMORY_MIB = 512
MAX_PODS = 110
BOUND_SHARE = 0.6  # bound pods fill a busy node up to this share of its cpu and memory


@dataclass(frozen=True)
class TraceShapes:
    """What the generator draws from: node rows (cpu milli, memory MiB, gpus, model), CPU pod and GPU pod
    requests (cpu milli, memory MiB, gpus), Google task requests in millicores / MiB (already scaled) and
    per-machine hourly cpu utilisation windows (mean, std; percent)."""

    nodes: list[tuple[int, int, int, str]]
    cpu_pods: list[tuple[int, int, int]]
    gpu_pods: list[tuple[int, int, int]]
    google: list[tuple[int, int, int]]
    usage: list[tuple[float, float]]


def data_dir() -> Path:
    """KSO_TRACE_DIR, else the shared data directory (the same default as forecasting.trace_dir, read here
    without importing kso code)."""
    import os

    return Path(os.environ.get("KSO_TRACE_DIR") or "/work/shared/data")


@functools.cache
def trace_shapes(directory: str | None = None) -> TraceShapes:
    d = Path(directory) if directory else data_dir()
    node_frame = pd.read_csv(d / "openb-nodes.csv")
    nodes = [(int(r.cpu_milli), int(r.memory_mib), int(r.gpu), r.model if isinstance(r.model, str) else "cpu")
             for r in node_frame.itertuples()]
    cpu_frame = pd.read_csv(d / "openb-pods-cpu.csv")
    cpu_pods = [(int(r.cpu_milli), int(r.memory_mib), 0) for r in cpu_frame.itertuples()]
    gpu_frame = pd.read_csv(d / "openb-pods.csv")
    gpu_pods = [(int(r.cpu_milli), int(r.memory_mib), max(int(r.num_gpu), 1)) for r in gpu_frame.itertuples()
                if r.num_gpu >= 1]
    largest_cpu = max(n[0] for n in nodes)
    largest_mem = max(n[1] for n in nodes)
    with gzip.open(d / "google2019-tasks.csv.gz") as fh:
        tasks = pd.read_csv(fh, usecols=["cpu_limit", "memory_limit"]).dropna()
    google = [(max(int(round(c * largest_cpu)), 10), max(int(round(m * largest_mem)), 16), 0)
              for c, m in tasks.itertuples(index=False) if c > 0 and m > 0]
    machines = pd.read_csv(d / "alibaba2018-machine-usage.csv.gz", usecols=["machine_id", "time_stamp",
                                                                             "cpu_util_percent"])
    machines["hour"] = machines["time_stamp"] // 3600
    hourly = machines.groupby(["machine_id", "hour"]).agg(cm=("cpu_util_percent", "mean"), cs=("cpu_util_percent", "std"),
                                                          n=("cpu_util_percent", "size"))
    hourly = hourly[hourly["n"] >= 6].fillna(0.0)
    usage = [(float(r.cm), float(r.cs)) for r in hourly.itertuples()]
    return TraceShapes(nodes, cpu_pods, gpu_pods, google, usage)


def _node(name: str, row: tuple[int, int, int, str], zone: str) -> dict[str, Any]:
    cpu, mem, gpus, model = row
    alloc = {"cpu": f"{cpu - RESERVE_CPU_MILLI}m", "memory": f"{mem - RESERVE_MEMORY_MIB}Mi", "pods": str(MAX_PODS)}
    if gpus:
        alloc[GPU] = str(gpus)
    labels = {"kubernetes.io/hostname": name, ZONE: zone, "openb/model": model}
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels, "annotations": {}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": dict(alloc),
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def generate(n_nodes: int, n_pods: int, seed: int = 0, *, openb_share: float = 0.45, gpu_share: float = 0.05,
             zone_share: float = 0.1, busy_share: float = 0.5, directory: str | None = None) -> dict[str, Any]:
    """A cluster of ``n_nodes`` trace nodes and ``n_pods`` pending trace pods (plus bound ones), as a v1 List."""
    shapes = trace_shapes(directory)
    rng = random.Random(seed)
    nodes = [_node(f"pub-{i:04d}", rng.choice(shapes.nodes), ZONES[i % len(ZONES)]) for i in range(n_nodes)]
    if n_nodes >= 3:
        nodes[1]["spec"]["unschedulable"] = True
    pods: list[dict[str, Any]] = []
    for k, node in enumerate(nodes):
        if node["spec"].get("unschedulable") or rng.random() >= busy_share:
            continue
        name = node["metadata"]["name"]
        cap_cpu = int(node["status"]["allocatable"]["cpu"][:-1])
        cap_mem = int(node["status"]["allocatable"]["memory"][:-2])
        used_cpu = used_mem = 0
        for j in range(rng.randint(1, 4)):
            cpu, mem, _ = rng.choice(shapes.cpu_pods)
            if used_cpu + cpu > cap_cpu * BOUND_SHARE or used_mem + mem > cap_mem * BOUND_SHARE:
                break
            pods.append(_pod("prod", f"{name}-svc-{j}", ("ReplicaSet", f"svc-{k % 11}"), cpu, mem, node=name))
            used_cpu, used_mem = used_cpu + cpu, used_mem + mem
        mean, std = rng.choice(shapes.usage)
        node["metadata"]["annotations"].update({"mean-free-cpu": f"{cap_cpu * (1 - mean / 100):.0f}",
                                                "std-free-cpu": f"{cap_cpu * std / 100:.0f}"})
    n_gpu = int(n_pods * gpu_share)
    n_openb = int(n_pods * openb_share)
    n_google = max(n_pods - n_gpu - n_openb, 0)
    drawn = ([rng.choice(shapes.cpu_pods) for _ in range(n_openb)] + [rng.choice(shapes.gpu_pods) for _ in range(n_gpu)]
             + [rng.choice(shapes.google) for _ in range(n_google)])
    by_shape: dict[tuple[int, int, int], int] = {}
    for shape in drawn:
        by_shape[shape] = by_shape.get(shape, 0) + 1
    w = 0
    for (cpu, mem, gpus), count in sorted(by_shape.items()):
        parts = max(1, min(count, count // 25 + rng.randint(0, 2)))
        for size in _split(count, parts, rng):
            extra: dict[str, Any] = {}
            if rng.random() < zone_share:
                extra["nodeSelector"] = {ZONE: rng.choice(ZONES)}
            for j in range(size):
                pods.append(_pod(f"team-{w % 5}", f"work-{w}-{j}", ("ReplicaSet", f"work-{w}"), cpu, mem or None,
                                 spec_extra=extra, gpus=gpus))
            w += 1
    return {"apiVersion": "v1", "kind": "List", "items": nodes + pods}
