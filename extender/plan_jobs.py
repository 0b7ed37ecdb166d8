"""The plan's part of a running kso (``kso extender`` and ``kso scheduler`` alike): the plan cache the decision
engine reads, and its background jobs (APScheduler), which live beside the cache they run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from decisions.engine import DecisionEngine
from extender.plan_cache import PlanCache, PlanSolver, prometheus_usage
from kso.core.cluster import ClusterState

log = logging.getLogger("kso.extender")


def make_plan_cache(config: Any, state: ClusterState) -> PlanCache | None:
    """The plan cache of ``config.plan`` (extender.config.Config) over ``state``; None with KSO_PLAN_POLICY=none."""
    if config.plan.policy_name == "none":
        return None
    return PlanCache(config.plan, state)


@dataclass
class PlanJobs:
    """The plan's running jobs: the APScheduler scheduler and the solver child it calls (None: no solving)."""

    scheduler: Any
    solver: PlanSolver | None

    def close(self) -> None:
        # The jobs stop before the solver they call.
        self.scheduler.shutdown(wait=False)
        if self.solver is not None:
            self.solver.close()


class SolveTick:
    """The re-solve job: the solver asked whether to solve, never on a half-listed cluster."""

    def __init__(self, engine: DecisionEngine, solver: PlanSolver) -> None:
        self.engine, self.solver = engine, solver

    def __call__(self) -> None:
        if self.engine.state.synced:
            self.solver.maybe_solve()


class SolveCounter:
    """The solver's report of each solve, counted in the engine's metrics."""

    def __init__(self, engine: DecisionEngine) -> None:
        self.metrics = engine.metrics

    def __call__(self, result: str, seconds: float) -> None:
        self.metrics.plan_solves.labels(result).inc()
        self.metrics.plan_solve_seconds.observe(seconds)


def start_plan_jobs(engine: DecisionEngine, api_client: Any = None, solve: bool = True,
                    first_solve_delay_s: float = 2.0) -> PlanJobs | None:
    """Background plan work (APScheduler) for ``engine.plan``: reload the plan file when it changes, reconcile
    taken slots, poll the ConfigMap ``kso reoptimize --execute`` publishes to (with an ``api_client``), and
    re-solve in a separate process every KSO_PLAN_INTERVAL_S or when the cluster changed enough. None when the
    engine has no plan; else the jobs, whose ``close`` stops them."""
    from datetime import datetime, timedelta

    from apscheduler.schedulers.background import BackgroundScheduler

    cache: Any = engine.plan  # a PlanCache (make_plan_cache's)
    if cache is None:
        return None
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(cache.load_file, "interval", seconds=10, id="plan-file", max_instances=1, coalesce=True)
    scheduler.add_job(cache.reconcile, "interval", seconds=5, id="plan-reconcile", max_instances=1, coalesce=True)
    ns, _, name = cache.settings.configmap.partition("/")
    if api_client is not None and ns and name:
        # kso reoptimize --execute publishes where the pods it evicted should land.
        scheduler.add_job(cache.poll_configmap, "interval", seconds=15, args=(api_client, ns, name),
                          id="plan-configmap", max_instances=1, coalesce=True, next_run_time=datetime.now())
    solver = None
    if solve:
        store = getattr(getattr(engine.agents.get("safe"), "stats", None), "store", None)
        solver = PlanSolver(cache, store.snapshot if store is not None else None, SolveCounter(engine),
                            usage=prometheus_usage(engine.config.prometheus))
        scheduler.add_job(SolveTick(engine, solver), "interval", seconds=15, id="plan-solve", max_instances=1,
                          coalesce=True, next_run_time=datetime.now() + timedelta(seconds=first_solve_delay_s))
    scheduler.start()
    log.info("plan: policy %s, file %s, re-solve every %.0f s", cache.settings.policy_name,
             cache.settings.plan_file or "(memory only)", cache.settings.interval_s)
    return PlanJobs(scheduler, solver)
