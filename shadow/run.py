"""``kso shadow``: the wiring (the extender's configuration, node cache, forecasts and decision engine, kso's schedule
beside the cache (shadow.counterfactual), a watch that sees each bind before applying it, the outcome reads, /metrics,
the report, the records and the saved state). The command line is shadow.cli.

When a bind is judged: at the watch event that first shows the pod with a node, before the node cache applies it
(ShadowWatcher). The cache then holds every bind before this one and not the pod itself: what kso would have known
had it been asked to place the pod at that moment. (Judging when the pod is first seen pending would miss the binds
made between its creation and its bind, which a busy cluster has many of.) Binds seen only in a re-list after a watch
gap are judged on the cache as it was before the re-list, and counted as late.

Bounded memory: at most KSO_SHADOW_QUEUE (512) binds wait to be judged, each with its copy of the node cache's rows
(about 150 bytes a node: 77 MB at 1,000 nodes), KSO_SHADOW_MAX_PENDING judged binds wait for their outcome (a record
is about 1 KiB: 10 MiB at the default 10,000) and ShadowSettings.keep (200) misses and safety changes are kept for the
report; kso's schedule holds a few numbers per judged pod alive and per node; the counts behind the report and the
metrics are numbers.

Outages: the API server's are the watch's (kso.core.watcher: retried with backoff, a re-list after a gap, the cache
serving meanwhile); Prometheus's leave the forecasts to the node annotations (decisions.forecasts) and the
outcome reads waiting: a failed read is logged when the outage starts and ends, and retried every
scrape interval with the records kept.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from extender.bind_queue import RateLimitedLog
from kso.core.cluster import ClusterState
from kso.core.objects import ObjectError, pod_from_k8s
from kso.core.watcher import ClusterWatcher, Reflector
from shadow.counterfactual import Counterfactual
from shadow.judge import Bind, Record, judge
from shadow.metrics import ShadowMetrics
from shadow.records import RecordsFile
from shadow.report import Tally, markdown, plot
from shadow.settings import ShadowSettings

log = logging.getLogger("kso.shadow")


class ShadowWatcher(ClusterWatcher):
    """The extender's list+watch of nodes and pods, handing each bind to ``on_bind`` before the cache applies it."""

    def __init__(self, state: ClusterState, api_client: Any, on_bind: Callable[[dict[str, Any], bool], None],
                 counterfactual: Counterfactual | None = None, **kwargs: Any) -> None:
        super().__init__(state, api_client, **kwargs)
        self.on_bind = on_bind
        self.counterfactual = counterfactual  # told of deletions and re-lists, in the watch's order

    def _handle(self, res: Reflector, event: dict[str, Any]) -> None:
        if res is self._pods:
            type_, obj = event.get("type"), event.get("raw_object")
            if type_ == "MODIFIED":
                self._seen(obj, late=False)
            elif type_ == "DELETED" and self.counterfactual is not None and isinstance(obj, dict):
                uid = (obj.get("metadata") or {}).get("uid")
                if isinstance(uid, str):
                    self.counterfactual.note_gone(uid)
        super()._handle(res, event)

    def _listed_page(self, res: Reflector, items: list[Any], relist: bool) -> None:
        if relist and res is self._pods:  # binds made during a watch gap; the first list's were made before kso looked
            for item in items:
                self._seen(item, late=True)

    def _replace_pods(self, listing: Any, relist: bool) -> None:
        super()._replace_pods(listing, relist)
        if relist and self.counterfactual is not None:  # pods deleted in the gap are off kso's schedule too
            self.counterfactual.note_listed(frozenset(self.state.pods))

    def _seen(self, obj: Any, late: bool) -> None:
        """``obj`` is a bind when it has a node and the cache does not count the pod on one yet. A pod created with
        its node set (no scheduler bound it) arrives ADDED, not MODIFIED, and is not one."""
        try:
            if not isinstance(obj, dict):
                return
            spec, meta = obj.get("spec") or {}, obj.get("metadata") or {}
            uid = meta.get("uid")
            if not spec.get("nodeName") or not isinstance(uid, str) or uid in self.state.pods:
                return
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            if late and self.state.pending_pod(uid) is None:
                return
            self.on_bind(obj, late)
        except Exception:  # noqa: BLE001 - the shadow must never break the watch that feeds it
            log.exception("judging a bind failed; the watch goes on")


