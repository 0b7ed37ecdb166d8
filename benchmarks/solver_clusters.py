"""The solver benchmark's realistic-cluster section (``python -m benchmarks.solver --clusters ...``): every
policy on generated clusters of the kind users run (benchmarks.clusters), each plan file checked by the
independent checker (benchmarks.plan_checker), against first-fit-decreasing on the same input and the
LP bound.

Cells (parse_cluster_cell): ``300x2000`` (2,000 pending pods, a lightly loaded cluster), ``5000x150000/1000``
(150,000 pods of which 1,000 pending: a plan of the pending pods with the bound ones as load),
``5000x150000/1000:replan`` (the same cluster with every pod pending on empty nodes: the whole cluster
planned), ``:varied`` for the harder mix of KINDS; ``:public`` for the same sizes from public cluster traces
(benchmarks.public_clusters: the tuning set; the benchmarks.clusters cells are the held-out set).

Per policy: how the plan was made (one CP-SAT model, decomposed into neighbourhoods, or no search when the
start cannot be beaten), nodes in use (plan / FFD), unplaced pods (plan / FFD), gap of the plan's nodes to
the LP relaxation for placing the same pods, the hottest node's load index over the nodes given pods
(plan / FFD; 1.000 = at the safe bound in the model's linear form), whether the search improved on its
start, the seconds from the cluster to the plan (problem + compile + solve + plan, what ``kso plan`` spends
after reading the cluster), the solving process's peak memory, and the checker's verdict.
"""

from __future__ import annotations

import dataclasses
import math
import resource
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
from optimizer.plan.exact import plan_score
from optimizer.plan.heuristics import first_fit_decreasing, lp_bound_nodes
from optimizer.plan.pipeline import plan_cluster

# (nodes, pods, pending or None = all pending, re-plan) -> (seconds, gap to the LP bound, GiB) the aims allow
AIMS: dict[tuple[int, int, int | None, bool], tuple[float, float, float]] = {
    (300, 2000, None, False): (30.0, 0.03, math.inf),
    (1500, 8000, None, False): (60.0, 0.03, math.inf),
    (5000, 150000, 1000, True): (300.0, 0.05, 8.0),
    (5000, 150000, 1000, False): (60.0, math.inf, 8.0),
}
CELL_TIMEOUT_FACTOR, CELL_TIMEOUT_SLACK_S = 4.0, 600.0  # the protected child's wall clock per cell, x the time limit + s
# Cluster kinds: benchmarks.clusters.generate's mix, and one with more of what the optimizer finds hard.
KINDS: dict[str, dict[str, Any]] = {
    "standard": {},
    "varied": {"singleton_share": 0.15, "best_effort_share": 0.1, "gpu_share": 0.06, "job_share": 0.3},
}
COLUMNS = ("cluster", "policy", "mode", "nodes plan/FFD", "unplaced plan/FFD", "gap vs LP", "max load plan/FFD",
           "vs start", "cluster->plan s", "peak GiB", "checker")


@dataclass(frozen=True)
class ClusterCell:
    """A generated cluster: ``nodes`` x ``pods``, ``pending`` of the pods pending and the rest bound (None: all
    pending on a lightly loaded cluster, the generator's default), or with ``replan`` every pod of it pending
    on empty nodes (the whole cluster planned from scratch); ``kind`` one of KINDS."""

    nodes: int
    pods: int
    pending: int | None = None
    replan: bool = False
    kind: str = "standard"
    public: bool = False  # benchmarks.public_clusters (trace shapes: the tuning set) instead of benchmarks.clusters


    @property
    def name(self) -> str:
        text = f"{self.nodes}x{self.pods}" + (f"/{self.pending}" if self.pending is not None else "")
        return (text + (":replan" if self.replan else "") + (f":{self.kind}" if self.kind != "standard" else "")
                + (":public" if self.public else ""))

    def aim(self) -> tuple[float, float, float] | None:
        return AIMS.get((self.nodes, self.pods, self.pending, self.replan))

    def generate(self, seed: int) -> dict[str, Any]:
        if self.public:
            from benchmarks import public_clusters

            if self.pending is None:
                return public_clusters.generate(self.nodes, self.pods, seed)
            raise ValueError(f"cluster cell {self.name}: public clusters take NODESxPODS only")
        kind = KINDS[self.kind]
        if self.pending is None:
            return generate(self.nodes, self.pods, seed, **kind)
        doc = generate(self.nodes, self.pending, seed, bound_pods=self.pods - self.pending, **kind)
        return unbind_all(doc) if self.replan else doc


