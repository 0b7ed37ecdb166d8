"""Solver benchmark: the CP-SAT placement plan on the real openb nodes and pods, against the LP bound and
the first-fit / best-fit heuristics.

    python -m benchmarks.solver                      # full matrix, 60 s per binpack solve, 30 s per policy
    python -m benchmarks.solver --quick              # 100 and 500 nodes only, short limits
    python -m benchmarks.solver --time-limit 120 --seed 1
    python -m benchmarks.solver --cells 20x100 --policy-cell 20x100 --time-limit 3 --policy-time-limit 1

What is measured
  * Problems: ``optimizer.plan.openb.openb_problem``: N nodes sampled (seeded) from ``openb-nodes.csv`` (cpu,
    memory, 110 pods), all empty, and P pending pods sampled from ``openb-pods-cpu.csv`` (real cpu and
    memory requests), grouped into workload classes by request shape. Pod usage (mean, std) is a
    SYNTHETIC JOIN of each class with a Bitbrains VM's utilisation (the label and sources are printed).
    Safe bound at U* = 0.9, eps = 0.3 (the safe agent's defaults).
  * Matrix: nodes 100, 500, 1500 x pods 1000, 4000, 8000; a cell whose pods request more than 1.5x the
    nodes' cpu is skipped (it says so), except the smallest cell, which is over-subscribed and still run.
  * ``binpack`` per cell: time to the first feasible plan, time to 1% gap, the final gap (CP-SAT's own,
    and against the LP-relaxation bound on nodes for placing the same pods), nodes used by the plan vs
    the LP bound vs first-fit-decreasing (FFD) vs best-fit-decreasing (BFD), unplaced pods for each, and
    nodes over their exact (Beta) safe bound in each placement.
  * Every policy at one cell (500 x 4000 by default): nodes used, unplaced, worst node load index,
    largest Beta overload risk, spread, violations.
Models over ``SolverOptions.full_model_limit`` (class, node) pairs are solved by large-neighbourhood
search ("decomposed"): there is no CP-SAT global bound, so the LP bound is the global bound and the time
to 1% gap is read from the LNS progress (nodes used after each step) against it.
Numbers are measurements on whatever machine runs them; the aims are checked and printed, not asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import numpy as np

from benchmarks.machine import machine_line
from optimizer.plan.chance import bound_comparison, z_value
from optimizer.plan.heuristics import HeuristicResult, best_fit_decreasing, first_fit_decreasing, lp_bound_nodes
from optimizer.plan.model import POLICIES, Compiled, SolveResult, SolverOptions, compile_problem, evaluate, solve
from optimizer.plan.openb import SOURCES, USAGE_LABEL, openb_problem, requested_share, vm_utilisation
from optimizer.plan.problem import PlacementProblem
from optimizer.plan.protected_solver import ProtectedSolver, SolverDied

FULL_NODES = (100, 500, 1500)
QUICK_NODES = (100, 500)
PODS = (1000, 4000, 8000)
MAX_SHARE = 1.5  # skip cells whose pods request more than this share of the nodes' cpu
AIM_CELL = (1500, 8000)
AIM_SECONDS = 60.0
AIM_GAP = 0.02
AIM_LP = 0.03
AIM_FFD = 0.05
CRASH_RETRIES = 1  # OR-Tools 9.15 can abort the process in presolve, at random (google/or-tools#5288)
T = TypeVar("T")

BINPACK_COLUMNS = ("nodes", "pods", "classes", "req cpu", "mode", "compile s", "first feasible s", "2% gap s", "1% gap s",
                   "gap CP-SAT", "gap vs LP", "nodes plan", "LP bound", "nodes FFD", "nodes BFD", "unplaced plan",
                   "unplaced FFD", "unplaced BFD", "violations", "violations FFD/BFD", "wall s")
POLICY_COLUMNS = ("policy", "status", "mode", "nodes used", "unplaced", "worst load index", "max risk", "spread cpu",
                  "violations", "wall s")


@dataclass
class BinpackRow:
    nodes: int
    pods: int
    classes: int
    share: float
    mode: str  # "full" | "decomposed"
    compile_s: float
    first_s: float | None
    gap1_s: float | None
    gap2_s: float | None
    gap_source: str  # "cp-sat" | "lp": whose gap the times are read against
    gap_cpsat: float  # NaN when decomposed
    gap_lp: float
    plan_nodes: int
    lp: float
    ffd_nodes: int
    bfd_nodes: int
    plan_unplaced: int
    ffd_unplaced: int
    bfd_unplaced: int
    violations: int
    ffd_violations: int
    bfd_violations: int
    wall_s: float
    lp_ffd: float  # LP bound for placing FFD's pods
    late_gain: float  # relative improvement in the last third of the search
    status: str = ""
    notes: list[str] = field(default_factory=list)


@dataclass
class PolicyRow:
    policy: str
    status: str
    mode: str
    nodes_used: int
    unplaced: int
    worst_index: float
    max_risk: float
    spread: float
    violations: int
    wall_s: float
    notes: list[str] = field(default_factory=list)


@dataclass
class Report:
    binpack: list[BinpackRow] = field(default_factory=list)
    skipped: list[tuple[int, int, float]] = field(default_factory=list)
    policies: list[PolicyRow] = field(default_factory=list)
    policy_cell: tuple[int, int] | None = None
    aims: list[tuple[str, str, str]] = field(default_factory=list)  # (aim, met|missed|not run, why)
    crashes: list[str] = field(default_factory=list)


def ceil_lp(lp: float) -> int:
    """Nodes are integers: the LP bound rounds up (after float noise)."""
    return int(math.ceil(lp - 1e-6)) if math.isfinite(lp) else 0


def gap_vs_lp(nodes: int, lp: float) -> float:
    if not math.isfinite(lp) or nodes <= 0:
        return math.nan
    return max(nodes - ceil_lp(lp), 0) / nodes


def exact_violations(comp: Compiled, x: np.ndarray, u_star: float, eps: float) -> int:
    """Nodes in use over their safe bound under the exact (Beta) rule."""
    risk, _, _, _ = evaluate(comp, x, u_star)
    used = x.sum(axis=0) > 0
    return int(((risk > eps + 1e-9) & used[None, :]).any(axis=0).sum())


def load_stats(comp: Compiled, x: np.ndarray, u_star: float, eps: float) -> tuple[float, float, float]:
    """(worst load index, largest Beta risk, cpu spread) over the nodes in use. The load index of a node
    and resource is (mean + z std) / (U* cap), z = Phi^-1(1 - eps): 1.0 = at its bound in the normal form;
    the spread is the std across used nodes of mean cpu utilisation (as the trace-replay benchmark's)."""
    risk, _, mean, var = evaluate(comp, x, u_star)
    used = (x.sum(axis=0) > 0) | comp.has_pods
    if not used.any():
        return 0.0, 0.0, 0.0
    z = z_value(eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        index = (mean + z * np.sqrt(np.maximum(var, 0.0))) / (u_star * comp.cap)
        util = mean[0] / comp.cap[0]
    index = np.where(comp.cap > 0, index, 0.0)
    return float(index[:, used].max()), float(risk[:, used].max()), float(util[used].std())


def time_to_gap(result: SolveResult, lp: float, start_nodes: int, target: float) -> tuple[float | None, str]:
    """Time to ``target`` gap: CP-SAT's own for a full model (from its solution callbacks); for a decomposed
    one, the FFD start (at the first-feasible time) or the first LNS step whose nodes used are within
    ``target`` of the LP bound (for the final plan's pods)."""
    if math.isfinite(result.gap):
        hit = next((t for t, o, b in result.progress if gap_of(o, b) <= target), None)
        if hit is None and result.gap <= target:
            hit = result.wall_s
        return hit, "cp-sat"
    points = list(result.progress)
    if result.first_feasible_s is not None:
        points.insert(0, (result.first_feasible_s, float(start_nodes), math.nan))
    for t, nodes, _ in points:
        if gap_vs_lp(int(nodes), lp) <= target:
            return t, "lp"
    return None, "lp"


def gap_of(obj: float, bound: float) -> float:
    """CP-SAT's relative gap, as optimizer.plan.model computes it."""
    return 0.0 if obj == bound else abs(obj - bound) / max(abs(obj), 1e-9)


def late_gain(result: SolveResult) -> float:
    """How much the plan still improved in the last third of the search (LNS: nodes; CP-SAT: objective,
    relative): > 0 means the time limit, not convergence, ended it."""
    pts = result.progress
    if len(pts) < 2:
        return 0.0
    cut = pts[-1][0] * 2 / 3
    before = [v for t, v, _ in pts if t <= cut]
    if not before:
        return 0.0
    return (before[-1] - pts[-1][1]) / max(abs(before[-1]), 1e-9)


def with_retries(fn: Callable[..., T], opts: Any, *args: Any, timeout_s: float | None = None
                 ) -> tuple[T | None, list[str]]:
    """``fn(opts, *args)`` through the optimizer's protected solve (a child process, another seed after an
    OR-Tools abort, google/or-tools#5288, stopped after ``timeout_s``, default the solver's): (result or None,
    one note per dead attempt)."""
    notes: list[str] = []
    try:
        result, _ = ProtectedSolver(retries=CRASH_RETRIES, on_crash=notes.append, timeout_s=timeout_s).call(fn, opts, *args)
    except SolverDied:
        return None, notes
    return result, notes


def fmt(v: float | int | None, spec: str = ".1f") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec)


def pct(v: float | None, digits: int = 1) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{v:.{digits}%}"


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def run_binpack_cell(opts: SolverOptions, prob: PlacementProblem, n_nodes: int, n_pods: int) -> BinpackRow:
    t = time.perf_counter()
    comp = compile_problem(prob)  # for solve(), which may tighten budgets in place
    compile_s = time.perf_counter() - t
    base = compile_problem(prob)  # untouched: heuristics, LP bound, exact checks
    result = solve(prob, opts, comp)
    ffd: HeuristicResult = first_fit_decreasing(base)
    bfd: HeuristicResult = best_fit_decreasing(base)
    lp = lp_bound_nodes(base, result.unplaced)
    lp_ffd = lp_bound_nodes(base, ffd.unplaced)
    mode = solve_mode(result)
    gap1, source = time_to_gap(result, lp, ffd.nodes_used, 0.01)
    gap2, _ = time_to_gap(result, lp, ffd.nodes_used, 0.02)
    u, e = prob.u_star, prob.eps
    return BinpackRow(
        nodes=n_nodes, pods=n_pods, classes=len(prob.classes), share=requested_share(prob),
        mode=mode, compile_s=compile_s, first_s=result.first_feasible_s,
        gap1_s=gap1, gap2_s=gap2, gap_source=source, gap_cpsat=result.gap,
        gap_lp=gap_vs_lp(result.nodes_used, lp), plan_nodes=result.nodes_used, lp=lp, ffd_nodes=ffd.nodes_used,
        bfd_nodes=bfd.nodes_used, plan_unplaced=int(result.unplaced.sum()), ffd_unplaced=int(ffd.unplaced.sum()),
        bfd_unplaced=int(bfd.unplaced.sum()), violations=result.violations,
        ffd_violations=exact_violations(base, ffd.x, u, e), bfd_violations=exact_violations(base, bfd.x, u, e),
        wall_s=result.wall_s, lp_ffd=lp_ffd, late_gain=late_gain(result), status=result.status, notes=list(result.notes))


def solve_mode(result: SolveResult) -> str:
    """How the plan was made: one CP-SAT model, LNS over neighbourhoods, or the heuristic start kept because
    CP-SAT's plan was worse."""
    if any("decomposed" in n for n in result.notes):
        return "decomposed"
    if any("start placement is used" in n for n in result.notes):
        return "full (start kept)"
    return "full"


def run_policy(opts: SolverOptions, prob: PlacementProblem, policy: str) -> PolicyRow:
    comp = compile_problem(prob)
    base = compile_problem(prob)
    result = solve(prob, dataclasses.replace(opts, policy=policy), comp)
    worst, risk, spread = load_stats(base, result.x, prob.u_star, prob.eps)
    return PolicyRow(policy, result.status, solve_mode(result), result.nodes_used,
                     int(result.unplaced.sum()), worst, risk, spread, result.violations, result.wall_s, list(result.notes))


def binpack_cells(row: BinpackRow) -> list[str]:
    def when(t: float | None) -> str:
        return "not reached" if t is None else fmt(t) + (" (lp)" if row.gap_source == "lp" else "")

    return [str(row.nodes), str(row.pods), str(row.classes), pct(row.share, 0), row.mode, fmt(row.compile_s),
            fmt(row.first_s, ".2f"), when(row.gap2_s), when(row.gap1_s), pct(row.gap_cpsat), pct(row.gap_lp), str(row.plan_nodes),
            f"{row.lp:.1f} -> {ceil_lp(row.lp)}" if math.isfinite(row.lp) else "-", str(row.ffd_nodes),
            str(row.bfd_nodes), str(row.plan_unplaced), str(row.ffd_unplaced), str(row.bfd_unplaced),
            str(row.violations), f"{row.ffd_violations}/{row.bfd_violations}", fmt(row.wall_s)]


def policy_cells(row: PolicyRow) -> list[str]:
    return [row.policy, row.status, row.mode, str(row.nodes_used), str(row.unplaced), f"{row.worst_index:.3f}",
            f"{row.max_risk:.3f}", f"{row.spread:.3f}", str(row.violations), fmt(row.wall_s)]


def check_aims(report: Report) -> list[tuple[str, str, str]]:
    aims: list[tuple[str, str, str]] = []
    cell = next((r for r in report.binpack if (r.nodes, r.pods) == AIM_CELL), None)
    name = f"{AIM_CELL[0]:,} x {AIM_CELL[1]:,} planned within {AIM_SECONDS:.0f} s at under {AIM_GAP:.0%} gap"
    if cell is None:
        aims.append((name, "not run", "that cell is not in this run (--quick, --cells, or its solve crashed)"))
    else:
        gap = cell.gap_cpsat if math.isfinite(cell.gap_cpsat) else cell.gap_lp
        which = "CP-SAT's gap" if math.isfinite(cell.gap_cpsat) else "gap vs the LP bound (decomposed: no CP-SAT bound)"
        reached = None if cell.gap2_s is None else cell.compile_s + cell.gap2_s
        ok = reached is not None and reached <= AIM_SECONDS and math.isfinite(gap) and gap < AIM_GAP
        why = (f"{which}: under {AIM_GAP:.0%} at {fmt(reached)} s from the start (compile {cell.compile_s:.1f} s + search "
               f"{fmt(cell.gap2_s)} s); final {pct(gap)} ({cell.plan_nodes} nodes vs LP bound {ceil_lp(cell.lp)}) at "
               f"{cell.compile_s + cell.wall_s:.1f} s")
        aims.append((name, "met" if ok else "missed", why))

    lp_rows = [r for r in report.binpack if math.isfinite(r.gap_lp)]
    name = f"binpack within {AIM_LP:.0%} of the LP bound (every cell)"
    if not lp_rows:
        aims.append((name, "not run", "no cell with an LP bound"))
    else:
        parts = []
        for r in lp_rows:
            text = f"{r.nodes}x{r.pods} {pct(r.gap_lp)}"
            if r.gap_lp > AIM_LP:
                state = (f"still improving when time ran out ({pct(r.late_gain)} better in the last third)" if r.late_gain > 0
                         else "no improvement in the last third")
                text += f" [missed: requested {pct(r.share, 0)} of cpu, {r.mode}, {state}]"
            parts.append(text)
        missed = any(r.gap_lp > AIM_LP for r in lp_rows)
        aims.append((name, "missed" if missed else "met", ", ".join(parts)))

    name = f"binpack >= {AIM_FFD:.0%} fewer nodes than FFD (every cell)"
    parts, missed_any = [], False
    for r in report.binpack:
        tag = f"{r.nodes}x{r.pods}"
        saving = (r.ffd_nodes - r.plan_nodes) / r.ffd_nodes if r.ffd_nodes else math.nan
        best = (r.ffd_nodes - ceil_lp(r.lp_ffd)) / r.ffd_nodes if r.ffd_nodes and math.isfinite(r.lp_ffd) else math.nan
        extra = r.ffd_unplaced - r.plan_unplaced
        if r.share > 1.0 or (r.ffd_nodes == r.nodes and extra > 0):
            parts.append(f"{tag}: n/a, over-subscribed or full (requested {pct(r.share, 0)} of cpu): FFD uses "
                         f"{r.ffd_nodes}/{r.nodes} nodes and leaves {r.ffd_unplaced} pods unplaced, the plan uses "
                         f"{r.plan_nodes} and leaves {r.plan_unplaced}; the comparison is pods placed, not nodes")
            if extra <= 0:
                missed_any = True
            continue
        if saving >= AIM_FFD:
            parts.append(f"{tag}: met, {pct(saving)} fewer ({r.plan_nodes} vs {r.ffd_nodes})")
            continue
        missed_any = True
        why = f"{tag}: missed, {pct(saving)} fewer ({r.plan_nodes} vs {r.ffd_nodes})"
        if math.isfinite(best) and best < AIM_FFD:
            why += (f"; FFD is already within {pct(best)} of the LP bound for its pods ({r.ffd_nodes} vs "
                    f"{ceil_lp(r.lp_ffd)}), so no plan of the same pods can be {AIM_FFD:.0%} better")
        elif extra > 0:
            why += f" while placing {extra} more pods than FFD"
        parts.append(why)
    aims.append((name, "missed" if missed_any else "met", "; ".join(parts) or "no cells"))

    viol = [(f"{r.nodes}x{r.pods} binpack", r.violations) for r in report.binpack]
    viol += [(f"{report.policy_cell[0]}x{report.policy_cell[1]} {p.policy}" if report.policy_cell else p.policy,
              p.violations) for p in report.policies]
    bad = [f"{k}: {v}" for k, v in viol if v]
    aims.append(("zero nodes above their exact safe bound in every plan", "missed" if bad else "met",
                 ", ".join(bad) if bad else f"{len(viol)} plans, 0 violations"))
    return aims


def parse_cell(text: str) -> tuple[int, int]:
    n, _, p = text.lower().partition("x")
    return int(n), int(p)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.solver", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 and 500 nodes only, short limits")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per binpack solve (60; --quick 15)")
    ap.add_argument("--policy-time-limit", type=float, default=None, help="seconds per policy solve (30; --quick 10)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.01, help="CP-SAT relative-gap target")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cells", default="", help="comma-separated NODESxPODS (overrides the matrix)")
    ap.add_argument("--policy-cell", default="500x4000", help="NODESxPODS for the policy table ('' to skip)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--clusters", default="", help="generated realistic clusters, every policy: "
                    "NODESxPODS[/PENDING][:replan][:varied] (e.g. 300x2000,1500x8000,5000x150000/1000; each cell's "
                    "aim sets its time limit, else --cluster-time-limit)")
    ap.add_argument("--cluster-time-limit", type=float, default=None, help="seconds per policy on --clusters cells")
    ap.add_argument("--cluster-seeds", default="", help="comma-separated seeds for the --clusters cells, each run and "
                    "then summarised (median, range); default --seed")
    ap.add_argument("--skip-openb", action="store_true", help="only the --clusters section")
    return ap