@dataclass
class Shadow:
    """The binds' judgement (a worker thread) and their outcomes and report (another), over ``state``."""

    engine: Any  # decisions.engine.DecisionEngine
    state: ClusterState
    settings: ShadowSettings
    outcomes: Any  # shadow.outcomes.Outcomes, or None without Prometheus
    u_star: float
    context: dict[str, Any]
    metrics: ShadowMetrics = field(default_factory=ShadowMetrics)
    tally: Tally = field(default_factory=Tally)
    clock: Callable[[], float] = time.time
    eps: float = 0.3
    # where the safe agent's load data comes from (decisions.forecasts.ForecastHealth); None without forecasts
    forecast_health: Any = None

    # the --records file (shadow.records.RecordsFile); None without one
    records: RecordsFile | None = None

    def __post_init__(self) -> None:
        self.binds: queue.Queue[Bind | None] = queue.Queue(maxsize=self.settings.queue)
        self.pending: deque[Record] = deque()
        self.changed: deque[Record] = deque(maxlen=self.settings.keep)  # the latest safety changes
        self.misses: deque[Record] = deque(maxlen=self.settings.keep)  # the latest picks that went over U*
        # kso's schedule (its picks applied to a copy of the cache's rows); its lock: the judge against the report
        self.counterfactual = Counterfactual(self.state.recent_window_s)
        self.schedule_lock = threading.Lock()
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.prometheus_down_since: float | None = None
        self.report_text = ""
        self.judged_event = threading.Condition(self.lock)
        self.skips = RateLimitedLog(log)  # a burst of binds past the queue: one line every 10 s, not one a bind

    # ---- the watch thread: one bind seen ---------------------------------------------------------------
    def on_bind(self, obj: dict[str, Any], late: bool) -> None:
        with self.lock:
            self.tally.seen += 1
        try:
            pod = replace(pod_from_k8s(obj), node_name="")
        except ObjectError as exc:
            with self.lock:
                self.tally.unreadable += 1
            self.metrics.binds.labels("unreadable").inc()
            log.warning("bind of an unreadable pod not judged: %s", exc)
            return
        view = self.state.view(sorted(self.state.node_names()))
        view.nodes  # noqa: B018 - the node objects as they are now, not when the judge gets to them
        try:
            self.binds.put_nowait(Bind(pod, obj["spec"]["nodeName"], self.clock(), view, late,
                                       seq=self.counterfactual.seq))
        except queue.Full:
            with self.lock:
                self.tally.skipped += 1
                self.metrics.skipped_share.set(self.tally.skipped / self.tally.seen)
            self.metrics.binds.labels("skipped").inc()
            self.skips.warning("bind of %s to %s not judged: %d binds already wait to be judged (KSO_SHADOW_QUEUE)",
                               pod.key, obj["spec"]["nodeName"], self.settings.queue)

    # ---- the judge -------------------------------------------------------------------------------------
    def _judge_loop(self) -> None:
        while True:
            bind = self.binds.get()
            if bind is None:
                return
            try:
                with self.schedule_lock:
                    record = judge(self.engine, bind, self.counterfactual)
                    over = len(self.counterfactual.over_alloc)
                self.metrics.over_allocatable.set(over)
            except Exception:  # noqa: BLE001 - one pod kso cannot judge must not stop the others
                log.exception("judging the bind of %s to %s failed", bind.pod.key, bind.node)
                continue
            self.add(record)

    def add(self, record: Record) -> None:
        self.metrics.judged(record)
        with self.lock:
            self.tally.add(record)
            self.metrics.skipped_share.set(self.tally.skipped / max(1, self.tally.seen))
            if record.kind in ("safety", "unknown_node") and self.changed.maxlen:
                self.changed.append(record)
            if self.outcomes is None:
                if self.records is not None:
                    self.records.write([record], "no_outcomes")
            else:
                self.pending.append(record)
                while len(self.pending) > self.settings.max_pending:
                    gone = self.pending.popleft()
                    if self.records is not None:
                        self.records.write([gone], "dropped")
                    self.tally.dropped += 1
                    self.metrics.dropped.inc()
            self.metrics.pending.set(len(self.pending))
            self.judged_event.notify_all()
        if record.changed:
            log.info("%s bound to %s by %s; kso would have %s (%s)", record.pod, record.chosen, record.scheduler or "?",
                     f"picked {record.pick}" if record.pick else "left it pending",
                     "; ".join(record.reasons)
                     or ("the chosen node is not in kso's node cache" if record.unknown_node else "a better score"))

    def wait_judged(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` binds have been judged (tests)."""
        with self.judged_event:
            return self.judged_event.wait_for(lambda: self.tally.judged >= count, timeout)

    # ---- outcomes ----------------------------------------------------------------------------------------
    def due(self, now: float) -> list[Record]:
        """The oldest pending records whose horizon and settling time have passed, spanning at most
        ShadowSettings.max_window_s of bind times (one batch of queries)."""
        wait = self.outcomes.horizon_s + (self.settings.settle_s or 0.0)
        with self.lock:
            out: list[Record] = []
            for r in self.pending:
                if r.at + wait > now or (out and r.at - out[0].at > self.settings.max_window_s):
                    break
                out.append(r)
            return out

    def check_outcomes(self, now: float | None = None) -> int:
        """Read the outcomes of every record that is due; returns how many were read. A failed read is logged
        (at the start and the end of an outage) and leaves the records waiting for the next check."""
        from forecasting.prometheus import PrometheusError

        if self.outcomes is None:
            return 0
        now = self.clock() if now is None else now
        done = 0
        while batch := self.due(now):
            try:
                self.outcomes.read(batch)
            except PrometheusError as exc:
                self.metrics.prometheus_errors.inc()
                if self.prometheus_down_since is None:
                    self.prometheus_down_since = now
                    log.warning("outcomes not read: %s; %d binds wait, retried every %g s (kept up to "
                                "KSO_SHADOW_MAX_PENDING %d)", exc, len(self.pending), self.settings.check_every_s or 0,
                                self.settings.max_pending)
                else:
                    log.debug("outcomes still not read: %s", exc)
                return done
            if self.prometheus_down_since is not None:
                log.warning("outcomes read again from %s after %.0f s", self.outcomes.url, now - self.prometheus_down_since)
                self.prometheus_down_since = None
            judged_at = self.clock()
            with self.lock:
                for r in batch:
                    r.judged_at = judged_at
                    self.tally.add_outcome(r, self.u_star, self.settings.throttled_share)
                    self.metrics.outcome(r, self.u_star, self.settings.throttled_share)
                    if r.missed(self.u_star):
                        self.misses.append(r)
                for _ in batch:
                    self.pending.popleft()
                self.metrics.pending.set(len(self.pending))
            with self.schedule_lock:
                for r in batch:
                    if r.pick is not None and r.pick_outcome is not None:
                        self.counterfactual.outcome(r.pick, r.pick_outcome.peak, r.pick_outcome.with_pod)
            if self.records is not None:
                self.records.write(batch, "read")
            done += len(batch)
        return done

    # ---- the report ----------------------------------------------------------------------------------------
    def report(self, now: float | None = None, plot: str = "") -> str:
        now = self.clock() if now is None else now
        with self.lock:
            context = {**self.context, "nodes in kso's cache": len(self.state),
                       "binds waiting for their outcome": len(self.pending)}
            if self.outcomes is not None and self.outcomes.missing:
                context["metrics Prometheus has no series of"] = ", ".join(sorted(self.outcomes.missing))
            if self.prometheus_down_since is not None:
                since = time.strftime("%H:%M:%S", time.gmtime(self.prometheus_down_since))
                context["Prometheus"] = f"unavailable since {since} UTC"
            if self.forecast_health is not None:  # "judging without load data since T" when that is so
                health = self.forecast_health.snapshot(now)
                context["load statistics"] = f"forecasts from {health['source']}: {health['condition']}"
                failures = {k: v for k, v in health["refresh_failures"].items() if v}
                if failures:
                    context["forecast refreshes failed"] = ", ".join(f"{v} {k}" for k, v in sorted(failures.items()))
            changed, misses = list(self.changed), list(self.misses)
            tally = replace(self.tally, outcomes={k: list(v) for k, v in self.tally.outcomes.items()},
                            oom=dict(self.tally.oom), throttled=dict(self.tally.throttled))
        with self.schedule_lock:
            schedule = {k: replace(v) for k, v in self.counterfactual.nodes.items()}
            over = len(self.counterfactual.over_alloc)
        return markdown(tally, changed, context, self.u_star, now, plot=plot,
                        throttled_share=self.settings.throttled_share, misses=misses, schedule=schedule,
                        over_alloc=over)

    def restore(self) -> None:
        """Read the state a previous run saved (KSO_SHADOW_STATE), when there is one."""
        from shadow import checkpoint

        if not self.settings.state_path or (state := checkpoint.load(self.settings.state_path)) is None:
            return
        with self.lock:
            self.tally = state["tally"]
            self.pending = state["pending"] if self.outcomes is not None else deque()
            self.misses.extend(state["misses"])
            self.changed.extend(state["changed"])
            if self.outcomes is not None:
                self.outcomes.oom_counted.update(state["oom_counted"])
            self.metrics.pending.set(len(self.pending))
        log.info("kso shadow: state restored from %s: %d binds judged since %s, %d waiting for their outcome",
                 self.settings.state_path, self.tally.judged, time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                           time.gmtime(self.tally.started)),
                 len(self.pending))

    def save_state(self) -> None:
        """Save the state for the next run (KSO_SHADOW_STATE); a save that fails is logged."""
        from shadow import checkpoint

        if not self.settings.state_path:
            return
        with self.lock:
            tally = replace(self.tally, outcomes={k: list(v) for k, v in self.tally.outcomes.items()},
                            oom=dict(self.tally.oom), throttled=dict(self.tally.throttled))
            args = (tally, list(self.pending), list(self.misses), list(self.changed),
                    dict(self.outcomes.oom_counted) if self.outcomes is not None else {})
        try:
            checkpoint.save(self.settings.state_path, *args)
        except (OSError, ValueError) as exc:
            log.warning("state not saved to %s: %s", self.settings.state_path, exc)

    def write_report(self, now: float | None = None) -> str:
        """Write the report file (atomically: a reader never sees half of it), and its plot beside it (``.png``) when
        matplotlib is installed; a write that fails is logged."""
        path = Path(self.settings.report_path)
        with self.lock:
            points = list(self.tally.points)
        image = path.with_suffix(".png")
        try:
            drawn = plot(points, self.u_star, self.eps, str(image))
        except Exception:  # noqa: BLE001 - the plot is a courtesy: the report is written without it
            log.exception("report plot not drawn")
            drawn = False
        text = self.report(now, plot=image.name if drawn else "")
        self.report_text = text
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
            self.metrics.last_report.set(self.clock())
        except OSError as exc:
            log.warning("report not written to %s: %s", path, exc)
        return text

    # ---- threads -------------------------------------------------------------------------------------------
    def _periodic(self) -> None:
        next_report = time.monotonic() + self.settings.report_every_s
        every = self.settings.check_every_s or 60.0
        while not self.stop_event.wait(min(every, max(0.0, next_report - time.monotonic()))):
            try:
                self.check_outcomes()
                if time.monotonic() >= next_report:
                    next_report = time.monotonic() + self.settings.report_every_s
                    self.write_report()
                    self.save_state()
            except Exception:  # noqa: BLE001 - a bad round must not end the shadow
                log.exception("outcome check or report failed; retried at the next round")

    def start(self) -> None:
        for name, target in (("kso-shadow-judge", self._judge_loop), ("kso-shadow-outcomes", self._periodic)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stop_event.set()
        self.binds.put(None)  # after the binds already queued: they are judged first
        for thread in self.threads:
            thread.join(10)


def http_server(address: str, shadow: Shadow) -> ThreadingHTTPServer:
    """/metrics, /healthz and /report (the latest report's Markdown) on ``address`` in a daemon thread."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from scheduler.debug import page_server

    return page_server(address, 9110, {
        "/metrics": lambda _q: (generate_latest(shadow.metrics.registry), CONTENT_TYPE_LATEST),
        "/healthz": lambda _q: (b"ok", "text/plain"),
        "/report": lambda _q: (shadow.report().encode(), "text/markdown; charset=utf-8")}, "kso-shadow-http", log)


@dataclass
class RunningShadow:
    shadow: Shadow
    watcher: ShadowWatcher
    server: ThreadingHTTPServer | None = None
    stops: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1]) if self.server is not None else 0

    def close(self) -> str:
        """Stop everything; the outcomes that are due are read and the report is written a last time (and returned)."""
        self.watcher.stop()
        self.shadow.stop()
        try:
            self.shadow.check_outcomes()
        except Exception:  # noqa: BLE001 - the report is written whatever happened
            log.exception("last outcome check failed")
        text = self.shadow.write_report()
        self.shadow.save_state()
        if self.shadow.records is not None:  # the binds whose outcome is not read yet: written as pending
            with self.shadow.lock:
                left = list(self.shadow.pending)
            self.shadow.records.write(left, "pending")
            self.shadow.records.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for fn in reversed(self.stops):
            fn()
        return text


def start(env: Mapping[str, str] | None = None, config_file: str | None = None, kubeconfig: str | None = None,
          api_client: Any = None, sync_timeout_s: float | None = None, **fixed: Any) -> RunningShadow:
    """Start ``kso shadow`` in background threads (the CLI waits on it; tests call it). The configuration is the
    extender's (extender.config.load_config: ``env`` over ``config_file``) plus ShadowSettings (``fixed``: its fields
    that are not settings, e.g. ``settle_s``)."""
    from decisions.engine import DecisionEngine
    from decisions.forecasts import forecast_health, start_forecasts
    from decisions.recent import recent_bind_hold_s
    from extender.config import load_config
    from forecasting.history_names import HistoryNames
    from forecasting.store import StoreSettings
    from kso.core import kube
    from shadow.outcomes import Outcomes, check_horizon

    config = load_config(env, config_file)
    problems = config.validate()
    if problems:
        raise ValueError("bad configuration: " + "; ".join(problems))
    settings = replace(config.load(ShadowSettings), **fixed)
    if config.prometheus is not None:
        scrape = config.prometheus.scrape_interval_s
        settings = replace(settings, settle_s=scrape if settings.settle_s is None else settings.settle_s,
                           check_every_s=scrape if settings.check_every_s is None else settings.check_every_s)
    names = config.load(HistoryNames)
    horizon_s = (config.store or StoreSettings()).horizon_s
    if config.prometheus is not None:  # a configuration error: before anything is asked of a server
        check_horizon(config.prometheus, horizon_s)
    if settings.address:
        from scheduler.debug import parse_address

        try:  # a bad address fails before any thread starts
            host_port = parse_address(settings.address, 9110)
        except ValueError:
            raise ValueError(f"--address / KSO_SHADOW_ADDRESS {settings.address!r} is not host:port") from None
        check_address(settings.address, host_port)
    if config.prometheus is not None:  # forecasts and outcomes come from there: one that never answers is an error
        check_prometheus(config.prometheus)
    client = api_client or kube.load_api_client(kubeconfig or config.settings.kubeconfig or None)
    check_api_server(client)  # before any thread starts: a dead API server is one line and exit 1, not an empty report
    s = config.settings
    state = ClusterState(max_resource_columns=s.max_resource_columns, max_pod_annotation_bytes=s.max_pod_annotation_bytes)
    state.recent_window_s = recent_bind_hold_s(config)
    stops: list[Callable[[], Any]] = []
    started = start_forecasts(config)
    stats = None
    if started is not None:
        stats, stop_forecasts = started
        stops.append(stop_forecasts)
    engine = DecisionEngine(config, state, stats, plan=None, cache_bodies=False)
    safe = config.agent_params["safe"]
    outcomes = None
    if config.prometheus is not None:
        outcomes = Outcomes(config.prometheus, settings, horizon_s, names.node_label, names.container_selector)
    else:
        log.warning("KSO_PROMETHEUS_URL is not set: kso shadow judges binds but reads no outcomes")
    context = {"agents": ", ".join(engine.agents), "filters": ", ".join(engine.filters) or "none",
               "weights": ", ".join(f"{k}={v}" for k, v in engine.weights.items()),
               "U* (SAFEUTILIZATION)": f"{safe.u_star:.0%}", "eps (SAFEPERCENTILE)": f"{safe.eps:.0%}",
               "forecast horizon (KSO_FORECAST_HORIZON)": f"{horizon_s:g} s",
               "load statistics": "forecasts from " + config.prometheus.url if stats is not None and config.prometheus
               else "node annotations",
               "outcomes from": outcomes.url if outcomes is not None else "nowhere (KSO_PROMETHEUS_URL not set)"}
    records = RecordsFile(settings.records_path, safe.u_star) if settings.records_path else None
    shadow = Shadow(engine, state, settings, outcomes, safe.u_star, context, eps=safe.eps, records=records,
                    forecast_health=forecast_health(engine, state, config.prometheus.url if config.prometheus else ""))
    if shadow.forecast_health is not None:
        shadow.forecast_health.register(shadow.metrics.registry, basics=True)
    shadow.restore()
    watcher = ShadowWatcher(state, client, shadow.on_bind, shadow.counterfactual)
    running = RunningShadow(shadow, watcher, stops=stops)
    if settings.address:  # bound before the watch starts: a taken address fails at once, named
        try:
            running.server = http_server(settings.address, shadow)
        except OSError as exc:
            for fn in reversed(stops):
                fn()
            raise ValueError(f"--address / KSO_SHADOW_ADDRESS {settings.address}: cannot listen there "
                             f"({exc.strerror or exc})") from None
        log.info("kso shadow: /metrics, /report on http://%s:%d", *running.server.server_address[:2])
    shadow.start()
    watcher.start()
    wait_s = s.cache_sync_timeout_s if sync_timeout_s is None else sync_timeout_s
    if not watcher.wait_synced(wait_s):
        log.warning("node cache not synced after %g s (KSO_CACHE_SYNC_TIMEOUT_S); judging from what is listed so far",
                    wait_s)
    log.info("kso shadow: judging binds (%s), outcomes after %g s + %g s, report %s every %g s", context["agents"],
             horizon_s, settings.settle_s or 0, settings.report_path, settings.report_every_s)
    return running


def check_address(address: str, host_port: tuple[str, int]) -> None:
    """ValueError naming the address when nothing can listen there (taken, not this host's), tried as the HTTP server
    will bind it, before anything else starts; the server's own bind is checked the same way."""
    import socket

    try:
        family = socket.getaddrinfo(host_port[0], host_port[1], type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server does
            sock.bind(host_port)
    except OSError as exc:
        raise ValueError(f"--address / KSO_SHADOW_ADDRESS {address}: cannot listen there ({exc.strerror or exc})") \
            from None


def check_api_server(client: Any, timeout_s: float = 10.0) -> None:
    """ValueError (one line, naming the API server and the cause) unless it lists one node within ``timeout_s``: the
    shadow reads nothing else, and without it would run its whole --duration to write an empty report."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    host = getattr(getattr(client, "configuration", None), "host", "?")
    pool_log = logging.getLogger("urllib3.connectionpool")  # its retry warnings would say the same line three times
    level = pool_log.level
    pool_log.setLevel(logging.ERROR)
    try:
        CoreV1Api(client).list_node(limit=1, _request_timeout=timeout_s)
    except ApiException as exc:
        raise ValueError(f"the API server at {host} refused to list nodes: HTTP {exc.status} {exc.reason}") from None
    except Exception as exc:  # noqa: BLE001 - urllib3's connection errors and timeouts, in one line
        cause = " ".join(str(exc).split())
        refused = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", cause)
        why = f"cannot connect ({refused.group(1).strip()})" if refused else cause[:300]
        raise ValueError(f"the API server at {host} does not answer: {why}") from None
    finally:
        pool_log.setLevel(level)


def check_prometheus(settings: Any) -> None:
    """ValueError (one line, naming the URL and the cause) when the Prometheus of kso's settings does not answer one
    cheap query within KSO_PROMETHEUS_TIMEOUT: kso shadow would judge without forecasts and read no outcome."""
    from forecasting.prometheus import PrometheusError, PrometheusSource

    source = PrometheusSource(settings)
    try:
        source.check()
    except PrometheusError as exc:
        cause = str(exc)
        refused = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", cause)
        why = (f"cannot connect ({refused.group(1).strip()})" if refused
               else f"no answer within KSO_PROMETHEUS_TIMEOUT ({settings.timeout_s:g} s)" if exc.reason == "timeout"
               else " ".join(cause.split())[:300])
        raise ValueError(f"Prometheus at {source.url} (KSO_PROMETHEUS_URL): {why}; kso shadow reads its forecasts "
                         "and outcomes there (KSO_FORECAST_SOURCE=NONE without KSO_PROMETHEUS_URL: node annotations, "
                         "no outcomes)") from None
    finally:
        source.close()
