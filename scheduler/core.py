"""``kso scheduler``'s decisions and its queue: one pod per cycle, in QoS (or fifo / priority) order.

A cycle: take the next pod of the queue, find the nodes that pass kube-scheduler's core filters (kso's
rules) and the extender's predicates (the safe agent), score them with the extender's agents and
weights (cost among them) and the cached plan, count the pod on the winner at once (ClusterState.assume)
and bind it in the background. A pod that fits nowhere gets a FailedScheduling event and the condition
PodScheduled=False/Unschedulable (scheduler.status: what the cluster-autoscaler scales up for; patched only
when its message changes), both off the scheduling thread, and waits with backoff (1 s doubling to 10 s),
and past that until room may have appeared (the informer's epoch) or 30 s went by. ``seed_compatible``
replaces filters and scores by Hightower's toy scheduler.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter

from decisions.agents.base import MAX_PRIORITY, Call
from decisions.engine import DecisionEngine
from decisions.sight import least_requested
from kso.core.binder import Binder, SyncBinder
from kso.core.cluster import ClusterState
from kso.core.logs import FirstWarnings
from kso.core.node_costs import CostKeySettings
from kso.core.objects import PodInfo
from kso.core.settings import setting
from scheduler.feasibility import (
    failed_message,
    hightower_choice,
    hightower_fit,
    resource_reasons,
    rule_reasons,
    rule_signature,
)
from scheduler.metrics import SchedulerMetrics
from scheduler.qos import DEFAULT_SLO, ControllerQoS, PodClock, controller_table, sort_key
from scheduler.status import StatusSink

log = logging.getLogger("kso.scheduler")

# Condition patches waiting for the status writer at most; past that a pod's patch is dropped (and counted), and
# its next failed attempt asks again (it is not marked as written).
STATUS_BACKLOG = 1000
# After a 403 on a pod's status, no condition is written for this long: without the RBAC rule every pending pod's
# every failed attempt would otherwise be one more refused request.
STATUS_REFUSED_PAUSE_S = 300.0
# Weight of the least-requested tie-break where packing is withheld: the weighted means of integer scores differ by
# at least 1 / (sum of weights), far above this.
SPREAD_TIE = 1e-3


@dataclass
class SchedulerSettings(CostKeySettings):  # KSO_PLAN_COST_KEY: the annotation --seed-compatible prices nodes by
    # Its own variable: KSO_SCHEDULER_NAMES names the extender's kube-scheduler profiles (deploy/settings.yaml
    # sets kso-scheduler), and a standalone scheduler serving those would race kube-scheduler for its pods.
    names: list[str] = setting("KSO_STANDALONE_NAMES", [], kind="list",
                               help="scheduler names served when --name is not given; empty = kso")
    order: str = setting("KSO_SCHEDULER_ORDER", "QOS", kind="choice:QOS,FIFO,PRIORITY", help="queue order")
    controller_key: str = setting("KSO_QOS_CONTROLLER_KEY", "controller", help="pod annotation naming its controller")
    slo_key: str = setting("KSO_QOS_SLO_KEY", "slo", help="pod annotation with its availability SLO")
    default_slo: float = setting("KSO_QOS_DEFAULT_SLO", DEFAULT_SLO, lo=0.01, hi=1.0,
                                 help="SLO of a pod whose annotation gives none")
    debug_address: str = setting("KSO_SCHEDULER_DEBUG_ADDRESS", "127.0.0.1:10000", help="host:port of the QoS table")
    lease: str = setting("KSO_SCHEDULER_LEASE", "kube-system/kso-scheduler",
                         help="namespace/name of the Lease; empty = no election")
    lease_duration_s: int = setting("KSO_SCHEDULER_LEASE_DURATION_S", 15, lo=2, hi=600,
                                    help="leader election: lease duration, seconds")
    renew_deadline_s: int = setting("KSO_SCHEDULER_RENEW_DEADLINE_S", 10, lo=2, hi=600,
                                    help="leader election: renew deadline, seconds")
    retry_period_s: int = setting("KSO_SCHEDULER_RETRY_PERIOD_S", 2, lo=1, hi=600, help="leader election: retry period, seconds")
    cost_weight: int = setting("KSO_SCHEDULER_COST_WEIGHT", 10, lo=0, hi=1000,
                               help="weight of the cost agent when KSO_WEIGHTS does not name it")
    bind_workers: int = setting("KSO_SCHEDULER_BIND_WORKERS", 8, lo=1, hi=64, help="binds in flight at once")
    relist_s: float = setting("KSO_SCHEDULER_RELIST_S", 30.0, lo=0, help="re-list unscheduled pods; 0 = never")
    resort_s: float = setting("KSO_SCHEDULER_RESORT_S", 0.5, lo=0, hi=60, help="re-read the queue at least this often")
    backoff_initial_s: float = setting("KSO_SCHEDULER_BACKOFF_S", 1.0, lo=0, hi=600,
                                       help="first back-off of a pod that could not be scheduled, seconds")
    backoff_max_s: float = setting("KSO_SCHEDULER_BACKOFF_MAX_S", 10.0, lo=0, hi=3600, help="longest back-off, seconds")
    unschedulable_flush_s: float = setting("KSO_SCHEDULER_FLUSH_S", 30.0, lo=0, hi=3600,
                                           help="retry a pod that fit nowhere after this long even if nothing changed")


class ClockSource(Protocol):
    """Where pods' QoS clocks come from (scheduler.informer.SchedulerWatcher, or StaticClocks offline)."""

    epoch: int

    def clock(self, uid: str) -> PodClock | None: ...

    def all_clocks(self) -> list[PodClock]: ...


