"""``kso plan``: solve once and write the plan file.

Cluster from the API server (default), a snapshot file or the embedded demo; load from Prometheus, a
trace (series given to nodes in name order: a synthetic join, said so in the output) or, without
either, kube-safe-scheduler's node annotations. ``--openb NODES:PODS`` plans the real openb trace
instead (usage: synthetic join with Bitbrains).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from typing import Any

import orjson

from forecasting.inputs import add_forecast_args, node_forecasts
from kso.core.cluster import ClusterState
from kso.core.inputs import InputError, add_cluster_args, load_cluster
from kso.core.settings import load_settings, read_config_file

log = logging.getLogger("kso.optimizer")


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser("plan", help="solve a placement plan once (CP-SAT) and write the plan file")
    where = add_cluster_args(p, snapshot_help="cluster from a snapshot file (kubectl get nodes,pods -A -o json)")
    where.add_argument("--openb", metavar="NODES:PODS", help="the openb trace: NODES nodes, PODS pending pods")
    add_forecast_args(p)  # --prometheus / --trace and the forecast options, as `kso forecast`
    p.add_argument("--policy", help="binpack, load-balance, consolidate, a-binpack, cost (default KSO_PLAN_POLICY)")
    p.add_argument("--time-limit", type=float, help="solver seconds (default KSO_SOLVER_TIME_LIMIT_S)")
    p.add_argument("--workers", type=int, help="solver workers (default KSO_SOLVER_WORKERS)")
    p.add_argument("--out", metavar="PATH", help="plan file to write (default KSO_PLAN_FILE, else ./kso-plan.json)")
    p.add_argument("--config", help="settings file (env wins)")
    p.add_argument("--seed", type=int, default=0, help="--openb sampling seed")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_plan)


def _cluster_and_forecasts(args: argparse.Namespace) -> tuple[ClusterState, dict[str, Any] | None, float | None, str]:
    """(cluster, forecasts by node, their "now", where the load comes from); InputError when unusable."""
    state = load_cluster(args, "kso plan").state
    try:
        forecasts, now, load_from = node_forecasts(args, state.node_names())
    except InputError as exc:
        if not args.prometheus:
            raise
        # A failed Prometheus is not fatal here: the plan judges nodes on their annotations.
        print(f"kso plan: {exc}; planning on the node annotations instead", file=sys.stderr)
        return state, None, None, "node annotations (Prometheus failed)"
    return state, forecasts, now, load_from


def _class_usage(args: argparse.Namespace, state: ClusterState) -> tuple[dict[str, Any], str]:
    """Each workload class's usage from its running pods' series in Prometheus (optimizer.inputs)."""
    if not args.prometheus:
        return {}, ""
    from dataclasses import replace

    from forecasting.prometheus import PrometheusSettings
    from optimizer.inputs import class_usage_from_prometheus

    settings = load_settings(PrometheusSettings, None, read_config_file(args.config))  # timeouts, queries: env over --config
    usage, note = class_usage_from_prometheus(replace(settings, url=args.prometheus),
                                              state.bound_pods())
    if not usage and "failed" in note:
        print(f"kso plan: {note}", file=sys.stderr)
    return usage, f"; {note}"


def parse_plan_args(argv: list[str]) -> argparse.Namespace:
    """``kso plan`` arguments as the command line gives them (for callers that pass cmd_plan parameters)."""
    parser = argparse.ArgumentParser(prog="kso")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plan", *argv])


def cmd_plan(args: argparse.Namespace, abort_attempts: int = 0) -> int:
    """``abort_attempts``: test hook of optimizer.planner.ProtectedSolver (the first N solver processes die)."""
    from optimizer.compiled import POLICIES, compile_problem
    from optimizer.inputs import problem_from_state
    from optimizer.plan import plan_from_result, write_plan
    from optimizer.planner import ProtectedSolver
    from optimizer.settings import PlanSettings

    settings = load_settings(PlanSettings, None, read_config_file(args.config))
    options = settings.solver_options()
    if args.policy:
        if args.policy not in POLICIES:
            print(f"kso plan: unknown policy {args.policy!r} (known: {', '.join(POLICIES)})", file=sys.stderr)
            return 1
        options.policy = args.policy
    if options.policy == "none":
        options.policy = "binpack"
    if args.time_limit:
        options.time_limit_s = args.time_limit
    if args.workers:
        options.workers = args.workers
    if args.openb:
        from optimizer.openb import SOURCES, USAGE_LABEL, openb_problem

        try:
            n_nodes, n_pods = (int(v) for v in args.openb.split(":"))
        except ValueError:
            print("kso plan: --openb wants NODES:PODS, e.g. 100:800", file=sys.stderr)
            return 1
        problem = openb_problem(n_nodes, n_pods, seed=args.seed, u_star=settings.u_star, eps=settings.eps)
        load_from = f"{SOURCES}; {USAGE_LABEL}"
    else:
        # An unusable input raises InputError: kso/cli.py prints it on one line (exit 1).
        state, forecasts, now, load_from = _cluster_and_forecasts(args)
        # (a Prometheus that just failed is not asked again)
        class_usage, usage_from = _class_usage(args, state) if forecasts is not None else ({}, "")
        load_from += usage_from
        problem = problem_from_state(state, forecasts, settings.u_star, settings.eps, cost_key=settings.cost_key, now=now,
                                     scheduler_names=settings.scheduler_names, class_usage=class_usage)
        if forecasts and not any(n.load and all(math.isfinite(v.mean) for v in n.load.values()) for n in problem.nodes):
            load_from += " (no usable forecast: annotations/requests used)"
    t0 = time.perf_counter()
    comp = compile_problem(problem)
    # The solve runs in a child process: an OR-Tools abort (google/or-tools#5288) ends only that process.
    def report(note: str) -> None:
        print(f"kso plan: {note}", file=sys.stderr)

    solver = ProtectedSolver(retries=1, on_crash=report, abort_attempts=abort_attempts)
    result = solver.solve_plan(problem, options, comp)
    plan = plan_from_result(problem, comp, result, options.policy)
    out = args.out or settings.plan_file or "kso-plan.json"
    write_plan(plan, out)
    summary = {**plan.summary(), "nodes_over_safe_bound": result.violations, "wall_s": round(time.perf_counter() - t0, 2),
               "first_feasible_s": result.first_feasible_s, "load_from": load_from, "plan_file": out,
               "u_star": problem.u_star, "eps": problem.eps, "notes": result.notes}
    if args.json:
        print(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())
        return 0
    print(f"kso plan: {options.policy}, {len(problem.nodes)} nodes, {len(problem.classes)} classes, "
          f"{sum(c.count for c in problem.classes)} pods to place (U* {problem.u_star:.0%}, eps {problem.eps:.0%})")
    print(f"load from: {load_from}")
    print(f"status {result.status}, gap {result.gap:.4f}, wall {summary['wall_s']} s; planned {summary['pods_planned']}, "
          f"unplaced {summary['pods_unplaced']}, nodes in use {summary['nodes_used']} of {summary['nodes']}, "
          f"nodes over their safe bound: {result.violations}")
    for note in result.notes:
        print(f"  note: {note}")
    rows = sorted(plan.classes.items(), key=lambda kv: -kv[1].count)[:15]
    print(f"\n{'class':<58}{'pods':>6}{'unplaced':>10}  slots (node: pods)")
    for key, c in rows:
        slots = ", ".join(f"{n}: {k}" for n, k in sorted(c.slots.items(), key=lambda kv: -kv[1])[:4])
        more = f" (+{len(c.slots) - 4} nodes)" if len(c.slots) > 4 else ""
        print(f"{key[:57]:<58}{c.count:>6}{c.unplaced:>10}  {slots}{more}")
    if len(plan.classes) > len(rows):
        print(f"... {len(plan.classes) - len(rows)} more classes")
    print(f"\nplan {plan.plan_id} written to {out}")
    return 0
