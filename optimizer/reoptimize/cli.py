"""``kso reoptimize``: re-optimise the running placement with a move budget, and (with --execute) act on it.

Reads the cluster (API server, a snapshot file or the embedded demo) and the load (Prometheus, a trace,
or kube-safe-scheduler's node annotations), solves the placement with a budget of moves and a cost per
move (optimizer.reoptimize.migration), and prints the moves (pod, from, to, why) and the expected result per
node, before and after. Dry-run by default: it prints where every evicted pod would land.

With ``--execute`` it publishes the moves' target slots for the extender (ConfigMap kso-plan, before the
first eviction), evicts through the Eviction API (PodDisruptionBudgets hold), records Events and publishes
the targets of the moves carried out, with each move's state (optimizer.reoptimize.eviction). Which pods may move at
all: optimizer.reoptimize.eligibility (never mirror, DaemonSet, system-critical, local-storage or single-replica
pods, nor opted-out or excluded-namespace ones).

Exit codes: 0 done, 1 configuration error or the plan could not be published (nothing evicted; message on
stderr), 2 some evictions failed.

This module is the command (flags, options, output); the cluster and forecasts are read by
kso.core.cluster_source and forecasting.forecast_source.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from forecasting.cli_flags import add_forecast_args, forecast_request
from forecasting.forecast_source import node_forecasts_or_settings
from kso.core.cli_flags import add_cluster_args, cluster_source
from kso.core.cluster_source import InputError, RawCluster, load_cluster
from kso.core.settings import load_settings, read_config_file
from optimizer.reoptimize.budgets import MULTIPLE_BUDGETS, disruption_limits, read_budgets
from optimizer.reoptimize.eligibility import DEFAULT_EXCLUDED_NAMESPACES, OPT_OUT_ANNOTATION, EligibilityArgs, movable_pods
from optimizer.reoptimize.eviction import DEFAULT_EVICTION_DEADLINE_S, Execution, execute, move_states, plan_namespace, publish

EXIT_OK, EXIT_CONFIG, EXIT_EVICTIONS_FAILED = 0, 1, 2


def add_commands(subparsers: Any) -> None:
    from optimizer.reoptimize.migration import MIGRATION_POLICIES

    p = subparsers.add_parser(
        "reoptimize", help="re-optimise the running placement with a move budget (dry-run unless --execute)",
        description="Solve the current placement with a budget of moves and a cost per move; print the moves (pod, "
                    "from, to, why) and the expected result per node. Dry-run unless --execute, which evicts through "
                    "the Eviction API (PodDisruptionBudgets hold), publishing the target slots first. Never moves "
                    "mirror, DaemonSet, system-critical, local-storage (emptyDir/hostPath) or single-replica pods, "
                    f"nor pods annotated {OPT_OUT_ANNOTATION}: \"false\". Exit 0 ok, 1 configuration error or the "
                    "plan could not be published (nothing evicted), 2 some evictions failed.")
    add_cluster_args(p, snapshot_help="cluster from a snapshot file instead of the API server (dry-run only)",
                     demo_help="the embedded demo cluster (dry-run only)")
    add_forecast_args(p)  # --prometheus / --trace and the forecast options, as `kso forecast`
    p.add_argument("--execute", action="store_true", help="evict for real (default: dry-run, nothing is changed)")
    p.add_argument("--max-moves", type=int, default=10, metavar="N", help="evictions in total (default 10)")
    p.add_argument("--max-per-node", type=int, default=None, metavar="N", help="evictions from one node (default: no limit)")
    p.add_argument("--max-per-namespace", type=int, default=None, metavar="N",
                   help="evictions in one namespace (default: no limit)")
    p.add_argument("--eviction-deadline", type=float, default=DEFAULT_EVICTION_DEADLINE_S, metavar="S",
                   help="seconds, from the first eviction, within which evictions refused with 429 (a "
                        "PodDisruptionBudget with no disruption left, or API throttling) are retried with backoff "
                        f"(default {DEFAULT_EVICTION_DEADLINE_S:g}; 0: never retried)")
    p.add_argument("--exclude-namespaces", default=DEFAULT_EXCLUDED_NAMESPACES, metavar="NS,...",
                   help="namespaces whose pods are never moved (default kube-system)")
    p.add_argument("--policy", type=str.lower, choices=MIGRATION_POLICIES,
                   help="objective after risk (default KSO_PLAN_POLICY; none = only relieve nodes over their safe bound)")
    p.add_argument("--move-cost", type=float, default=0.2, metavar="X",
                   help="cost of one eviction as a share of the policy's gain of one node (default 0.2: emptying a "
                        "node is worth up to 4 evictions)")
    p.add_argument("--time-limit", type=float, help="solver seconds (default KSO_SOLVER_TIME_LIMIT_S)")
    p.add_argument("--workers", type=int, help="solver workers (default KSO_SOLVER_WORKERS)")
    p.add_argument("--plan-namespace", metavar="NS",
                   help="namespace of ConfigMap kso-plan (default: this pod's namespace, else kso-system)")
    p.add_argument("--config", metavar="PATH", help="settings file (YAML/JSON of setting names; env wins)")
    p.add_argument("--all-nodes", action="store_true", help="list every node in the per-node table, not only changed ones")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_reoptimize)


# ---- output --------------------------------------------------------------------------------------
def _pct(v: float) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{100 * v:.0f}%"


def _why(move: Any, result: Any, by_node: dict[str, Any]) -> str:
    src = by_node.get(move.from_node)
    if move.reason == "risk" and src is not None:
        return f"risk: {move.from_node} P(util>U*) {_pct(src.risk_before)} > eps {_pct(result.eps)}"
    if src is not None and src.in_use_before and not src.in_use_after:
        return f"policy ({result.policy}): empties {move.from_node}"
    return f"policy ({result.policy})"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def report_lines(result: Any, *, all_nodes: bool = False) -> list[str]:
    by_node = {n.name: n for n in result.nodes}
    lines = []
    if result.moves:
        rows = [["POD", "FROM", "TO", "WHY"]]
        rows += [[f"{m.namespace}/{m.pod}", m.from_node, m.to_node, _why(m, result, by_node)] for m in result.moves]
        lines += ["Moves (each evicted pod and the node its replacement is planned on):", *_table(rows)]
    else:
        lines.append("Moves: none")
    lines.append("")
    shown = [n for n in result.nodes if all_nodes or n.moved_in or n.moved_out or n.over_before or n.over_after]
    if shown:
        rows = [["NODE", "PODS", "CPU MEAN", "MEM MEAN", "RISK", "STATE"]]
        for n in shown:
            state = ("over" if n.over_before else "ok") + " -> " + ("over" if n.over_after else "ok")
            if n.in_use_before and not n.in_use_after:
                state += ", emptied"
            rows.append([n.name, f"{n.pods_before} -> {n.pods_after}",
                         f"{_pct(n.mean_before['cpu'])} -> {_pct(n.mean_after['cpu'])}",
                         f"{_pct(n.mean_before['memory'])} -> {_pct(n.mean_after['memory'])}",
                         f"{_pct(n.risk_before)} -> {_pct(n.risk_after)}", state])
        lines += ["Expected per node, before -> after (mean load / allocatable; risk = P(util > U*), exact rule):",
                  *_table(rows)]
        rest = len(result.nodes) - len(shown)
        if rest:
            lines.append(f"({rest} other nodes unchanged and under their safe bound; --all-nodes lists them)")
    if result.plan.classes:
        lines += ["", "Target plan (slots the replacement pods are sent to):"]
        rows = [["CLASS", "SLOTS"]]
        for key, c in sorted(result.plan.classes.items()):
            rows.append([key, ", ".join(f"{n}: {k}" for n, k in sorted(c.slots.items()))])
        lines += _table(rows)
    return lines


def _json(result: Any, skipped: Counter[str], load_from: str, source: str, execution: Execution | None,
          budgets: tuple[Any, ...] = ()) -> bytes:
    doc: dict[str, Any] = {
        "dryRun": execution is None, "cluster": source, "loadFrom": load_from, "policy": result.policy,
        "uStar": result.u_star, "eps": result.eps, "status": result.status, "solveSeconds": result.wall_s,
        "candidates": result.candidates, "notMovable": dict(skipped), "notes": result.notes,
        "moves": [{"pod": m.pod, "namespace": m.namespace, "from": m.from_node, "to": m.to_node, "reason": m.reason,
                   "class": m.class_key} for m in result.moves],
        "nodes": [{"name": n.name, "podsBefore": n.pods_before, "podsAfter": n.pods_after, "meanBefore": n.mean_before,
                   "meanAfter": n.mean_after, "riskBefore": n.risk_before, "riskAfter": n.risk_after,
                   "overBefore": n.over_before, "overAfter": n.over_after, "inUseBefore": n.in_use_before,
                   "inUseAfter": n.in_use_after} for n in result.nodes],
        "plan": result.plan.to_dict(),
        "disruptionBudgets": [{"name": b.name, "disruptionsAllowed": b.allowed, "movablePods": len(b.pods),
                               "moves": sum(m.uid in b.pods for m in result.moves)} for b in budgets],
    }
    if execution is not None:
        doc["evictions"] = [{"pod": o.move.pod, "namespace": o.move.namespace, "evicted": o.evicted, "detail": o.detail,
                             "status": o.status} for o in execution.outcomes]
        doc["published"] = execution.published
        doc["errors"] = execution.publish_errors + execution.event_errors
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)


# ---- the command ---------------------------------------------------------------------------------
def _options(args: argparse.Namespace) -> tuple[Any, Any]:
    from optimizer.reoptimize.migration import MigrationOptions, MoveLimits
    from optimizer.settings import PlanSettings

    if args.config and not Path(args.config).is_file():
        raise InputError(f"--config {args.config}: no such file")
    settings = load_settings(PlanSettings, None, read_config_file(args.config))
    for flag in ("max_moves", "max_per_node", "max_per_namespace", "workers"):
        value = getattr(args, flag)
        if value is not None and value < (1 if flag == "workers" else 0):
            raise InputError(f"--{flag.replace('_', '-')} must be >= {1 if flag == 'workers' else 0}, got {value}")
    if args.time_limit is not None and not args.time_limit > 0:
        raise InputError(f"--time-limit must be > 0, got {args.time_limit}")
    if not (math.isfinite(args.eviction_deadline) and args.eviction_deadline >= 0):
        raise InputError(f"--eviction-deadline must be a number of seconds >= 0, got {args.eviction_deadline}")
    if not (math.isfinite(args.move_cost) and args.move_cost >= 0):
        raise InputError(f"--move-cost must be a number >= 0, got {args.move_cost}")
    options = MigrationOptions(
        policy=args.policy or settings.policy_name, move_cost=args.move_cost,
        limits=MoveLimits(args.max_moves, args.max_per_node, args.max_per_namespace),
        time_limit_s=args.time_limit or settings.time_limit_s, workers=args.workers or settings.workers)
    return settings, options


def _load_cluster(args: argparse.Namespace) -> RawCluster:
    if (args.snapshot or args.demo) and args.execute:
        raise InputError("--execute needs the API server: a snapshot or the demo cluster can only be dry-run")
    cluster = load_cluster(cluster_source(args))
    for line in cluster.skipped:
        print(f"kso reoptimize: {line}", file=sys.stderr)
    return cluster


def _load(args: argparse.Namespace, cluster: RawCluster) -> tuple[Any, float | None, str, dict[str, Any]]:
    """(node forecasts, their "now", where the load comes from, each workload class's measured usage). A source a
    flag names that fails is an error; the settings' Prometheus that fails leaves the nodes on their annotations
    (said on stderr and in the load source), as kso extender does while Prometheus is away."""
    from optimizer.plan.cluster_problem import class_usage_from_prometheus

    request = forecast_request(args)
    forecasts, now, load_from, request = node_forecasts_or_settings(
        request, cluster.state.node_names(), args.config, lambda line: print(f"kso reoptimize: {line}", file=sys.stderr))
    if not request.prometheus:
        return forecasts, now, load_from, {}
    # A moved pod's relief and load are its class's measured usage where known (as kso plan counts them)
    from forecasting.prometheus import PrometheusSettings

    prometheus = load_settings(PrometheusSettings, None, read_config_file(args.config))
    usage, note = class_usage_from_prometheus(dataclasses.replace(prometheus, url=request.prometheus),
                                              cluster.state.bound_pods())
    return forecasts, now, f"{load_from}; {note}", usage


def cmd_reoptimize(args: argparse.Namespace) -> int:
    from optimizer.plan.protected_solver import ProtectedSolver
    from optimizer.reoptimize.migration import plan_migration

    try:
        settings, options = _options(args)
        cluster = _load_cluster(args)
        forecasts, now, load_from, class_usage = _load(args, cluster)
    except InputError as exc:
        print(f"kso reoptimize: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    movable, skipped = movable_pods(cluster, EligibilityArgs.from_flag(args.exclude_namespaces))
    if cluster.api_client is not None:
        try:
            budgets = read_budgets(cluster.api_client)
        except InputError as exc:
            print(f"kso reoptimize: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        limits, movable, under_two = disruption_limits(budgets, cluster, movable)
        options.limits.budgets = tuple(limits)
        if under_two:
            skipped[MULTIPLE_BUDGETS] += under_two
    # The CP-SAT solve runs in the protected child (seed retry, wall-clock limit), as for kso plan.
    solver = ProtectedSolver(on_crash=lambda note: print(f"kso reoptimize: {note}", file=sys.stderr))
    result = plan_migration(cluster.state, forecasts, settings.u_star, settings.eps, movable, options,
                            class_usage=class_usage, cost_key=settings.cost_key, now=now, solver=solver)
    execution = None
    if args.execute:
        execution = _execute_published(cluster, result, options.limits, plan_namespace(args.plan_namespace),
                                       settings.plan_file, args.eviction_deadline)
        if execution is None:
            return EXIT_CONFIG
    if args.json:
        sys.stdout.write(_json(result, skipped, load_from, cluster.source, execution, options.limits.budgets).decode() + "\n")
        if execution is not None:
            _print_errors(execution)
    else:
        _print_text(args, result, skipped, load_from, cluster, execution, options.limits.budgets)
    if execution is not None and execution.failed:
        return EXIT_EVICTIONS_FAILED
    return EXIT_OK


def _execute_published(cluster: RawCluster, result: Any, limits: Any, namespace: str, plan_file: str,
                       deadline_s: float) -> Execution | None:
    """Publish every move's target, then evict, then publish the targets of the moves carried out with
    each move's state. A run killed between two evictions leaves the first plan behind, so the replacement
    pods still land where the plan says. None (nothing evicted) when the plan could not be published
    anywhere: an evicted pod without its target is the failure this order prevents."""
    if not result.moves:
        return execute(cluster, result, limits, deadline_s)
    before = Execution()
    publish(result.plan, cluster.api_client, namespace, plan_file, before, move_states(result.moves, None))
    if not before.published:
        for e in before.publish_errors:
            print(f"kso reoptimize: could not publish the plan: {e}", file=sys.stderr)
        print("kso reoptimize: nothing was evicted: the targets must be published before the first eviction",
              file=sys.stderr)
        return None
    execution = execute(cluster, result, limits, deadline_s)
    done = [o.move for o in execution.outcomes if o.evicted]
    publish(result.plan_for(done), cluster.api_client, namespace, plan_file, execution,
            move_states(result.moves, execution))
    execution.publish_errors += [e for e in before.publish_errors if e not in execution.publish_errors]
    return execution


def _print_text(args: argparse.Namespace, result: Any, skipped: Counter[str], load_from: str, cluster: RawCluster,
                execution: Execution | None, budgets: tuple[Any, ...] = ()) -> None:
    state = cluster.state
    mode = "EXECUTE" if execution is not None else "DRY-RUN: nothing is evicted (add --execute to act)"
    print(f"kso reoptimize: {mode}")
    print(f"cluster: {cluster.source}; {len(state.node_names())} nodes, {len(state.pods)} bound pods, "
          f"{result.candidates} movable")
    print(f"load from: {load_from}")
    print(f"policy {result.policy}, U* {_pct(result.u_star)}, eps {_pct(result.eps)}, move cost {args.move_cost:g}; "
          f"limits: {_limits(args)}")
    if budgets:
        print("disruption budgets (moves planned / allowed now): " + ", ".join(
            f"{b.name} {sum(m.uid in b.pods for m in result.moves)}/{b.allowed}" for b in budgets))
    if skipped:
        print("not movable: " + ", ".join(f"{n} {why}" for why, n in skipped.most_common()))
    used = result.nodes_in_use()
    risk = sum(m.reason == "risk" for m in result.moves)
    print(f"solver {result.status} in {result.wall_s:.2f} s: {len(result.moves)} moves ({risk} risk, "
          f"{len(result.moves) - risk} policy); nodes over their safe bound {len(result.over_before)} -> "
          f"{len(result.over_after)}; nodes in use {used[0]} -> {used[1]}")
    for note in result.notes:
        print(f"  note: {note}")
    print()
    for line in report_lines(result, all_nodes=args.all_nodes):
        print(line)
    if execution is None:
        if result.moves:
            print("\nDry-run: no pod was evicted and no plan was published.")
        return
    print("\nEvictions:")
    for o in execution.outcomes:
        print(f"  {o.move.namespace}/{o.move.pod}: {o.detail}")
    if not execution.outcomes:
        print("  none")
    for p in execution.published:
        print(f"plan {execution.plan_id} published: {p}")
    _print_errors(execution)


def _print_errors(execution: Execution) -> None:
    for e in execution.publish_errors:
        print(f"kso reoptimize: could not publish the plan: {e}", file=sys.stderr)
    for e in execution.event_errors:
        print(f"kso reoptimize: {e}", file=sys.stderr)
    for o in execution.failed:
        print(f"kso reoptimize: eviction of {o.move.namespace}/{o.move.pod} failed: {o.detail}", file=sys.stderr)


def _limits(args: argparse.Namespace) -> str:
    def v(x: int | None) -> str:
        return "-" if x is None else str(x)

    return f"total {v(args.max_moves)}, per node {v(args.max_per_node)}, per namespace {v(args.max_per_namespace)}"