def _seeds(args: argparse.Namespace) -> list[int]:
    text = args.cluster_seeds.strip()
    try:
        return [int(s) for s in text.split(",") if s.strip()] if text else [args.seed]
    except ValueError:
        raise SystemExit(f"--cluster-seeds {text!r}: want comma-separated integers, e.g. 1,2,3") from None


def _chance_section(say: Callable[..., None]) -> None:
    say("## Chance constraint: largest mean utilisation accepted at each spread (share of capacity)")
    for eps in (0.3, 0.05):
        say()
        say(f"U* = 0.9, eps = {eps} (z = {z_value(eps):.3f}): normal form m + z s <= U* vs the exact Beta rule")
        say()
        rows = [[f"{r['sigma']:.2f}", f"{r['normal_max_mean']:.3f}", f"{r['beta_max_mean']:.3f}",
                 f"{r['beta_max_mean'] - r['normal_max_mean']:+.3f}"] for r in bound_comparison(0.9, eps)]
        say(table(("sigma", "normal max mean", "Beta max mean", "Beta - normal"), rows))
    say()
    say("Beta - normal < 0: the normal form alone would accept loads the Beta rule rejects (eps = 0.3: the Beta is "
        "skewed towards U*), so the model uses per node the larger of the normal z and the Beta-implied z at the "
        "node's full spread, then checks and repairs every plan against the exact rule. > 0: the normal form is "
        "conservative by that much mean utilisation.")
    say()


