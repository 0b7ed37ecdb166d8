"""A fluid lower bound on provisioned node-hours for a replay with no overload episode (no scheduler, no
autoscaler: what any policy that runs every pod would have to pay).

Per step k, the pods that exist (arrival <= k < departure, every one running: none pending, none killed)
demand D_k = sum(usage ratio x request) and request R_k = sum(request), per resource. No node may exceed
U* of its allocatable on demand (else an overload episode) nor 100% on requests (the engine rejects it),
so the nodes up at step k must have, per resource r,

    sum_i U* x alloc_i,r >= D_k,r   and   sum_i alloc_i,r >= R_k,r.

``best``: the fewest nodes of the pool for which that can hold = per resource and inequality, the smallest m
such that the m largest nodes (by that resource) cover it; the step's bound is the max over the four
counts (any set of m nodes has at most the m largest's capacity, so this is a lower bound for any
choice of nodes). ``prefix``: the smallest m such that the pool's first m nodes (the order the
autoscaler model opens them) cover all four at once (a tighter, pool-order figure, not a bound for
schedulers that keep other nodes). Pods are fluid (no bin-packing loss), nodes are ready at once
(no provisioning lag): a real schedule needs at least this. When the whole pool cannot cover a step,
the step counts the whole pool and ``short_steps`` counts it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np

from benchmarks.sim.trace import Scenario


@dataclass(frozen=True)
class FluidBound:
    best_node_hours: float  # fewest nodes per step, largest nodes first
    prefix_node_hours: float  # fewest nodes per step, in pool order
    short_steps: int  # steps where even the whole pool cannot cover demand at U*
    binding: dict[str, int]  # steps where each constraint set the best-case count

    def line(self) -> str:
        return (f"best {self.best_node_hours:.1f} node-h, pool order {self.prefix_node_hours:.1f} node-h, steps the pool "
                f"cannot cover {self.short_steps}, binding {self.binding}")


def step_totals(scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """(T, 2) demand and (T, 2) requests of the pods that exist at each step (cpu milli, memory bytes)."""
    T = scenario.n_steps
    steps = np.arange(T)
    alive = (scenario.pod_arrival[:, None] <= steps[None, :]) & (steps[None, :] < scenario.pod_departure[:, None])  # (P, T)
    req = np.stack([scenario.pod_cpu, scenario.pod_memory], axis=1)  # (P, 2)
    demand = np.zeros((T, 2))
    for r in range(2):  # per resource: a (P, T) float32 slice at a time (500 nodes: ~100k pods x 288 steps)
        ratio = np.where(alive, np.nan_to_num(scenario.pod_usage[:, :, r], nan=0.0), 0.0)
        demand[:, r] = ratio.T.astype(float) @ req[:, r]
    requested = alive.T.astype(float) @ req
    return demand, requested


# m(need) = the smallest m with sum of the m largest capacities >= need (cumulative sums, searchsorted).
def _fewest(cap_sorted_cum: np.ndarray, need: np.ndarray) -> np.ndarray:
    return np.searchsorted(cap_sorted_cum, need - 1e-6, side="left") + 1


def fluid_bound(scenario: Scenario, u_star: float = 0.9, hot_nodes: int = 0, from_step: int = 0) -> FluidBound:
    """``hot_nodes`` = E > 0 relaxes "no episode" to "at most E nodes above U* at any step" (E nodes over U*
    at one step are E distinct episodes, so a run with at most E episodes has at most E at every step),
    none above 100% (no OOM kill): the E largest of the m nodes count at 100%, the rest at U*.
    ``from_step``: count steps from_step..T-1 only (a report that scores after a warm-up)."""
    if not 0 <= from_step <= scenario.n_steps:
        raise ValueError(f"from_step {from_step} outside 0..{scenario.n_steps}")
    demand, requested = step_totals(scenario)
    demand, requested = demand[from_step:], requested[from_step:]
    alloc = np.stack([scenario.node_cpu, scenario.node_memory], axis=1).astype(float)  # (N, 2)
    N = len(alloc)
    counts = {}
    for r, res in enumerate(("cpu", "memory")):
        by_size = np.sort(alloc[:, r])[::-1]
        cum = np.cumsum(by_size)
        hot = np.arange(N) < hot_nodes
        counts[f"{res} demand"] = _fewest(np.cumsum(np.where(hot, 1.0, u_star) * by_size), demand[:, r])
        counts[f"{res} requests"] = _fewest(cum, requested[:, r])
    stacked = np.stack(list(counts.values()))  # (4, T)
    best = np.minimum(stacked.max(axis=0), N)
    short = int((stacked.max(axis=0) > N).sum())
    binding = {k: int((v == stacked.max(axis=0)).sum()) for k, v in counts.items()}
    # pool order: first m nodes cover demand at U* and requests for both resources
    prefix_cum = np.cumsum(alloc, axis=0)  # (N, 2)
    ok = ((u_star * prefix_cum[None, :, :] >= demand[:, None, :] - 1e-6)
          & (prefix_cum[None, :, :] >= requested[:, None, :] - 1e-6)).all(axis=2)  # (T, N)
    prefix = np.where(ok.any(axis=1), ok.argmax(axis=1) + 1, N)
    hours = scenario.step_s / 3600.0
    return FluidBound(float(best.sum() * hours), float(prefix.sum() * hours), short, binding)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.sim.runner import scenario_for

    p = argparse.ArgumentParser(prog="python -m benchmarks.sim.bound", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="google-rightsized")
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--seeds", default="0-4", help="FROM-TO inclusive")
    p.add_argument("--u-star", type=float, default=0.9)
    p.add_argument("--target-load", type=float, default=0.6)
    p.add_argument("--hot-nodes", type=int, default=0, help="nodes allowed above U* (up to 100%%) at any step")
    args = p.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    for seed in range(int(lo), int(hi or lo) + 1):
        s = scenario_for(args.scenario, args.nodes, args.hours, seed, args.target_load)
        print(f"{s.name}: {fluid_bound(s, args.u_star, args.hot_nodes).line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
