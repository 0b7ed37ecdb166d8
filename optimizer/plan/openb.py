"""Placement problems from the real openb trace (Alibaba cluster-trace-gpu-v2023: node shapes and pod
requests), with pod usage from the Bitbrains trace: a SYNTHETIC JOIN, labelled as such everywhere.

Each workload class (pods of one request shape) is joined, seeded, to a Bitbrains VM; its usage is the
request times the VM's utilisation (usage / provisioned): mean and std over the VM's month.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pandas as pd

from forecasting.trace_dir import require, trace_dir
from forecasting.traces import TraceSource
from kso.core.objects import NodeInfo, PodInfo
from kso.core.resources import CPU, MEMORY, MIB, PODS
from optimizer.plan.problem import NodeLoad, PlacementProblem, PlanNode, UsageModel, WorkloadClass, class_key

USAGE_LABEL = "usage: synthetic join (openb requests x Bitbrains VM utilisation)"
SOURCES = ("openb: Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC 2023); "
           "Bitbrains Rnd 2013-08 (GWA-T-12; Shen et al., CCGrid 2015)")
MAX_PODS_PER_NODE = 110.0


def read_openb(data_dir: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The openb trace's node shapes (openb-nodes.csv: sn, cpu_milli, memory_mib, gpu, model) and CPU-only pods
    (openb-pods-cpu.csv: name, cpu_milli, memory_mib, qos, creation/deletion/scheduled times, ...) from
    ``data_dir`` (default KSO_TRACE_DIR): the one reader of these files (the solver benchmark's problems, the
    replay's scenarios). Empty cells are NaN."""
    d = Path(data_dir) if data_dir else trace_dir()
    return pd.read_csv(require(d / "openb-nodes.csv")), pd.read_csv(require(d / "openb-pods-cpu.csv"))


def vm_utilisation(n_vms: int = 60, trace: str = "bitbrains") -> list[tuple[float, float, float, float]]:
    """(cpu mean, cpu std, memory mean, memory std) of utilisation for the first ``n_vms`` VMs."""
    out = []
    for series in TraceSource(trace, n_series=n_vms).node_series().values():
        stats = []
        for r in ("cpu", "memory"):
            y = series[r].y
            y = y[np.isfinite(y)]
            stats += [float(np.clip(y.mean(), 0, 2)), float(np.clip(y.std(), 0, 2))] if len(y) else [0.0, 0.0]
        out.append(tuple(stats))
    return out  # type: ignore[return-value]


def openb_problem(n_nodes: int, n_pods: int, seed: int = 0, u_star: float = 0.9, eps: float = 0.3,
                  data_dir: Path | None = None, vms: list[tuple[float, float, float, float]] | None = None
                  ) -> PlacementProblem:
    """``n_nodes`` openb nodes (cpu and memory; GPUs ignored, the pods are the CPU-only variant) and
    ``n_pods`` pods sampled from openb-pods-cpu, all pending, on empty nodes."""
    rng = random.Random(seed)
    node_frame, pod_frame = read_openb(data_dir)
    node_rows, pod_rows = node_frame.to_dict("records"), pod_frame.to_dict("records")
    node_rows = rng.sample(node_rows, min(n_nodes, len(node_rows)))
    pod_rows = rng.sample(pod_rows, min(n_pods, len(pod_rows)))
    vms = vms if vms is not None else vm_utilisation()
    nodes = []
    for r in node_rows:
        alloc = {CPU: float(r["cpu_milli"]), MEMORY: float(r["memory_mib"]) * MIB, PODS: MAX_PODS_PER_NODE}
        model = r["model"] if isinstance(r["model"], str) and r["model"] else "cpu"  # empty cell: NaN
        info = NodeInfo(r["sn"], alloc, {"openb/model": model}, {}, [], {}, ())
        nodes.append(PlanNode(r["sn"], alloc, {}, {CPU: NodeLoad(0.0, 0.0), MEMORY: NodeLoad(0.0, 0.0)}, info=info))
    pods = []
    for r in pod_rows:
        req = {CPU: float(r["cpu_milli"]), MEMORY: float(r["memory_mib"]) * MIB, PODS: 1.0}
        pods.append(PodInfo(r["name"], "openb", r["name"], "", req, req[CPU], req[MEMORY], (), ()))
    classes: dict[str, WorkloadClass] = {}
    for pod in pods:
        key = class_key(pod)
        wc = classes.get(key)
        if wc is None:
            cm, cs, mm, ms = vms[(hash_key(key) + seed) % len(vms)]
            usage = UsageModel({CPU: pod.requests[CPU] * cm, MEMORY: pod.requests[MEMORY] * mm},
                               {CPU: pod.requests[CPU] * cs, MEMORY: pod.requests[MEMORY] * ms}, "history")
            wc = classes[key] = WorkloadClass(key, dict(pod.requests), 0, usage, pod)
        wc.count += 1
        wc.members.append(pod.uid)
    return PlacementProblem(nodes, list(classes.values()), u_star, eps, {"forecast": 0.0})


def hash_key(key: str) -> int:
    """A stable hash (Python's str hash is salted per process)."""
    h = 0
    for ch in key.encode():
        h = (h * 131 + ch) % 2**31
    return h


def requested_share(problem: PlacementProblem) -> float:
    cap = sum(n.allocatable.get(CPU, 0.0) for n in problem.nodes)
    dem = sum(c.requests.get(CPU, 0.0) * c.count for c in problem.classes)
    return dem / cap if cap else math.nan