def parse_cluster_cell(text: str) -> ClusterCell:
    """``NODESxPODS[/PENDING][:replan][:KIND][:public]``, e.g. 300x2000, 5000x150000/1000:replan, 300x2000:public."""
    head, *flags = text.strip().split(":")
    size, _, pending = head.partition("/")
    n, _, p = size.lower().partition("x")
    kinds = [f for f in flags if f in KINDS]
    unknown = [f for f in flags if f not in KINDS and f not in ("replan", "public")]
    if unknown or not n.isdigit() or not p.isdigit() or (pending and not pending.isdigit()):
        raise ValueError(f"cluster cell {text!r}: want NODESxPODS[/PENDING][:replan][:{'|'.join(KINDS)}][:public]")
    if "public" in flags and (pending or "replan" in flags or kinds):
        raise ValueError(f"cluster cell {text!r}: a public cell is NODESxPODS[:public] only")
    return ClusterCell(int(n), int(p), int(pending) if pending else None, "replan" in flags,
                       kinds[0] if kinds else "standard", "public" in flags)


def unbind_all(doc: dict[str, Any]) -> dict[str, Any]:
    """The cluster with every pod pending and its nodes without load annotations (their load was those pods')."""
    items = []
    for o in doc["items"]:
        o = dict(o)
        if o.get("kind") == "Pod":
            o["spec"] = {k: v for k, v in o["spec"].items() if k != "nodeName"}
            o["status"] = {"phase": "Pending"}
        elif o.get("kind") == "Node":
            o["metadata"] = {**o["metadata"], "annotations": {}}
        items.append(o)
    return {**doc, "items": items}


@dataclass
class ClusterRow:
    cell: ClusterCell
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
    peak_gib: float
    vs_start: str  # "better" | "same" (CP-SAT's plan no worse than its start) | "start kept"
    checker_ok: bool
    checker: str
    notes: list[str] = field(default_factory=list)
    seed: int = 0
    problem_s: float = math.nan  # of seconds: the cluster to the placement problem

    @property
    def gap_lp(self) -> float:
        if not math.isfinite(self.lp) or self.nodes_used <= 0:
            return math.nan
        return max(self.nodes_used - math.ceil(self.lp - 1e-6), 0) / self.nodes_used


def _worst(comp: Any, x: np.ndarray) -> float:
    given = x.sum(axis=0) > 0
    return float(load_index(comp, x)[:, given].max(initial=0)) / T_MAX