def _clusters_section(args: argparse.Namespace, say: Callable[..., None], report: Report) -> None:
    from benchmarks import solver_clusters

    say("## Realistic generated clusters (benchmarks.clusters), every plan file checked independently")
    say()
    crows, caims, ccrash = solver_clusters.run([solver_clusters.parse_cluster_cell(c) for c in args.clusters.split(",")
                                                if c.strip()],
                                               [p.strip() for p in args.policies.split(",") if p.strip()],
                                               args.workers, _seeds(args), say, with_retries, table,
                                               args.cluster_time_limit)
    say()
    say("max load = the hottest node's load index over the nodes given pods (1.000 = at its safe bound in the "
        "model's linear form); vs start = the search's plan against the heuristic start it began from; "
        "cluster->plan s = problem + compile + solve + exact check + plan, what kso plan spends after reading the "
        "cluster; peak GiB = the solving process's peak resident memory; checker = benchmarks.plan_checker on the "
        "plan file (rules, capacity, exactly-once, every stated risk recomputed from the file and the objects).")
    say()
    report.aims += [(f"clusters: {a}", v, w) for a, v, w in caims]
    report.crashes += ccrash


def _binpack_section(args: argparse.Namespace, limit: float, vms: Any, say: Callable[..., None], report: Report) -> None:
    opts = SolverOptions(policy="binpack", time_limit_s=limit, workers=args.workers, relative_gap=args.gap, seed=args.seed)
    if args.cells:
        cells = [parse_cell(c) for c in args.cells.split(",") if c.strip()]
        forced = set(cells)
    else:
        cells = [(n, p) for n in (QUICK_NODES if args.quick else FULL_NODES) for p in PODS]
        forced = {cells[0]}
    say(f"## binpack (time limit {limit:g} s per solve)")
    say()
    rows: list[list[str]] = []
    for n, p in cells:
        prob = openb_problem(n, p, seed=args.seed, vms=vms)
        share = requested_share(prob)
        if share > MAX_SHARE and (n, p) not in forced:
            report.skipped.append((n, p, share))
            continue
        row, crashes = with_retries(run_binpack_cell, opts, prob, n, p)
        report.crashes += [f"binpack {n} x {p}, {c}" for c in crashes]
        if row is None:
            rows.append([str(n), str(p), str(len(prob.classes)), pct(share, 0), "CRASHED"] + ["-"] * (len(BINPACK_COLUMNS) - 5))
            continue
        report.binpack.append(row)
        rows.append(binpack_cells(row))
        print(f"  done {n}x{p}: {row.plan_nodes} nodes ({row.status}, {row.wall_s:.1f} s)", file=sys.stderr, flush=True)
    say(table(BINPACK_COLUMNS, rows))
    say()
    for n, p, share in report.skipped:
        say(f"- {n} x {p}: skipped, the pods request {share:.0%} of the nodes' cpu (> {MAX_SHARE:.0%})")
    for r in report.binpack:
        for note in r.notes:
            say(f"- {r.nodes} x {r.pods}: {note}")
    say()
    say("req cpu = pods' cpu requests / nodes' allocatable cpu. mode = full CP-SAT model, or decomposed (LNS, "
        "> 40,000 class-node pairs). 2% / 1% gap s = seconds of search (after compile s) until CP-SAT's own gap (of its "
        "whole weighted objective: unplaced pods, nodes, worst load index) is that small, for a full model; (lp) = until "
        "the FFD start or an LNS step is within it of the LP bound for the final plan's pods. "
        "gap vs LP = (plan nodes - ceil(LP)) / plan nodes, LP = the "
        "relaxation (scipy HiGHS) of the same linear model for placing the plan's pods. violations = nodes over the "
        "exact Beta safe bound (plan after the solver's repair; FFD/BFD as they place, against the same linear budgets). "
        "BFD opens, when it must, the node that fits tightest, i.e. the smallest: on openb's mixed node sizes it opens "
        "many small nodes.")
    say()


