"""How much of a plan's gap to the LP bound no plan can close: the LP relaxation the solver benchmark reports
(optimizer.plan.heuristics.lp_bound_nodes), and the same relaxation with each class's pods on a node capped at
the whole number that fit there alone (x[c, n] <= ub[c, n] y[n]; ub = compiled.ub(), floor of free / request and
budget / safe term), a valid inequality of the integer model that the relaxation lacks. The second is a
diagnostic only: the aims are stated against the first.

    python -m benchmarks.solver_bounds --clusters 1500x8000,300x2000:varied --seeds 0,1,2

Per cell and seed: nodes already in use, the first-fit start (merged classes, nodes closed), the LP bound, the
capped bound, and the share of the start's gap to the LP bound that the capped bound explains.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import numpy as np

from benchmarks.clusters import cluster_state
from benchmarks.machine import machine_line
from benchmarks.solver_clusters import parse_cluster_cell
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import Compiled, compile_problem, merge_identical_classes
from optimizer.plan.heuristics import close_nodes, first_fit_decreasing, lp_bound_nodes


def capped_lp_bound(comp: Compiled, unplaced: np.ndarray) -> float:
    """The binpack LP relaxation (one variable per class and node, y per node) with x[c, n] <= ub[c, n] y[n]."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    ub = comp.ub()
    ci_idx, ni_idx = np.nonzero(ub > 0)
    n_x, n_n = len(ci_idx), comp.n_nodes
    need = (comp.counts - unplaced).astype(float)
    a_eq = sp.csr_matrix((np.ones(n_x), (ci_idx, np.arange(n_x))), shape=(comp.n_classes, n_x + n_n))
    rows, cols, vals, row = [], [], [], 0
    blocks = [(comp.req[ci_idx, r].astype(float), comp.free[:, r].astype(float)) for r in range(len(comp.resources))]
    blocks += [(comp.a[k, ci_idx, ni_idx].astype(float), comp.budget[k].astype(float)) for k in range(2)]
    for coef, cap in blocks:
        rows += [row + ni_idx, row + np.arange(n_n)]
        cols += [np.arange(n_x), n_x + np.arange(n_n)]
        vals += [coef, -np.maximum(cap, 0.0)]
        row += n_n
    rows += [row + np.arange(n_x), row + np.arange(n_x)]  # x[c, n] - ub[c, n] y[n] <= 0
    cols += [np.arange(n_x), n_x + ni_idx]
    vals += [np.ones(n_x), -ub[ci_idx, ni_idx].astype(float)]
    row += n_x
    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(row, n_x + n_n))
    cost = np.concatenate([np.zeros(n_x), np.ones(n_n)])
    bounds = [(0, None)] * n_x + [(1.0, 1.0) if comp.has_pods[n] else (0.0, 1.0) for n in range(n_n)]
    res = linprog(cost, A_ub=a_ub, b_ub=np.zeros(row), A_eq=a_eq, b_eq=need, bounds=bounds, method="highs")
    return float(res.fun) if res.status == 0 else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.solver_bounds", description=__doc__.split("\n")[0])
    ap.add_argument("--clusters", default="1500x8000,300x2000:varied")
    ap.add_argument("--seeds", default="0,1,2")
    args = ap.parse_args(argv)
    print(machine_line())
    print()
    print("| cluster | seed | nodes in use | start | LP bound | capped bound | start gap explained |")
    print("|---|---|---|---|---|---|---|")
    for text in args.clusters.split(","):
        cell = parse_cluster_cell(text)
        for seed in (int(s) for s in args.seeds.split(",")):
            doc = cell.generate(seed)
            comp, _ = merge_identical_classes(compile_problem(problem_from_state(cluster_state(doc), None, 0.9, 0.3)))
            ffd = first_fit_decreasing(comp)
            x = ffd.x.copy()
            close_nodes(comp, x)
            start = int(((x.sum(axis=0) > 0) | comp.has_pods).sum())
            lp = math.ceil(lp_bound_nodes(comp, ffd.unplaced) - 1e-6)
            capped = math.ceil(capped_lp_bound(comp, ffd.unplaced) - 1e-6)
            explained = (capped - lp) / (start - lp) if start > lp else math.nan
            print(f"| {cell.name} | {seed} | {int(comp.has_pods.sum())} | {start} | {lp} | {capped} | "
                  f"{explained:.0%} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
