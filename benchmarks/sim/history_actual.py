"""What the cluster actually ran, as its own Prometheus history shows it (``kso bench --prometheus``): a row beside
every policy's replay, on the same step grid and bound as the replay's metrics.

- node-hours: the nodes reporting ``kube_node_status_allocatable`` (cpu) at each step's end, times the step;
- overloaded node-hours: node-steps whose measured cpu (the rate of ``container_cpu_usage_seconds_total``) or memory
  (``container_memory_working_set_bytes``), summed over the node's pods, exceeds U* of its allocatable; a pod's node
  is ``kube_pod_info``'s ``node`` label (kube-prometheus' own join: topk 1 per pod);
- OOM kills: per step, the rise of ``kube_pod_container_status_restarts_total`` of containers whose
  ``kube_pod_container_status_last_terminated_reason`` is ``OOMKilled``; pods OOM-killed: the pods with one or more.
  A container killed and not restarted (a Job's, ``restartPolicy: Never``) adds no restart: not counted.

The replay's other harms (pods never served, start latency, pending time) have no measured counterpart here: n/a.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.sim.bench_report import ACTUAL
from benchmarks.sim.metrics import DEFAULT_U_STAR
from benchmarks.sim.prometheus_history import MAX_SERIES_POINTS, _Client, _sel
from forecasting.history_names import HistoryNames
from kso.core.settings import load_settings

# Each step is read this long after its end: Prometheus 2's lookback and range windows are closed, so a sample
# exactly one lookback (5 min) old, the last one of a pod gone at the step boundary, would still count at the end.
READ_AFTER_S = 1.0


@dataclass(frozen=True)
class ActualRun:
    node_hours: float
    overloaded_node_hours: float
    oom_kills: float
    pods_oom_killed: float
    from_step: int  # the first step read (the replay's warm-up is not scored)

    def row(self, scenario: str, nodes: int, hours: float, warmup_steps: int) -> dict[str, object]:
        """A cells.jsonl row (the replay's metric names) for the report's tables."""
        return {"scenario": scenario, "nodes": nodes, "hours": hours, "seed": 0, "policy": ACTUAL,
                "mode": "measured: the cluster's own history (benchmarks/sim/history_actual.py)",
                "provisioned_node_hours": self.node_hours, "overloaded_node_hours": self.overloaded_node_hours,
                "oom_kills": self.oom_kills, "pods_oom_killed": self.pods_oom_killed, "warmup_steps": warmup_steps}


def _queries(n: HistoryNames, u_star: float) -> dict[str, str]:
    by = f"{n.namespace_label},{n.pod_label}"
    per = f"{by},{n.container_label}"
    with_node = _sel(n, n.pod_info, n.node_label + '!=""')
    node_of = f"topk by ({by}) (1, max by ({by},{n.node_label}) ({with_node}))"

    def alloc(res: str) -> str:
        return f"max by ({n.node_label}) ({_sel(n, n.node_allocatable, n.resource_label + '=' + repr(res))})"

    join = f"* on ({by}) group_left({n.node_label}) {node_of}"
    rate = f"{n.cpu_rate.lower()}({n.container_cpu}{{{n.container_selector}}}[{n.cpu_window}])"
    cpu = f"sum by ({n.node_label}) (max by ({per}) ({rate}) {join})"
    mem = f"sum by ({n.node_label}) (max by ({per}) ({n.container_memory}{{{n.container_selector}}}) {join})"
    oom = f"max by ({per}) ({_sel(n, n.last_terminated_reason, 'reason=' + repr('OOMKilled'))}) == 1"
    restarts = f"max by ({per}) ({_sel(n, n.container_restarts)})"
    restarts_before = f"max by ({per}) ({_sel(n, n.container_restarts)} offset STEPs)"
    return {
        "nodes": f"count({alloc('cpu')})",
        "overloaded": f"count(({cpu} / {alloc('cpu')} > {u_star:g}) or ({mem} / {alloc('memory')} > {u_star:g}))",
        # the restarts' rise over one step (exact, not increase()'s extrapolation), of OOM-killed containers
        "oom": f"sum by ({by}) (({restarts} - {restarts_before}) > 0 and on ({per}) ({oom}))",
    }


def measure_actual(url: str, start: float, step: float, n_steps: int, from_step: int = 0,
                   u_star: float = DEFAULT_U_STAR, names: HistoryNames | None = None) -> ActualRun:
    """The history's own node-hours, overload and OOM kills over steps from_step..n_steps-1 (step k read at its end,
    start + (k + 1) step, as the replay's usage, plus ``READ_AFTER_S``)."""
    n = names or load_settings(HistoryNames)
    client = _Client(url, n)
    q = _queries(n, u_star)
    totals = {"nodes": 0.0, "overloaded": 0.0, "oom": 0.0}
    killed: set[tuple[str, str]] = set()
    chunk = MAX_SERIES_POINTS - 1
    for k0 in range(from_step, n_steps, chunk):
        k1 = min(n_steps, k0 + chunk)
        t0, t1 = start + (k0 + 1) * step + READ_AFTER_S, start + k1 * step + READ_AFTER_S
        for key, query in q.items():
            for item in client.range(query.replace("STEPs", f"{step:g}s"), t0, t1, step):
                values = [float(v) for _, v in item.get("values") or ()]
                totals[key] += sum(values)
                if key == "oom" and sum(values) > 0:
                    m = item.get("metric") or {}
                    killed.add((m.get(n.namespace_label, ""), m.get(n.pod_label, "")))
    hours = step / 3600.0
    return ActualRun(totals["nodes"] * hours, totals["overloaded"] * hours, totals["oom"], float(len(killed)), from_step)
