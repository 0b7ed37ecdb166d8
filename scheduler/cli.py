"""``kso scheduler``: wiring (cache, agents, binder, events, debug port, leader election) and the subcommand."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from extender.config import Config, load_config
from kso.cluster import ClusterState
from kso.settings import load_settings, parse_log_level
from scheduler.core import Scheduler, SchedulerSettings
from scheduler.qos import ORDERS

log = logging.getLogger("kso.scheduler")
DEFAULT_NAME = "kso"


@dataclass
class RunningScheduler:
    scheduler: Scheduler
    watcher: Any
    elector: Any = None
    debug: Any = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    stops: list[Callable[[], Any]] = field(default_factory=list)
    thread: threading.Thread | None = None

    @property
    def debug_port(self) -> int:
        return int(self.debug.server_address[1]) if self.debug is not None else 0

    def close(self) -> None:
        self.stop_event.set()
        if self.elector is not None:
            self.elector.stop()
        if self.thread is not None:
            self.thread.join(5)
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


def start(names: list[str], *, env: Mapping[str, str] | None = None, config_file: str | None = None,
          kubeconfig: str | None = None, seed_compatible: bool = False, order: str | None = None,
          debug_address: str | None = None, leader_elect: bool = True, identity: str = "",
          on_lost: Callable[[], None] | None = None, sync_timeout_s: float | None = None,
          api_client: Any = None) -> RunningScheduler:
    """Start a scheduler in background threads (tests and benchmarks call this; the CLI waits on it).

    ``sync_timeout_s``: how long to wait for the first list of nodes and pods before scheduling from what is
    listed so far (default ``KSO_CACHE_SYNC_TIMEOUT_S``)."""
    from extender.server import Running, make_plan_cache, start_forecasts, start_plan_jobs
    from extender.service import Extender
    from kso import kube
    from scheduler.debug import debug_server, parse_address
    from scheduler.events import ApiEvents
    from scheduler.informer import SchedulerWatcher
    from scheduler.leader import LeaderElector

    env = dict(os.environ if env is None else env)
    config = load_config(env, config_file)
    settings = load_settings(SchedulerSettings, config.env)
    if order:
        settings.order = order.upper()
    identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    address = settings.debug_address if debug_address is None else debug_address
    # Bad settings fail here, before any thread starts.
    if address:
        parse_address(address)
    if leader_elect and settings.lease and not all(settings.lease.partition("/")[::2]):
        raise ValueError(f"KSO_SCHEDULER_LEASE={settings.lease!r} is not namespace/name")
    client = api_client or kube.load_api_client(kubeconfig or config.settings.kubeconfig or None)
    state = ClusterState(pending_pod_memory=1_000_000)
    watcher = SchedulerWatcher(state, client, names=tuple(names), controller_key=settings.controller_key,
                               slo_key=settings.slo_key, relist_s=settings.relist_s)
    stops: list[Callable[[], Any]] = [watcher.stop]
    watcher.start()
    wait_s = config.settings.cache_sync_timeout_s if sync_timeout_s is None else sync_timeout_s
    if not watcher.wait_synced(wait_s):
        log.warning("cache not synced after %g s (KSO_CACHE_SYNC_TIMEOUT_S); scheduling from what is listed so far", wait_s)
    binder = kube.ApiBinder(client)  # pods/<name>/binding with the uid precondition, as kube-scheduler
    extender = None
    if not seed_compatible:
        config = with_cost_agent(config, settings.cost_weight)
        problems = config.validate()
        if problems:
            watcher.stop()
            raise SystemExit("kso scheduler: bad configuration: " + "; ".join(problems))
        started = start_forecasts(config)
        stats = None
        if started is not None:
            stats, stop_forecasts = started
            stops.append(stop_forecasts)
        plan = make_plan_cache(config, state)
        if plan is not None:
            # The plan covers the pods this scheduler serves, whatever KSO_SCHEDULER_NAMES (the extender's
            # kube-scheduler profiles, set by deploy/settings.yaml) says.
            plan.settings = replace(plan.settings, scheduler_names=list(names))
        extender = Extender(config, state, binder, stats, plan)
        if plan is not None:
            plan.load_file()
            running = Running(extender, [], client)
            start_plan_jobs(running)
            stops.extend(running.stop)
    events = ApiEvents(client, component=names[0], instance=identity)
    scheduler = Scheduler(names, settings, state, watcher, binder, events, extender, seed_compatible=seed_compatible)
    out = RunningScheduler(scheduler, watcher, stops=stops)
    if address:
        out.debug = debug_server(address, scheduler.qos_table, scheduler.metrics, lambda: status(out, identity))
        stops.append(out.debug.shutdown)

    def lead(stop: threading.Event) -> None:
        scheduler.metrics.leader.set(1)
        try:
            both = threading.Event()
            threading.Thread(target=lambda: (stop.wait(), both.set()), daemon=True).start()
            threading.Thread(target=lambda: (out.stop_event.wait(), both.set()), daemon=True).start()
            scheduler.run(both)
        finally:
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
    return out


def status(running: RunningScheduler, identity: str) -> dict[str, Any]:
    s = running.scheduler
    return {"identity": identity, "leader": running.elector.leading.is_set() if running.elector else True,
            "names": sorted(s.names), "order": s.order, "seed_compatible": s.seed_compatible,
            "decisions": s.decisions, "queue": len(s.queue), "backoff": len(s.backoff), "cache": running.watcher.stats()}


def cmd_scheduler(args: argparse.Namespace) -> int:
    level = parse_log_level(os.environ.get("LOG_LEVEL"))
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(level)  # kso.cli configured WARNING already; LOG_LEVEL decides here
    # Its own variable: KSO_SCHEDULER_NAMES names the extender's kube-scheduler profiles (deploy/settings.yaml
    # sets kso-scheduler), and a standalone scheduler serving those would race kube-scheduler for its pods.
    names = args.name or [n.strip() for n in os.environ.get("KSO_STANDALONE_NAMES", "").split(",") if n.strip()] or [DEFAULT_NAME]
    done = threading.Event()
    lost: list[bool] = []

    def on_lost() -> None:  # kube-scheduler exits when it loses its lease; the Deployment restarts it
        lost.append(True)
        done.set()

    try:
        running = start(names, config_file=args.config, kubeconfig=args.kubeconfig, seed_compatible=args.seed_compatible,
                        order=args.order, debug_address=args.debug_address, leader_elect=not args.no_leader_elect,
                        identity=args.identity or "", on_lost=on_lost)
    except Exception as exc:  # KubeConfigError, a bad lease name or debug address: one line, exit 1
        if isinstance(exc, SystemExit):
            raise
        print(f"kso scheduler: {exc}")
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
                   help="Hightower's toy scheduler exactly: cpu fit, cheapest hightower.com/cost, first on ties")
    p.add_argument("--order", choices=ORDERS, help="queue order (default KSO_SCHEDULER_ORDER or qos)")
    p.add_argument("--debug-address", help="host:port of the QoS table and metrics (default 127.0.0.1:10000; empty = off)")
    p.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    p.add_argument("--config", help="settings file (YAML/JSON mapping of setting names; env wins)")
    p.add_argument("--identity", help="leader-election identity (default hostname_random)")
    p.add_argument("--no-leader-elect", action="store_true", help="schedule without taking the Lease (one replica only)")
    p.set_defaults(func=cmd_scheduler)
