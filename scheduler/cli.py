"""``kso scheduler``: wiring (cache, agents, binder, events, debug port, leader election) and the subcommand."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from decisions.recent import recent_bind_hold_s
from extender.config import Config, load_config
from kso.core.cluster import ClusterState
from kso.core.settings import ConfigError, check_dns_name
from scheduler.core import Scheduler, SchedulerSettings
from scheduler.qos import ORDERS

if TYPE_CHECKING:
    from decisions.engine import DecisionEngine
    from kso.core.capacity import CapacitySettings

log = logging.getLogger("kso.scheduler")
DEFAULT_NAME = "kso"


@dataclass
class SchedulerConfig:
    """Everything ``kso scheduler`` is configured by, read in one place (``load_scheduler_config``: the
    environment over the ``--config`` file): the extender's config (agents, weights, plan, Prometheus,
    LOG_LEVEL) and the scheduler's own settings."""

    extender: Config
    scheduler: SchedulerSettings


def load_scheduler_config(env: Mapping[str, str] | None = None, config_file: str | None = None) -> SchedulerConfig:
    config = load_config(env, config_file)
    return SchedulerConfig(config, config.load(SchedulerSettings))


@dataclass
class RunningScheduler:
    scheduler: Scheduler
    watcher: Any
    elector: Any = None
    debug: Any = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    stops: list[Callable[[], Any]] = field(default_factory=list)
    thread: threading.Thread | None = None
    # The plan's background jobs (reload, reconcile, re-solve) while this replica leads, else None: a standby
    # replica neither solves nor polls.
    leader_jobs: Any = None
    # The capacity signal (KSO_CAPACITY_SIGNAL, decisions.capacity), run while this replica leads: only the
    # leader judges pods, so only its refusals exist to show.
    capacity: Any = None
    # Where the safe agent's load data comes from, the forecasts' age and failed refreshes
    # (decisions.forecasts.ForecastHealth): /metrics and the status page; None without forecasts.
    forecast_health: Any = None

    @property
    def debug_port(self) -> int:
        return int(self.debug.server_address[1]) if self.debug is not None else 0

    def close(self) -> None:
        self.stop_event.set()
        if self.elector is not None:
            self.elector.stop()
        if self.thread is not None:
            self.thread.join(5)
        if self.capacity is not None:  # the leader-election thread stops it too; the first stop deletes
            self.capacity.stop()
        self.scheduler.close()
        for fn in reversed(self.stops):
            fn()


def with_cost_agent(config: Config, weight: int) -> Config:
    """The extender's agents and weights, plus the cost agent at ``weight`` unless KSO_AGENTS/KSO_WEIGHTS say otherwise."""
    s = config.settings
    if weight > 0 and "cost" not in s.weights:
        s.weights = {**s.weights, "cost": weight}
    if "cost" in s.weights and "cost" not in s.agents:
        s.agents = [*s.agents, "cost"]
    return config


def _check(config: SchedulerConfig, names: list[str], address: str, leader_elect: bool) -> None:
    """Bad settings fail here, before any thread starts."""
    from scheduler.debug import parse_address

    if address:
        parse_address(address)
    lease = config.scheduler.lease
    if leader_elect and lease and not all(lease.partition("/")[::2]):
        raise ValueError(f"KSO_SCHEDULER_LEASE={lease!r} is not namespace/name")
    capacity = config.extender.capacity
    if capacity.enabled and capacity.scheduler_name in names:
        # Not for want of the condition (kso scheduler marks a pod it cannot place PodScheduled=False/Unschedulable,
        # as kube-scheduler does). A placeholder stands for a pod this scheduler already refused, shaped so that
        # kube-scheduler's rules alone (what the cluster-autoscaler simulates) keep it pending until a node is
        # added: served here, it would be judged again by kso's agents (the safe agent could keep it off the very
        # node added for it, and the autoscaler would go on adding nodes), and it would join the queue, the QoS
        # table and the plan, which covers every pod of the names served, as demand of its own.
        raise ValueError(f"KSO_CAPACITY_SCHEDULER_NAME={capacity.scheduler_name!r} is a name this scheduler serves: "
                         "the placeholders stand for pods it refused and must never be bound (leave it at its "
                         "default, a name no scheduler serves)")