@dataclass
class StaticClocks:
    """Clocks kept by hand: offline runs and tests without an API server."""

    clocks: dict[str, PodClock] = field(default_factory=dict)
    epoch: int = 0

    def clock(self, uid: str) -> PodClock | None:
        return self.clocks.get(uid)

    def all_clocks(self) -> list[PodClock]:
        return list(self.clocks.values())


class EventSink(Protocol):
    def scheduled(self, pod: PodInfo, node: str, message: str) -> None: ...

    def failed(self, pod: PodInfo, message: str) -> None: ...


@dataclass(slots=True)
class Backoff:
    attempts: int
    not_before: float
    failed_at: float
    epoch: int


@dataclass(slots=True)
class Decision:
    """The outcome of one scheduling cycle."""

    pod: PodInfo
    node: str | None
    message: str
    seconds: float  # time to decide (the scheduling cycle, without the bind)


class Scheduler:
    def __init__(self, names: list[str], settings: SchedulerSettings, state: ClusterState, clocks: ClockSource,
                 binder: Binder, events: EventSink, engine: DecisionEngine | None, *, seed_compatible: bool = False,
                 metrics: SchedulerMetrics | None = None, clock: Callable[[], float] = time.time,
                 status: StatusSink | None = None) -> None:
        self.names = set(names)
        self.settings = settings
        self.order = settings.order.lower()
        self.state = state
        self.clocks = clocks
        self.binder = binder
        self._binds = SyncBinder(binder)  # the bind workers' calls, on the binder's own event loop
        self.events = events
        self.engine = engine
        self.seed_compatible = seed_compatible
        self.metrics = metrics or SchedulerMetrics(self.qos_table)
        self.now = clock
        self.backoff: dict[str, Backoff] = {}
        self.inflight: set[str] = set()
        self.queue: list[PodInfo] = []
        self._pos = 0
        self._sorted_at = -math.inf
        self._sorted_version = -1  # ClusterState.version at the last refill
        self._rules: dict[tuple[object, ...], tuple[int, tuple[str, ...], dict[int, str]]] = {}
        self._node_names: tuple[int, int, list[str]] = (-1, -1, [])
        self._pool = ThreadPoolExecutor(settings.bind_workers, thread_name_prefix="kso-bind")
        # Events on their own workers (as kube-scheduler's event broadcaster): a backlog of events must not
        # delay the next bindings. Two workers keep a repeated FailedScheduling's count update in order enough.
        self._event_pool = ThreadPoolExecutor(2, thread_name_prefix="kso-events")
        self._events_pending = 0
        # PodScheduled=False on pods that fit nowhere: one writer, so a pod's patches reach the API in the order
        # they were decided; _marked: uid -> message the API has (as far as this scheduler wrote it), _queued:
        # uid -> the message waiting to be written (a newer message replaces an older one not yet sent).
        self.status = status
        self._status_pool = ThreadPoolExecutor(1, thread_name_prefix="kso-status")
        self._marked: dict[str, str] = {}
        self._queued: dict[str, str] = {}
        self._status_errors = FirstWarnings(log)  # a condition patch that failed, by HTTP status
        self._status_refused_until = -math.inf  # self.now() until which no condition is written (after a 403)
        self.status_patches = Counter("kso_scheduler_pod_condition_patches_total",
                                      "PodScheduled=False/Unschedulable patches of pods/status by result (patched, "
                                      "error, dropped: the writer's backlog was full)", ["result"],
                                      registry=self.metrics.registry)
        self._lock = threading.Lock()
        self.decisions = 0

    # ---- the queue ---------------------------------------------------------------------------------
    def qos_table(self) -> dict[str, ControllerQoS]:
        return controller_table(self.clocks.all_clocks(), self.now(), self.settings.default_slo)

    def _eligible(self, pod: PodInfo, now: float) -> bool:
        if pod.uid in self.inflight or pod.uid in self.state.pods or pod.scheduler_name not in self.names:
            return False
        clock = self.clocks.clock(pod.uid)
        if clock is not None and clock.held:  # gated or being deleted: kube-scheduler leaves it alone too
            return False
        b = self.backoff.get(pod.uid)
        if b is None:
            return True
        if now < b.not_before:
            return False
        return self.clocks.epoch != b.epoch or now - b.failed_at >= self.settings.unschedulable_flush_s

    def _clock_of(self, pod: PodInfo, now: float) -> PodClock:
        c = self.clocks.clock(pod.uid)
        if c is not None:
            return c
        return PodClock(pod.uid, pod.namespace, pod.name, f"{pod.namespace}/Pod/{pod.name}", None, now, math.nan,
                        math.nan, pod.priority)

    def refill(self) -> None:
        """Read the pending pods again and sort them (the QoS table is computed once for the whole batch)."""
        now = self.now()
        every = self.state.pending_pods()
        if self.backoff:  # forget pods that were deleted or bound elsewhere while backing off
            live = {p.uid for p in every}
            # list(): a bind worker's failed bind adds to backoff while this runs on the scheduling thread
            for uid in [u for u in list(self.backoff) if u not in live]:
                self.backoff.pop(uid, None)
        if self._marked:
            live = {p.uid for p in every}
            with self._lock:
                for uid in [u for u in self._marked if u not in live]:
                    del self._marked[uid]
        pending = [p for p in every if self._eligible(p, now)]
        table = self.qos_table() if self.order == "qos" else {}
        keyed = [(sort_key(self.order, self._clock_of(p, now), table), p) for p in pending]
        keyed.sort(key=lambda kp: kp[0])
        self.queue = [p for _, p in keyed]
        self._pos = 0
        self._sorted_at = time.monotonic()
        self._sorted_version = self.state.version
        self.metrics.pending.set(len(self.queue))

    def next_pod(self) -> PodInfo | None:
        # Re-read the queue every resort_s (QoS drifts with time), and at once when it ran dry and the cache
        # changed; an idle scheduler (nothing new, everything backing off) re-reads only every resort_s.
        stale = time.monotonic() - self._sorted_at >= self.settings.resort_s
        if stale or (self._pos >= len(self.queue) and self.state.version != self._sorted_version):
            self.refill()
        now = self.now()
        while self._pos < len(self.queue):
            pod = self.queue[self._pos]
            self._pos += 1
            if self._eligible(pod, now) and self.state.pending_pod(pod.uid) is not None:
                return pod
        return None

    # ---- one cycle ---------------------------------------------------------------------------------
    def node_names(self) -> list[str]:
        """The cache's node names in name order (the API's list order, which 'first' refers to)."""
        key = (len(self.state), self.clocks.epoch)
        if self._node_names[:2] != key:
            self._node_names = (*key, sorted(self.state.node_names()))
        return self._node_names[2]

    def _rule_failures(self, pod: PodInfo, names: list[str], nodes: list[Any]) -> dict[int, str]:
        """kso.core.placement's verdicts per node, memoised per rule signature until a node changes."""
        sig = rule_signature(pod)
        hit = self._rules.get(sig)
        if hit is not None and hit[0] == self.clocks.epoch and hit[1] == tuple(names):
            return hit[2]
        reasons = rule_reasons(pod, nodes)
        if len(self._rules) > 256:
            self._rules.clear()
        self._rules[sig] = (self.clocks.epoch, tuple(names), reasons)
        return reasons

    def decide(self, pod: PodInfo) -> Decision:
        started = time.perf_counter()
        names = self.node_names()
        if not names:
            return Decision(pod, None, "0/0 nodes are available.", time.perf_counter() - started)
        view = self.state.view(names)
        if self.seed_compatible:
            fits, failures = hightower_fit(pod, view)
            if not fits:
                msg = f"pod ({pod.name}) failed to fit in any node\n" + "\n".join(failures.values())
                return Decision(pod, None, msg, time.perf_counter() - started)
            nodes = view.nodes
            best = fits[hightower_choice([nodes[i] for i in fits], self.settings.cost_key)]
            return Decision(pod, names[best], f"Successfully assigned {pod.name} to {names[best]}",
                            time.perf_counter() - started)
        reasons = dict(self._rule_failures(pod, names, view.nodes))
        for i, why in resource_reasons(pod, view).items():
            reasons.setdefault(i, why)  # kube-scheduler reports the first failing plugin per node
        if len(reasons) == len(names):
            return Decision(pod, None, failed_message(len(names), reasons), time.perf_counter() - started)
        rows = [i for i in range(len(names)) if i not in reasons]
        # One call for the agents' predicates and priorities, so what they share (the safe agent's inputs) is
        # computed once: the whole view when every node fits, else the fitting nodes' rows.
        call = Call(pod, view if len(rows) == len(names) else self.state.view([names[i] for i in rows]))
        ok = np.ones(len(rows), dtype=bool)
        ext = self.engine
        if ext is not None and ext.filters:
            verdicts = ext.verdicts(call, ext.filters, "filter")
            for j, why in {**verdicts.failed_joined(), **verdicts.unresolvable}.items():
                reasons[rows[j]] = why
            ok = np.array(verdicts.passed(), dtype=bool)
        if not ok.any():
            return Decision(pod, None, failed_message(len(names), reasons), time.perf_counter() - started)
        node = names[rows[self._best(call, ok)]]
        return Decision(pod, node, f"Successfully assigned {pod.key} to {node}", time.perf_counter() - started)

    # Rank the call's nodes that passed (``ok``): a free plan slot for the pod's class first, then the weighted
    # mean of the agents' scores (unrounded, so cost breaks what rounding would tie), then name order. Nodes
    # an agent's predicate rejected are scored with the others and then masked: only pigeon's cluster-wide
    # objective can tell, and it then sees every fitting node rather than the safe ones only.
    def _best(self, call: Call, ok: np.ndarray) -> int:
        ext = self.engine
        if ext is None or ok.sum() == 1:
            return int(np.argmax(ok))
        _, per = ext.scores(call, "prioritize")
        weight = sum(ext.weights[p] for p in per)
        mean = sum(ext.weights[p] * s for p, s in per.items()) / weight if weight else np.zeros(len(ok))
        if ext.packing and not ext.sight(call)[2]:
            # see before you pack (decisions/sight.py): packing was withheld where kso cannot see, and where
            # kube-scheduler would then spread by its own LeastAllocated score, this front end breaks equal scores
            # toward the least requested node (SPREAD_TIE is below any difference of the weighted means)
            mean = mean + SPREAD_TIE * least_requested(call.view)
        hit = ext.plan_nodes(call)
        if hit is not None:
            mean = np.where(hit, mean + MAX_PRIORITY + 1, mean)
        return int(np.argmax(np.where(ok, mean, -np.inf)))  # argmax: the first of equals

    def schedule_one(self) -> Decision | None:
        """Decide for the next pod of the queue and start binding it; None when the queue is empty."""
        pod = self.next_pod()
        if pod is None:
            return None
        decision = self.decide(pod)
        self.decisions += 1
        self.metrics.cycle_seconds.observe(decision.seconds)
        if decision.node is None:
            self._unschedulable(pod, decision.message)
            return decision
        self.backoff.pop(pod.uid, None)
        self.state.assume(pod, decision.node)
        with self._lock:
            self.inflight.add(pod.uid)
        self._pool.submit(self._bind, pod, decision.node, decision.message, time.perf_counter())
        return decision

    def _unschedulable(self, pod: PodInfo, message: str) -> None:
        self.metrics.attempts.labels("unschedulable").inc()
        log.info("pod %s is unschedulable: %s", pod.key, message)
        self._back_off(pod)
        self._event(self.events.failed, pod, message)
        self._mark_unschedulable(pod, message)

    def _mark_unschedulable(self, pod: PodInfo, message: str) -> None:
        """Queue the PodScheduled=False/Unschedulable patch, unless the pod already has (or is about to get) this
        message: kube-scheduler patches only a condition that changed."""
        if self.status is None:
            return
        with self._lock:
            if self._queued.get(pod.uid, self._marked.get(pod.uid)) == message:
                return
            if pod.uid not in self._queued and len(self._queued) >= STATUS_BACKLOG:
                self.status_patches.labels("dropped").inc()
                return
            self._queued[pod.uid] = message
        self._status_pool.submit(self._write_status, pod, message)

    def _write_status(self, pod: PodInfo, message: str) -> None:
        assert self.status is not None
        try:
            with self._lock:
                if self._queued.get(pod.uid) != message:
                    return  # a newer message for this pod is queued behind this one
                transition = pod.uid not in self._marked
            current = self.state.pending_pod(pod.uid)  # (ClusterState's pending_pod also finds a bound or assumed pod)
            if current is None or current.node_name:
                return  # bound (or assumed for a bind) or gone since: the Binding sets PodScheduled=True itself
            if self.now() < self._status_refused_until:
                self.status_patches.labels("dropped").inc()
                return  # refused lately (403): not one request per pod and attempt until the RBAC is fixed
            self.status.unschedulable(pod, message, transition)
        except Exception as exc:  # noqa: BLE001 - the condition is for the autoscaler; scheduling goes on
            self.status_patches.labels("error").inc()
            code = exc.status if isinstance(exc, ApiException) else 0
            hint = " (kso scheduler needs patch on pods/status: deploy/scheduler-standalone/rbac.yaml)" if code == 403 else ""
            if code == 403:
                self._status_refused_until = self.now() + STATUS_REFUSED_PAUSE_S
            self._status_errors.log(code, "PodScheduled=False not written on %s%s: %s", pod.key, hint, exc)
        else:
            self.status_patches.labels("patched").inc()
            with self._lock:
                self._marked[pod.uid] = message
        finally:
            with self._lock:
                if self._queued.get(pod.uid) == message:
                    del self._queued[pod.uid]

    def _back_off(self, pod: PodInfo) -> None:
        old = self.backoff.get(pod.uid)
        attempts = 1 if old is None else old.attempts + 1
        s = self.settings
        delay = min(s.backoff_max_s, s.backoff_initial_s * 2 ** (attempts - 1))
        now = self.now()
        self.backoff[pod.uid] = Backoff(attempts, now + delay, now, self.clocks.epoch)

    def _bind(self, pod: PodInfo, node: str, message: str, started: float) -> None:
        try:
            self._binds.bind(pod.namespace, pod.name, pod.uid, node)
        except Exception as exc:  # noqa: BLE001 - BindError or a transport error: the pod goes back to the queue
            self.metrics.attempts.labels("error").inc()
            log.warning("binding %s to %s failed: %s", pod.key, node, exc)
            with self.state.lock:
                if self.state.pods.get(pod.uid) is not None and pod.uid in self.state.assumed:
                    self.state.remove_pod(pod.uid)
                    self.state.upsert_pod(pod)  # pending again, with its original (node-less) spec
            self._back_off(pod)
            with self._lock:
                self.inflight.discard(pod.uid)
            self._event(self.events.failed, pod, f"Binding rejected: {exc}")
            return
        self.metrics.bind_seconds.observe(time.perf_counter() - started)
        self.metrics.attempts.labels("scheduled").inc()
        ext = self.engine
        if ext is not None and ext.plan is not None:
            ext.plan.consume(pod, node)
        with self._lock:
            self.inflight.discard(pod.uid)
            self._marked.pop(pod.uid, None)  # the Binding set PodScheduled=True
        self._event(self.events.scheduled, pod, node, message)

    def _event(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            self._events_pending += 1
        self._event_pool.submit(self._post, fn, *args)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - an event is a courtesy; scheduling goes on
            log.warning("event not posted: %s", exc)
        finally:
            with self._lock:
                self._events_pending -= 1

    # ---- the loop ----------------------------------------------------------------------------------
    def run(self, stop: threading.Event, idle_wait_s: float = 0.05) -> None:
        log.info("scheduling pods of %s (order %s%s)", sorted(self.names), self.order,
                 ", seed-compatible" if self.seed_compatible else "")
        while not stop.is_set():
            try:
                decision = self.schedule_one()
            except Exception:  # noqa: BLE001 - one bad pod must not stop the scheduler
                log.exception("scheduling cycle failed")
                decision = None
                stop.wait(idle_wait_s)
            if decision is None:
                stop.wait(idle_wait_s)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until no bind, event or condition patch is in flight (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self.inflight and not self._events_pending and not self._queued:
                    return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._event_pool.shutdown(wait=True, cancel_futures=False)
        # patches not yet sent are dropped: the next leader's first failed attempt on those pods writes them
        self._status_pool.shutdown(wait=True, cancel_futures=True)
        self._binds.close()
