"""The one plan pipeline: problem -> compiled -> (protected) solve -> plan, as ``plan_cluster``; and
``plan_once``, what ``kso plan`` does with it: read the cluster and its load, plan, write the plan file.

Every caller solves through ``plan_cluster``: ``kso plan`` (plan_once), the extender's background re-solve
(extender.plan_cache.PlanSolver), the solver benchmark's generated clusters and the trace replay's plan
policy. With a ProtectedSolver the solve runs in its child process (seed retry, wall-clock limit, the
first-fit-decreasing fallback held to the exact bound); without one it runs here, for callers that
already are such a child or a worker of their own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from forecasting.forecast_source import ForecastRequest, node_forecasts, node_forecasts_or_settings
from kso.core.cluster_source import ClusterSource, load_cluster
from kso.core.settings import load_settings, read_config_file
from optimizer.plan.compiled import Compiled, SolveResult, SolverOptions, compile_problem
from optimizer.plan.placement_plan import PlacementPlan, plan_from_result, write_plan
from optimizer.plan.problem import PlacementProblem

if TYPE_CHECKING:
    from kso.core.cluster import ClusterState
    from optimizer.plan.protected_solver import ProtectedSolver

DEFAULT_PLAN_FILE = "kso-plan.json"


@dataclass
class PlannedCluster:
    """A plan and what it was made from: the problem, its compiled form and the solver's result."""

    problem: PlacementProblem
    comp: Compiled
    result: SolveResult
    plan: PlacementPlan


def plan_cluster(problem: PlacementProblem, options: SolverOptions, solver: ProtectedSolver | None = None) -> PlannedCluster:
    """Compile ``problem``, solve it (in ``solver``'s child process, else in this process) and make the plan."""
    from optimizer.plan.model import solve

    comp = compile_problem(problem)
    result = solver.solve_plan(problem, options, comp) if solver is not None else solve(problem, options, comp)
    return PlannedCluster(problem, comp, result, plan_from_result(problem, comp, result, options.policy))


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What ``kso plan`` is asked: the cluster and its load, or (``openb``: nodes, pods) the openb trace
    sampled with ``seed``; the policy, solver seconds and workers (None = the settings'), the plan file
    (None = KSO_PLAN_FILE, else ./kso-plan.json) and the settings file."""

    cluster: ClusterSource = field(default_factory=ClusterSource)
    forecast: ForecastRequest = field(default_factory=ForecastRequest)
    openb: tuple[int, int] | None = None
    seed: int = 0
    policy: str | None = None
    time_limit_s: float | None = None
    workers: int | None = None
    out: str | None = None
    config: str | None = None


@dataclass
class PlanReport:
    """What ``plan_once`` did: the plan (with its problem and solve), where the load came from, the plan
    file and the seconds from the problem to the written plan."""

    planned: PlannedCluster
    policy: str
    load_from: str
    out: str
    wall_s: float

    def summary(self) -> dict[str, Any]:
        problem, result = self.planned.problem, self.planned.result
        return {**self.planned.plan.summary(), "nodes_over_safe_bound": result.violations, "wall_s": round(self.wall_s, 2),
                "first_feasible_s": result.first_feasible_s, "load_from": self.load_from, "plan_file": self.out,
                "u_star": problem.u_star, "eps": problem.eps, "notes": result.notes}


def plan_once(request: PlanRequest, say: Callable[[str], None], abort_attempts: int = 0) -> PlanReport:
    """Read the inputs, plan through the protected solve, write the plan file. ``say`` gets what the user
    should know on the way (objects skipped, a solver process that died); an unusable input, a forecast
    source that fails included, raises InputError. ``abort_attempts``: the ProtectedSolver test hook (the
    first N solver processes die)."""
    from optimizer.plan.protected_solver import ProtectedSolver
    from optimizer.settings import PlanSettings

    settings = load_settings(PlanSettings, None, read_config_file(request.config))
    options = settings.solver_options()
    if request.policy:
        options.policy = request.policy
    if options.policy == "none":
        options.policy = "binpack"
    if request.time_limit_s:
        options.time_limit_s = request.time_limit_s
    if request.workers:
        options.workers = request.workers
    if request.openb is not None:
        from optimizer.plan.openb import SOURCES, USAGE_LABEL, openb_problem

        n_nodes, n_pods = request.openb
        problem = openb_problem(n_nodes, n_pods, seed=request.seed, u_star=settings.u_star, eps=settings.eps)
        load_from = f"{SOURCES}; {USAGE_LABEL}"
    else:
        problem, load_from = _cluster_problem(request, settings, say)
    t0 = time.perf_counter()
    # The solve runs in a child process: an OR-Tools abort (google/or-tools#5288) ends only that process.
    solver = ProtectedSolver(retries=1, on_crash=say, abort_attempts=abort_attempts)
    planned = plan_cluster(problem, options, solver)
    out = request.out or settings.plan_file or DEFAULT_PLAN_FILE
    write_plan(planned.plan, out)
    return PlanReport(planned, options.policy, load_from, out, time.perf_counter() - t0)


def _cluster_problem(request: PlanRequest, settings: Any, say: Callable[[str], None]) -> tuple[PlacementProblem, str]:
    """The problem of the cluster's pending pods with its nodes' load, and where the load comes from."""
    from optimizer.plan.cluster_problem import problem_from_state

    cluster = load_cluster(request.cluster)
    for line in cluster.skipped:
        say(line)
    state = cluster.state
    # A source the user named that fails is an error (InputError), never a silent fall back to the annotations. A
    # live cluster without one is read as kso extender reads it: the Prometheus of kso's settings where set.
    if request.cluster.snapshot or request.cluster.demo:
        forecasts, now, load_from = node_forecasts(request.forecast, state.node_names())
    else:
        forecasts, now, load_from, used = node_forecasts_or_settings(request.forecast, state.node_names(),
                                                                     request.config, say)
        request = replace(request, forecast=used)
    class_usage, usage_from = _class_usage(request, state, say)
    load_from += usage_from
    problem = problem_from_state(state, forecasts, settings.u_star, settings.eps, cost_key=settings.cost_key, now=now,
                                 scheduler_names=settings.scheduler_names, class_usage=class_usage)
    if forecasts and not any(n.load and all(math.isfinite(v.mean) for v in n.load.values()) for n in problem.nodes):
        load_from += " (no usable forecast: annotations/requests used)"
    return problem, load_from


def _class_usage(request: PlanRequest, state: ClusterState, say: Callable[[str], None]) -> tuple[dict[str, Any], str]:
    """Each workload class's usage from its running pods' series in Prometheus (optimizer.plan.cluster_problem)."""
    if not request.forecast.prometheus:
        return {}, ""
    from forecasting.prometheus import PrometheusSettings
    from optimizer.plan.cluster_problem import class_usage_from_prometheus

    # timeouts and queries: env over the settings file
    settings = load_settings(PrometheusSettings, None, read_config_file(request.config))
    usage, note = class_usage_from_prometheus(replace(settings, url=request.forecast.prometheus), state.bound_pods())
    if not usage and "failed" in note:
        say(note)
    return usage, f"; {note}"