def _check_lease_access(client: Any, lease: str) -> None:
    """ConfigError when this identity may not use the Lease KSO_SCHEDULER_LEASE names (the API server's authorizer
    says so): it would only retry on 403s, never leading."""
    from scheduler.leader import lease_refusals

    namespace, _, name = lease.partition("/")
    refused = lease_refusals(client, namespace, name)
    if refused:
        raise ConfigError(f"KSO_SCHEDULER_LEASE={lease!r}: this identity may not {', '.join(refused)} that Lease (the "
                          "API server's authorizer says so), so it would never lead. deploy/scheduler-standalone/"
                          "rbac.yaml grants kso-system/kso-standalone-scheduler: set KSO_SCHEDULER_LEASE to it, or "
                          "grant get, create and update on leases there")


def check_names(names: list[str]) -> None:
    """ConfigError for a scheduler name a Pod's spec.schedulerName cannot hold (an empty one included)."""
    for name in names:
        try:
            check_dns_name(name, "dns-subdomain")
        except ValueError as exc:
            raise ConfigError(f"--name {name!r}: {exc} (a Pod's spec.schedulerName)") from None


def _engine(config: SchedulerConfig, names: list[str], state: ClusterState,
            stops: list[Callable[[], Any]]) -> DecisionEngine:
    """The decision engine (the extender's agents, forecasts and plan cache), scoring for this scheduler (the
    plan's jobs start on leading: ``lead_plan``)."""
    from decisions.engine import DecisionEngine
    from decisions.forecasts import start_forecasts
    from extender.plan_jobs import make_plan_cache

    ext = with_cost_agent(config.extender, config.scheduler.cost_weight)
    problems = ext.validate()
    if problems:
        raise SystemExit("kso scheduler: bad configuration: " + "; ".join(problems))
    started = start_forecasts(ext)
    stats = None
    if started is not None:
        stats, stop_forecasts = started
        stops.append(stop_forecasts)
    plan = make_plan_cache(ext, state)
    if plan is not None:
        # The plan covers the pods this scheduler serves, whatever KSO_SCHEDULER_NAMES (the extender's
        # kube-scheduler profiles, set by deploy/settings.yaml) says.
        plan.settings = replace(plan.settings, scheduler_names=list(names))
        plan.load_file()
    return DecisionEngine(ext, state, stats, plan)


def lead_plan(engine: DecisionEngine | None, client: Any) -> Any:
    """Start the plan's background jobs (extender.plan_jobs.start_plan_jobs) for one term as leader; the
    returned object's ``close`` stops them. None when there is no plan."""
    from extender.plan_jobs import start_plan_jobs

    if engine is None:
        return None
    return start_plan_jobs(engine, client)