def _peak_gib() -> float:
    """This process's peak resident memory (the protected child's: the solve's, not the caller's)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_cell_policy(opts: SolverOptions, cell: ClusterCell, seed: int, policy: str) -> ClusterRow:
    """One policy on one generated cluster (run in the protected child process)."""
    doc = cell.generate(seed)
    state = cluster_state(doc)
    t0 = time.perf_counter()
    problem = problem_from_state(state, None, 0.9, 0.3)
    problem_s = time.perf_counter() - t0
    planned = plan_cluster(problem, dataclasses.replace(opts, policy=policy))  # this is the protected child already
    result, plan = planned.result, planned.plan
    seconds = time.perf_counter() - t0
    peak = _peak_gib()
    report = check_plan(doc, orjson.loads(plan.to_json()))
    base = compile_problem(problem)
    ffd = first_fit_decreasing(base)
    mode = "decomposed" if any("decomposed" in n for n in result.notes) else (
        "no search" if any("no search" in n for n in result.notes) else "full")
    kept = any("start placement is used" in n for n in result.notes)
    start = result.start_score
    vs_start = "start kept" if kept else ("better" if start is not None and plan_score(base, result.x, policy) < start
                                          else "same")
    verdict = (f"ok ({report.risks_recomputed} risks recomputed, within {report.max_risk_difference:.0e})"
               if report.ok else "FAILED: " + ", ".join(f"{k} {v}" for k, v in report.problems.items()))
    return ClusterRow(cell, policy, mode, result.nodes_used, ffd.nodes_used, int(result.unplaced.sum()),
                      int(ffd.unplaced.sum()), lp_bound_nodes(base, result.unplaced), _worst(base, result.x),
                      _worst(base, ffd.x), report.max_risk_given, seconds, peak, vs_start, report.ok, verdict,
                      list(result.notes), seed, problem_s)


def cells(row: ClusterRow) -> list[str]:
    def pct(v: float) -> str:
        return "-" if not math.isfinite(v) else f"{v:.1%}"

    # The LP bounds node counts: no bound on load-balance's objective, which spreads pods over every node.
    counts_nodes = row.policy != "load-balance" and math.isfinite(row.lp)
    lp = f"{pct(row.gap_lp)} ({row.nodes_used} vs {math.ceil(row.lp - 1e-6)})" if counts_nodes else "-"
    return [f"{row.cell.name} s{row.seed}", row.policy, row.mode, f"{row.nodes_used} / {row.ffd_nodes}",
            f"{row.unplaced} / {row.ffd_unplaced}", lp, f"{row.worst:.3f} / {row.worst_ffd:.3f}", row.vs_start,
            f"{row.seconds:.1f}", f"{row.peak_gib:.2f}", row.checker]


SEED_COLUMNS = ("cluster", "policy", "seeds", "gap vs LP median [min, max]", "within 3%", "cluster->plan s median [max]",
                "unplaced > FFD", "checker failed")


def over_seeds(rows: list[ClusterRow]) -> list[list[str]]:
    """Per cell and policy, the spread over the seeds run: the gap to the LP bound and the seconds."""
    out: list[list[str]] = []
    keys = list(dict.fromkeys((r.cell.name, r.policy) for r in rows))
    for name, policy in keys:
        mine = [r for r in rows if (r.cell.name, r.policy) == (name, policy)]
        gaps = sorted(r.gap_lp for r in mine if math.isfinite(r.gap_lp))
        secs = sorted(r.seconds for r in mine)
        gap = (f"{float(np.median(gaps)):.1%} [{gaps[0]:.1%}, {gaps[-1]:.1%}]" if gaps and policy != "load-balance"
               else "-")
        within = f"{sum(g <= 0.03 for g in gaps)}/{len(gaps)}" if gaps and policy != "load-balance" else "-"
        out.append([name, policy, ",".join(str(r.seed) for r in mine), gap, within,
                    f"{float(np.median(secs)):.1f} [{secs[-1]:.1f}]", str(sum(r.unplaced > r.ffd_unplaced for r in mine)),
                    str(sum(not r.checker_ok for r in mine))])
    return out


def aims(rows: list[ClusterRow]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    bp = [r for r in rows if r.policy == "binpack" and r.cell.aim() is not None]
    parts, missed = [], False
    for r in bp:
        limit_s, limit_gap, limit_gib = r.cell.aim()  # type: ignore[misc]
        gap_ok = r.gap_lp <= limit_gap if math.isfinite(limit_gap) else True
        ok = gap_ok and r.seconds <= limit_s and r.peak_gib <= limit_gib
        missed |= not ok
        gap = f"{r.gap_lp:.1%} (limit {limit_gap:.0%})" if math.isfinite(limit_gap) else f"{r.gap_lp:.1%}"
        mem = f", {r.peak_gib:.2f} GiB (limit {limit_gib:g})" if math.isfinite(limit_gib) else ""
        parts.append(f"{r.cell.name} s{r.seed}: {gap} in {r.seconds:.1f} s (limit {limit_s:g} s){mem}"
                     + ("" if ok else " MISSED"))
    out.append(("binpack within its gap to the LP bound, time and memory", "missed" if missed or not bp else "met",
                "; ".join(parts) or "not run"))
    worse = [f"{r.cell.name} {r.policy} {r.unplaced} > {r.ffd_unplaced}" for r in rows if r.unplaced > r.ffd_unplaced]
    out.append(("unplaced <= FFD's, every policy", "missed" if worse else "met", ", ".join(worse) or f"{len(rows)} plans"))
    lb = [r for r in rows if r.policy == "load-balance"]
    text = "; ".join(f"{r.cell.name}: {r.vs_start}, hottest {r.worst:.3f} vs FFD {r.worst_ffd:.3f}" for r in lb)
    out.append(("load-balance: CP-SAT improves on its start", "met" if lb and all(r.vs_start == "better" for r in lb)
                else "missed", text or "not run"))
    bad = [f"{r.cell.name} {r.policy}: {r.checker}" for r in rows if not r.checker_ok]
    out.append(("independent checker: 0 rule, capacity, exactly-once or risk problems", "missed" if bad else "met",
                "; ".join(bad) or f"{len(rows)} plan files"))
    return out


def run(cell_list: list[ClusterCell], policies: list[str], workers: int, seeds: int | list[int],
        say: Callable[[str], None], with_retries: Callable[..., tuple[Any, list[str]]], table: Callable[..., str],
        time_limit: float | None = None) -> tuple[list[ClusterRow], list[tuple[str, str, str]], list[str]]:
    """Every policy on every cell for every seed (the generator's and the solver's), one table row each, then
    the spread over the seeds when there are several."""
    seed_list = [seeds] if isinstance(seeds, int) else list(seeds)
    rows: list[ClusterRow] = []
    crashes: list[str] = []
    lines: list[list[str]] = []
    for cell in cell_list:
        aim = cell.aim()
        limit = time_limit if time_limit is not None else (aim[0] if aim else 30.0)
        for seed in seed_list:
            # The solve's own limit leaves room for compiling, the exact check and the LP bound inside the aim.
            opts = SolverOptions(time_limit_s=max(limit - max(2.0, 0.15 * limit), 1.0), workers=workers, seed=seed)
            for policy in policies:
                # The child also generates the cluster, checks the plan file and solves the LP bound on the classes
                # unmerged: at 1,500 trace-shaped nodes on a loaded machine that alone outlasted the solver's own
                # wall-clock guard (2 x limit + 60 s), so the cell gets more; the plan's seconds are measured inside.
                row, notes = with_retries(run_cell_policy, opts, cell, seed, policy, timeout_s=CELL_TIMEOUT_FACTOR * limit
                                          + CELL_TIMEOUT_SLACK_S)
                crashes += [f"{policy} {cell.name} s{seed}: {c}" for c in notes]
                if row is None:
                    lines.append([f"{cell.name} s{seed}", policy, "CRASHED"] + ["-"] * (len(COLUMNS) - 3))
                    continue
                rows.append(row)
                lines.append(cells(row))
                say(f"- done: {' | '.join(cells(row))}")
    say("")
    say(table(COLUMNS, lines))
    say("")
    if len(seed_list) > 1:
        say(table(SEED_COLUMNS, over_seeds(rows)))
        say("")
    for r in rows:
        for note in r.notes:
            say(f"- {r.cell.name} s{r.seed} {r.policy}: {note}")
    return rows, aims(rows), crashes
