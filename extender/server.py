"""Wiring: choose the cluster source and binder, build the Extender and its app, and serve it."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.config import Config
from extender.plan import PlanCache, PlanSolver
from extender.service import Extender
from kso.cluster import ClusterState
from kso.settings import parse_log_level
from kso.snapshot import load_snapshot
from kso.stats import NodeStatsSource
from optimizer.settings import PlanSettings

log = logging.getLogger("kso.extender")


@dataclass
class Running:
    extender: Extender
    stop: list[Callable[[], Any]] = field(default_factory=list)
    api_client: Any = None  # the kubernetes ApiClient when the cluster source is the API server

    def close(self) -> None:
        for fn in self.stop:
            fn()


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def choose_source(config: Config) -> str:
    s = config.settings
    # Upper-cased here: a value from the environment is normalised by its parser, the default is not.
    source = s.cluster_source.upper()
    if source != "AUTO":
        return source
    if s.snapshot_path:
        return "SNAPSHOT"
    kubeconfig = s.kubeconfig or str(Path.home() / ".kube" / "config")
    if _in_cluster() or Path(kubeconfig).exists():
        return "API"
    log.warning("NO CLUSTER FOUND (not in a pod, no kubeconfig at %s, no KSO_SNAPSHOT): serving the embedded "
                "DEMO cluster, so every real node kube-scheduler asks about is unknown and passed unjudged; "
                "set KSO_CLUSTER_SOURCE=API to insist on an API server", kubeconfig)
    return "DEMO"


def start_forecasts(config: Config) -> tuple[NodeStatsSource, Callable[[], Any]] | None:
    """Forecast-backed statistics, refreshed by an APScheduler job off the request path; None when
    forecasting is off. The first refresh starts at once but nobody waits for it: until it succeeds
    (and whenever forecasts go stale) the safe agent uses the node annotations."""
    env = config.env
    choice = config.settings.forecast_source
    if choice == "NONE" or (choice == "AUTO" and not env.get("KSO_PROMETHEUS_URL")):
        return None
    from datetime import datetime

    from apscheduler.schedulers.background import BackgroundScheduler

    from forecasting.models import DEFAULT_FORECASTER, get_forecaster
    from forecasting.prometheus import PrometheusSettings, PrometheusSource
    from forecasting.stats_source import ForecastStats
    from forecasting.store import ForecastStore, StoreSettings
    from kso.settings import load_settings
    from kso.stats import AnnotationStats

    store = ForecastStore(load_settings(StoreSettings, env))
    source = PrometheusSource(load_settings(PrometheusSettings, env))
    forecaster = get_forecaster(config.settings.forecast_model or DEFAULT_FORECASTER)
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(store.refresh, "interval", seconds=store.settings.refresh_s, args=(source, forecaster),
                      id="forecast-refresh", max_instances=1, coalesce=True, next_run_time=datetime.now())
    scheduler.start()
    log.info("forecasts: %s from %s every %.0f s", forecaster.name, source.settings.url, store.settings.refresh_s)
    return ForecastStats(store, AnnotationStats()), lambda: scheduler.shutdown(wait=False)


def build(config: Config, stats: NodeStatsSource | None = None, state: ClusterState | None = None) -> Running:
    """Create the node cache from the configured source and the Extender on top of it."""
    from kso import kube  # the kubernetes client is only needed here, not by the agents

    problems = config.validate()
    if problems:
        raise SystemExit("kso: bad configuration: " + "; ".join(problems))
    state = ClusterState() if state is None else state
    source = choose_source(config)
    stop: list[Callable[[], Any]] = []
    binder: Any
    client: Any = None
    if source == "API":
        try:
            client = kube.load_api_client(config.settings.kubeconfig or None)
        except kube.KubeConfigError as exc:
            raise SystemExit(f"kso: cannot reach the API server ({exc}); use --snapshot or --demo to run offline") from None
        watcher = kube.ClusterWatcher(state, client)
        watcher.start()
        stop.append(watcher.stop)
        binder = kube.ApiBinder(client)
    else:
        load_snapshot(config.settings.snapshot_path or None if source == "SNAPSHOT" else None, state)
        binder = kube.RecordingBinder()
    log.info("node cache source: %s", source)
    if stats is None:
        started = start_forecasts(config)
        if started is not None:
            stats, stop_forecasts = started
            stop.append(stop_forecasts)
    plan = make_plan_cache(config, state)
    extender = Extender(config, state, binder, stats, plan)
    if plan is not None:
        plan.on_event = lambda kind, detail: extender.metrics.plan_events.labels(kind).inc()
        plan.load_file()  # a restarted extender answers from the last plan at once
    return Running(extender, stop, client)


def make_plan_cache(config: Config, state: ClusterState) -> PlanCache | None:
    from kso.settings import load_settings

    settings = load_settings(PlanSettings, config.env)
    if settings.policy_name == "none":
        return None
    return PlanCache(settings, state)


def start_plan_jobs(running: Running, solve: bool = True, first_solve_delay_s: float = 2.0) -> None:
    """Background plan work (APScheduler): reload the plan file when it changes, reconcile taken slots,
    and re-solve in a separate process every KSO_PLAN_INTERVAL_S or when the cluster changed enough."""
    from datetime import datetime, timedelta

    from apscheduler.schedulers.background import BackgroundScheduler

    extender = running.extender
    cache = extender.plan
    if cache is None:
        return
    scheduler = BackgroundScheduler(daemon=True)
    scheduler.add_job(cache.load_file, "interval", seconds=10, id="plan-file", max_instances=1, coalesce=True)
    scheduler.add_job(cache.reconcile, "interval", seconds=5, id="plan-reconcile", max_instances=1, coalesce=True)
    ns, _, name = cache.settings.configmap.partition("/")
    if running.api_client is not None and ns and name:
        # kso reoptimize --execute publishes where the pods it evicted should land.
        scheduler.add_job(cache.poll_configmap, "interval", seconds=15, args=(running.api_client, ns, name),
                          id="plan-configmap", max_instances=1, coalesce=True, next_run_time=datetime.now())
    if solve:
        store = getattr(extender.agents.get("safe"), "stats", None)
        store = getattr(store, "store", None)

        def solved(result: str, seconds: float) -> None:
            extender.metrics.plan_solves.labels(result).inc()
            extender.metrics.plan_solve_seconds.observe(seconds)

        solver = PlanSolver(cache, (lambda: store.snapshot()) if store is not None else None, solved)

        def tick() -> None:
            if extender.state.synced:  # never plan on a half-listed cluster
                solver.maybe_solve()

        scheduler.add_job(tick, "interval", seconds=15, id="plan-solve", max_instances=1, coalesce=True,
                          next_run_time=datetime.now() + timedelta(seconds=first_solve_delay_s))
        running.stop.append(solver.close)
    scheduler.start()
    running.stop.append(lambda: scheduler.shutdown(wait=False))
    log.info("plan: policy %s, file %s, re-solve every %.0f s", cache.settings.policy_name,
             cache.settings.plan_file or "(memory only)", cache.settings.interval_s)


def uvicorn_level(level: int) -> str:
    for limit, name in ((logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.WARNING, "warning"),
                        (logging.ERROR, "error")):
        if level <= limit:
            return name
    return "critical"


def serve(config: Config) -> None:
    import uvicorn

    from extender.app import create_app

    level = parse_log_level(config.settings.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    running = build(config)
    start_plan_jobs(running)
    app = create_app(running.extender)
    # The node cache is long-lived: move it out of the collector's reach and collect young objects
    # less often. Parsing one full-nodes body creates ~160k containers; with default thresholds that
    # triggers repeated full collections over the cache (measured: 92 ms -> 21 ms per 500-node parse).
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        uvicorn.run(app, host=config.settings.host, port=config.settings.http_port,
                    log_level=uvicorn_level(level), access_log=False, loop="uvloop", http="httptools")
    finally:
        running.close()
