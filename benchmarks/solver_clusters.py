"""The solver benchmark's realistic-cluster section (``python -m benchmarks.solver --clusters ...``): every
policy on generated clusters of the kind users run (benchmarks.clusters), each plan file checked by the
independent checker (benchmarks.plan_checker), against first-fit-decreasing on the same input and the
LP bound.

Per policy: nodes in use (plan / FFD), unplaced pods (plan / FFD), gap of the plan's nodes to the LP
relaxation for placing the same pods, the hottest node's load index over the nodes given pods (plan /
FFD; 1.000 = at the safe bound in the model's linear form), the largest Beta risk on nodes given pods,
the seconds from the cluster to the plan (compile + solve, what ``kso plan`` spends after reading the
cluster), and the checker's verdict.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from benchmarks.clusters import cluster_state, generate
from benchmarks.plan_checker import check_plan
from optimizer.plan.cluster_problem import problem_from_state
from optimizer.plan.compiled import T_MAX, SolverOptions, compile_problem, load_index
from optimizer.plan.heuristics import first_fit_decreasing, lp_bound_nodes
from optimizer.plan.pipeline import plan_cluster

CELLS = {(300, 2000): 30.0, (1500, 8000): 60.0}  # nodes x pods -> seconds the aim allows
AIM_LP = 0.03
COLUMNS = ("cluster", "policy", "mode", "nodes plan/FFD", "unplaced plan/FFD", "gap vs LP", "max load plan/FFD",
           "max risk given", "cluster->plan s", "checker")


@dataclass
class ClusterRow:
    nodes: int
    pods: int
    policy: str
    mode: str
    nodes_used: int
    ffd_nodes: int
    unplaced: int
    ffd_unplaced: int
    lp: float
    worst: float
    worst_ffd: float
    max_risk_given: float
    seconds: float
    checker_ok: bool
    checker: str
    notes: list[str] = field(default_factory=list)

    @property
    def gap_lp(self) -> float:
        if not math.isfinite(self.lp) or self.nodes_used <= 0:
            return math.nan
        return max(self.nodes_used - math.ceil(self.lp - 1e-6), 0) / self.nodes_used


def _worst(comp: Any, x: np.ndarray) -> float:
    given = x.sum(axis=0) > 0
    return float(load_index(comp, x)[:, given].max(initial=0)) / T_MAX


def run_cell_policy(opts: SolverOptions, n_nodes: int, n_pods: int, seed: int, policy: str) -> ClusterRow:
    """One policy on one generated cluster (run in the protected child process)."""
    doc = generate(n_nodes, n_pods, seed)
    state = cluster_state(doc)
    t0 = time.perf_counter()
    problem = problem_from_state(state, None, 0.9, 0.3)
    planned = plan_cluster(problem, dataclasses.replace(opts, policy=policy))  # this is the protected child already
    result, plan = planned.result, planned.plan
    seconds = time.perf_counter() - t0
    report = check_plan(doc, orjson.loads(plan.to_json()))
    base = compile_problem(problem)
    ffd = first_fit_decreasing(base)
    mode = "decomposed" if any("decomposed" in n for n in result.notes) else "full"
    verdict = (f"ok ({report.placements_checked} pod-node checks, risk within {report.max_risk_difference:.0e})"
               if report.ok else "FAILED: " + ", ".join(f"{k} {v}" for k, v in report.problems.items()))
    return ClusterRow(n_nodes, n_pods, policy, mode, result.nodes_used, ffd.nodes_used, int(result.unplaced.sum()),
                      int(ffd.unplaced.sum()), lp_bound_nodes(base, result.unplaced), _worst(base, result.x),
                      _worst(base, ffd.x), report.max_risk_given, seconds, report.ok, verdict, list(result.notes))


def cells(row: ClusterRow) -> list[str]:
    def pct(v: float) -> str:
        return "-" if not math.isfinite(v) else f"{v:.1%}"

    lp = f"{pct(row.gap_lp)} ({row.nodes_used} vs {math.ceil(row.lp - 1e-6)})" if math.isfinite(row.lp) else "-"
    return [f"{row.nodes}x{row.pods}", row.policy, row.mode, f"{row.nodes_used} / {row.ffd_nodes}",
            f"{row.unplaced} / {row.ffd_unplaced}", lp, f"{row.worst:.3f} / {row.worst_ffd:.3f}",
            f"{row.max_risk_given:.3f}", f"{row.seconds:.1f}", row.checker]


def aims(rows: list[ClusterRow]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    bp = [r for r in rows if r.policy == "binpack"]
    parts, missed = [], False
    for r in bp:
        limit = CELLS.get((r.nodes, r.pods), math.inf)
        ok = r.gap_lp <= AIM_LP and r.seconds <= limit
        missed |= not ok
        parts.append(f"{r.nodes}x{r.pods}: {r.gap_lp:.1%} in {r.seconds:.1f} s (limit {limit:g} s)")
    out.append((f"binpack within {AIM_LP:.0%} of the LP bound in time", "missed" if missed or not bp else "met",
                "; ".join(parts) or "not run"))
    worse = [f"{r.nodes}x{r.pods} {r.policy} {r.unplaced} > {r.ffd_unplaced}" for r in rows if r.unplaced > r.ffd_unplaced]
    out.append(("unplaced <= FFD's, every policy", "missed" if worse else "met", ", ".join(worse) or f"{len(rows)} plans"))
    lb = [r for r in rows if r.policy == "load-balance"]
    text = "; ".join(f"{r.nodes}x{r.pods}: {r.worst:.3f} vs FFD {r.worst_ffd:.3f} ({(r.worst_ffd - r.worst) / r.worst_ffd:.1%} "
                     "lower)" for r in lb)
    out.append(("load-balance's hottest node lower than FFD's", "met" if lb and all(r.worst < r.worst_ffd for r in lb)
                else "missed", text or "not run"))
    bad = [f"{r.nodes}x{r.pods} {r.policy}: {r.checker}" for r in rows if not r.checker_ok]
    out.append(("independent checker: 0 rule, capacity, exactly-once or risk problems", "missed" if bad else "met",
                "; ".join(bad) or f"{len(rows)} plan files"))
    return out


def run(cell_list: list[tuple[int, int]], policies: list[str], workers: int, seed: int, say: Callable[[str], None],
        with_retries: Callable[..., tuple[Any, list[str]]], table: Callable[..., str],
        time_limit: float | None = None) -> tuple[list[ClusterRow], list[tuple[str, str, str]], list[str]]:
    rows: list[ClusterRow] = []
    crashes: list[str] = []
    lines: list[list[str]] = []
    for n, p in cell_list:
        limit = time_limit if time_limit is not None else CELLS.get((n, p), 30.0)
        # The solve's own limit leaves room for compiling, the exact check and the LP bound inside the aim.
        opts = SolverOptions(time_limit_s=max(limit - max(2.0, 0.1 * limit), 1.0), workers=workers, seed=seed)
        for policy in policies:
            row, notes = with_retries(run_cell_policy, opts, n, p, seed, policy)
            crashes += [f"{policy} {n}x{p}: {c}" for c in notes]
            if row is None:
                lines.append([f"{n}x{p}", policy, "CRASHED"] + ["-"] * (len(COLUMNS) - 3))
                continue
            rows.append(row)
            lines.append(cells(row))
    say(table(COLUMNS, lines))
    say("")
    for r in rows:
        for note in r.notes:
            say(f"- {r.nodes}x{r.pods} {r.policy}: {note}")
    return rows, aims(rows), crashes