def _policy_section(args: argparse.Namespace, p_limit: float, vms: Any, say: Callable[..., None], report: Report) -> None:
    policy_list = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not args.policy_cell or not policy_list:
        return
    n, p = parse_cell(args.policy_cell)
    report.policy_cell = (n, p)
    prob = openb_problem(n, p, seed=args.seed, vms=vms)
    say(f"## Policies at {n} x {p} (requested {requested_share(prob):.0%} of cpu; time limit {p_limit:g} s each)")
    say()
    popts = SolverOptions(time_limit_s=p_limit, workers=args.workers, relative_gap=args.gap, seed=args.seed)
    prow: list[list[str]] = []
    for policy in policy_list:
        result, crashes = with_retries(run_policy, popts, prob, policy)
        report.crashes += [f"{policy} {n} x {p}, {c}" for c in crashes]
        if result is None:
            prow.append([policy, "CRASHED"] + ["-"] * (len(POLICY_COLUMNS) - 2))
            continue
        report.policies.append(result)
        prow.append(policy_cells(result))
        print(f"  done policy {policy}", file=sys.stderr, flush=True)
    say(table(POLICY_COLUMNS, prow))
    say()
    for r in report.policies:
        for note in r.notes:
            say(f"- {r.policy}: {note}")
    say()
    say("worst load index = max over used nodes and (cpu, memory) of (mean + z std) / (U* cap), z = "
        f"{z_value(prob.eps):.3f} (1.000 = at the bound in the normal form); max risk = largest P(load > U*) "
        "under the Beta rule (must be <= eps); spread cpu = std of mean cpu utilisation across used nodes. "
        "openb nodes carry no cost, so every node costs 1 and `cost` is binpack by another name.")
    say()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    out = out or sys.stdout
    limit = args.time_limit if args.time_limit is not None else (15.0 if args.quick else 60.0)
    p_limit = args.policy_time_limit if args.policy_time_limit is not None else (10.0 if args.quick else 30.0)

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    started = time.perf_counter()
    load0 = os.getloadavg()
    say("# Solver benchmark (kso optimizer, CP-SAT)")
    say(f"timestamp: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}")
    say(f"machine: {machine_line(load0)} (before)")
    say(f"seed: {args.seed}; binpack time limit {limit:g} s, policy time limit {p_limit:g} s, {args.workers} workers, "
        f"relative-gap target {args.gap:g}; U* = 0.9, eps = 0.3")
    say(USAGE_LABEL)
    say(f"sources: {SOURCES}")
    say()
    report = Report()
    _chance_section(say)
    if args.clusters:
        _clusters_section(args, say, report)
        if args.skip_openb:
            for aim, verdict, why in report.aims:
                say(f"- {aim}: **{verdict.upper()}** ({why})")
            say(f"machine: {machine_line()} (after)")
            say(f"total wall {time.perf_counter() - started:.0f} s")
            return 0
    vms = vm_utilisation()
    _binpack_section(args, limit, vms, say, report)
    _policy_section(args, p_limit, vms, say, report)
    if report.crashes:
        say("## Solver crashes")
        say()
        for c in report.crashes:
            say(f"- {c}")
        say()
    report.aims = report.aims + check_aims(report)
    say("## Aims")
    say()
    for aim, verdict, why in report.aims:
        say(f"- {aim}: **{verdict.upper()}** ({why})")
    say()
    say(f"machine: {machine_line()} (after)")
    say(f"total wall {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