def start(names: list[str], *, config: SchedulerConfig | None = None, env: Mapping[str, str] | None = None,
          config_file: str | None = None, kubeconfig: str | None = None, seed_compatible: bool = False,
          order: str | None = None, debug_address: str | None = None, leader_elect: bool = True, identity: str = "",
          on_lost: Callable[[], None] | None = None, sync_timeout_s: float | None = None,
          api_client: Any = None) -> RunningScheduler:
    """Start a scheduler in background threads (tests and benchmarks call this; the CLI waits on it).

    ``config``: read by load_scheduler_config(env, config_file) when not given. ``sync_timeout_s``: how long to
    wait for the first list of nodes and pods before scheduling from what is listed so far (default
    ``KSO_CACHE_SYNC_TIMEOUT_S``)."""
    from kso.core import kube
    from kso.core.binder import ApiBinder
    from scheduler.debug import debug_server
    from scheduler.events import ApiEvents
    from scheduler.informer import SchedulerWatcher
    from scheduler.status import ApiPodStatus

    config = config or load_scheduler_config(env, config_file)
    settings = replace(config.scheduler, order=order.upper()) if order else config.scheduler
    # The capacity signal's identity: KSO_CAPACITY_IDENTITY, else the one given here (deploy/: the pod's name, which
    # a restarted container keeps, so it finds what it left), else the host name (kso.core.capacity).
    capacity_settings = config.extender.capacity
    if capacity_settings.enabled and identity and not capacity_settings.identity:
        capacity_settings = replace(capacity_settings, identity=identity)
    identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    address = settings.debug_address if debug_address is None else debug_address
    _check(config, names, address, leader_elect)
    client = api_client or kube.load_api_client(kubeconfig or config.extender.settings.kubeconfig or None)
    if leader_elect and settings.lease:
        _check_lease_access(client, settings.lease)
    state = ClusterState(pending_pod_memory=1_000_000)
    state.recent_window_s = recent_bind_hold_s(config.extender)
    watcher = SchedulerWatcher(state, client, names=tuple(names), controller_key=settings.controller_key,
                               slo_key=settings.slo_key, relist_s=settings.relist_s)
    stops: list[Callable[[], Any]] = [watcher.stop]
    watcher.start()
    wait_s = config.extender.settings.cache_sync_timeout_s if sync_timeout_s is None else sync_timeout_s
    if not watcher.wait_synced(wait_s):
        log.warning("cache not synced after %g s (KSO_CACHE_SYNC_TIMEOUT_S); scheduling from what is listed so far", wait_s)
    binder = ApiBinder(client)  # pods/<name>/binding with the uid precondition, as kube-scheduler
    try:
        engine = None if seed_compatible else _engine(config, names, state, stops)
        events = ApiEvents(client, component=names[0], instance=identity)
        scheduler = Scheduler(names, settings, state, watcher, binder, events, engine, seed_compatible=seed_compatible,
                              status=ApiPodStatus(client))
        out = RunningScheduler(scheduler, watcher, stops=stops)
        out.forecast_health = _forecast_health(engine, state, config, scheduler)
        if capacity_settings.enabled:  # exits when the agents have no safe agent
            out.capacity = _capacity(engine, state, client, capacity_settings, scheduler)
    except BaseException:
        for fn in reversed(stops):
            fn()
        raise
    if address:
        out.debug = debug_server(address, scheduler.qos_table, scheduler.metrics, lambda: status(out, identity))
        stops.append(out.debug.shutdown)
    _run(out, settings, client, identity, leader_elect, on_lost)
    return out


def _forecast_health(engine: DecisionEngine | None, state: ClusterState, config: SchedulerConfig,
                     scheduler: Scheduler) -> Any:
    """The forecasts' health (decisions.forecasts.ForecastHealth) on the scheduler's /metrics, with the gauges the
    extender's engine registry has of its own (last success, age, failures in a row); None without forecasts."""
    from decisions.forecasts import forecast_health

    prometheus = config.extender.prometheus
    health = forecast_health(engine, state, prometheus.url if prometheus is not None else "")
    if health is not None:
        health.register(scheduler.metrics.registry, basics=True)
    return health


def _capacity(engine: DecisionEngine | None, state: ClusterState, client: Any, settings: CapacitySettings,
              scheduler: Scheduler) -> Any:
    """The capacity signal, as ``kso extender`` runs it (decisions.capacity.capacity_signal), its gauges on the
    scheduler's /metrics; started while leading (``_run``)."""
    from decisions.capacity import capacity_signal

    if engine is None:
        log.warning("KSO_CAPACITY_SIGNAL is on but --seed-compatible judges no pod with the safe agent: "
                    "no capacity signal")
        return None
    return capacity_signal(engine, state, client, settings, registry=scheduler.metrics.registry)


def _run(out: RunningScheduler, settings: SchedulerSettings, client: Any, identity: str, leader_elect: bool,
         on_lost: Callable[[], None] | None) -> None:
    """Schedule while leading (the Lease, unless ``leader_elect`` is off or KSO_SCHEDULER_LEASE is empty)."""
    from scheduler.leader import LeaderElector

    scheduler = out.scheduler

    def lead(stop: threading.Event) -> None:
        scheduler.metrics.leader.set(1)
        out.leader_jobs = lead_plan(scheduler.engine, client)
        if out.capacity is not None:
            out.capacity.start()
        try:
            both = threading.Event()
            threading.Thread(target=lambda: (stop.wait(), both.set()), daemon=True).start()
            threading.Thread(target=lambda: (out.stop_event.wait(), both.set()), daemon=True).start()
            scheduler.run(both)
        finally:
            if out.capacity is not None:
                out.capacity.stop()
            jobs, out.leader_jobs = out.leader_jobs, None
            if jobs is not None:
                jobs.close()
            scheduler.metrics.leader.set(0)

    if leader_elect and settings.lease:
        lost = on_lost or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        out.elector = LeaderElector(client, settings.lease, identity, lead, lost,
                                    lease_duration_s=settings.lease_duration_s, renew_deadline_s=settings.renew_deadline_s,
                                    retry_period_s=settings.retry_period_s)
        out.elector.start()
    else:
        out.thread = threading.Thread(target=lead, args=(out.stop_event,), name="kso-scheduler", daemon=True)
        out.thread.start()


