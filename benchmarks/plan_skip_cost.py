"""What the extender's plan job costs while no node has load statistics: ``PlanSolver.solve`` on 5,000 nodes (e2e's
shapes, no load annotations, no forecasts) x 150,000 bound pods and 50 pending pods, wall ms per call (7 calls).

    PYTHONPATH=TREE python -m benchmarks.plan_skip_cost     # run it in each tree for a before/after

Before issue 40's change the whole problem was built under the state's lock and then dropped; after it, a copy is
taken and the statistics checked, and nothing is built.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from benchmarks.e2e import bench_nodes
from benchmarks.latency.inprocess import POD, pods
from benchmarks.machine import machine_line
from extender.plan_cache import PlanCache, PlanSolver
from kso.core.cluster import ClusterState
from kso.core.objects import node_from_k8s, pod_from_k8s
from kso.core.settings import load_settings
from optimizer.settings import PlanSettings


def main() -> int:
    state = ClusterState()
    manifests = bench_nodes(5000)
    for m in manifests:
        state.upsert_node(node_from_k8s(m))
    names = [m["metadata"]["name"] for m in manifests]
    template = pod_from_k8s(POD)
    for j in range(150_000):
        state.upsert_pod(replace(template, uid=f"bound-{j}", name=f"b-{j}", node_name=names[j % len(names)]))
    for p in pods(50):
        state.upsert_pod(pod_from_k8s(p))
    outcomes: list[str] = []
    solver = PlanSolver(PlanCache(load_settings(PlanSettings, {}), state), usage=lambda s: {},
                        on_solved=lambda result, seconds: outcomes.append(result))
    took = []
    try:
        for _ in range(7):
            t0 = time.perf_counter()
            solver.solve()
            took.append(time.perf_counter() - t0)
    finally:
        solver.close()
    print(f"PlanSolver.solve without statistics, 5000 nodes x 150k pods: median {1e3 * statistics.median(took):.1f} ms, "
          f"least {1e3 * min(took):.1f} ms; outcomes {sorted(set(outcomes))}\nmachine: {machine_line()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
