"""``kso plan``: solve once and write the plan file.

Cluster from the API server (default), a snapshot file or the embedded demo; load from Prometheus, a
trace (series given to nodes in name order: a synthetic join, said so in the output) or, without
either, kube-safe-scheduler's node annotations. ``--openb NODES:PODS`` plans the real openb trace
instead (usage: synthetic join with Bitbrains).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

import orjson

from forecasting.cli_flags import add_forecast_args, forecast_request
from kso.core.cli_flags import add_cluster_args, cluster_source

if TYPE_CHECKING:
    from optimizer.plan.pipeline import PlanReport


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


def parse_plan_args(argv: list[str]) -> argparse.Namespace:
    """``kso plan`` arguments as the command line gives them (for callers that pass cmd_plan parameters)."""
    parser = argparse.ArgumentParser(prog="kso")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plan", *argv])


def cmd_plan(args: argparse.Namespace, abort_attempts: int = 0) -> int:
    """``abort_attempts``: test hook of optimizer.plan.protected_solver.ProtectedSolver (the first N solver processes die).
    An unusable input raises InputError: kso/cli.py prints it on one line (exit 1)."""
    from optimizer.plan.compiled import POLICIES
    from optimizer.plan.pipeline import PlanRequest, plan_once

    if args.policy and args.policy not in POLICIES:
        print(f"kso plan: unknown policy {args.policy!r} (known: {', '.join(POLICIES)})", file=sys.stderr)
        return 1
    openb = None
    if args.openb:
        try:
            n_nodes, n_pods = (int(v) for v in args.openb.split(":"))
        except ValueError:
            print("kso plan: --openb wants NODES:PODS, e.g. 100:800", file=sys.stderr)
            return 1
        openb = (n_nodes, n_pods)
    request = PlanRequest(cluster_source(args), forecast_request(args), openb, args.seed, args.policy, args.time_limit,
                          args.workers, args.out, args.config)
    report = plan_once(request, lambda note: print(f"kso plan: {note}", file=sys.stderr), abort_attempts)
    summary = report.summary()
    if args.json:
        print(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode())
        return 0
    _print_report(report, summary)
    return 0


def _print_report(report: PlanReport, summary: dict[str, Any]) -> None:
    problem, result, plan = report.planned.problem, report.planned.result, report.planned.plan
    print(f"kso plan: {report.policy}, {len(problem.nodes)} nodes, {len(problem.classes)} classes, "
          f"{sum(c.count for c in problem.classes)} pods to place (U* {problem.u_star:.0%}, eps {problem.eps:.0%})")
    print(f"load from: {report.load_from}")
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
    print(f"\nplan {plan.plan_id} written to {report.out}")