def status(running: RunningScheduler, identity: str) -> dict[str, Any]:
    s = running.scheduler
    return {"identity": identity, "leader": running.elector.leading.is_set() if running.elector else True,
            "names": sorted(s.names), "order": s.order, "seed_compatible": s.seed_compatible,
            "decisions": s.decisions, "queue": len(s.queue), "backoff": len(s.backoff), "cache": running.watcher.stats(),
            "forecasts": running.forecast_health.snapshot() if running.forecast_health is not None else None}


def cmd_scheduler(args: argparse.Namespace) -> int:
    from kso.core.logs import configure_logging

    env = dict(os.environ)
    if getattr(args, "log_format", None):
        env["KSO_LOG_FORMAT"] = args.log_format
    config = load_scheduler_config(env, args.config)  # a bad file or value: ConfigError (kso.cli prints it)
    # As `kso extender`: LOG_LEVEL (environment or --config) sets kso's own loggers, not the libraries'.
    logs = config.extender.logs
    configure_logging(logs.level_number, logs.format)
    names = (config.scheduler.names or [DEFAULT_NAME]) if args.name is None else args.name
    check_names(names)  # `--name ""`: a ConfigError (kso.cli prints it, exit 2)
    done = threading.Event()
    lost: list[bool] = []

    def on_lost() -> None:  # kube-scheduler exits when it loses its lease; the Deployment restarts it
        lost.append(True)
        done.set()

    try:
        running = start(names, config=config, kubeconfig=args.kubeconfig, seed_compatible=args.seed_compatible,
                        order=args.order, debug_address=args.debug_address, leader_elect=not args.no_leader_elect,
                        identity=args.identity or "", on_lost=on_lost)
    except ConfigError:  # a Lease this identity may not use: kso.cli prints it, exit 2
        raise
    except Exception as exc:  # KubeConfigError, a bad lease name or debug address: one line on stderr, exit 1
        print(f"kso scheduler: {exc}", file=sys.stderr)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    # As `kso extender` does (extender.server.serve): the cache is long-lived, so keep it out of the
    # collector's reach and collect young objects less often (full collections stall the scheduling loop).
    gc.collect()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    if running.debug is not None:
        log.info("QoS table on http://%s:%d/ (/json, /metrics)", *running.debug.server_address[:2])
    done.wait()
    running.close()
    return 1 if lost else 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("scheduler", help="run kso as a standalone scheduler for pods whose spec.schedulerName names it")
    p.add_argument("--name", action="append",
                   help=f"scheduler name to serve (repeatable; default KSO_STANDALONE_NAMES or {DEFAULT_NAME})")
    p.add_argument("--seed-compatible", action="store_true",
                   help="Hightower's toy scheduler exactly: cpu fit, cheapest by KSO_PLAN_COST_KEY (hightower.com/cost), "
                        "first on ties")
    p.add_argument("--order", choices=ORDERS, help="queue order (default KSO_SCHEDULER_ORDER or qos)")
    p.add_argument("--debug-address", help="host:port of the QoS table and metrics (default 127.0.0.1:10000; empty = off)")
    p.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--config", help="settings file (YAML/JSON mapping of setting names; env wins)")
    p.add_argument("--identity", help="leader-election identity (default hostname_random)")
    p.add_argument("--no-leader-elect", action="store_true", help="schedule without taking the Lease (one replica only)")
    p.set_defaults(func=cmd_scheduler)
