"""The capacity signal's decision: which pending pods the safe agent refuses on every node it was offered, which
nodes are hot for each (with hysteresis), and so which placeholders the cluster should hold (kso.core.capacity
writes them).

The rule, per refused pod p still pending, re-judged every tick with the safe agent's current risk, P(util > U*)
with p's demand, of each node p was refused on (in any filter call while pending) that kube-scheduler could still
offer it (its placement rules allow it and its requests fit):

* a node becomes hot for p when its risk is above eps (the safe filter refuses p there);
* a hot node cools when its risk is at most ``exit_ratio`` x eps and it has not been above eps for ``min_hot_s``
  (hysteresis: forecast noise around eps does not make placeholders come and go);
* p gets a placeholder while every such node is hot for it; the placeholder avoids exactly those nodes. (No such
  node at all: kube-scheduler itself finds p unschedulable, which the autoscaler reads without kso.)

A pod that is bound or deleted (the watch) is forgotten at once, and its placeholder with it: deleted between rounds
(``CapacitySignal.release``, every RELEASE_EVERY_S), not at the next round.

Node marks (``KSO_CAPACITY_KEEP_NODES``): the autoscaler removes a node whose requests are below its threshold when
its pods fit elsewhere by requests, even where the safe agent refuses them; drained, they are pending, refused, and
order a node back. So every tick each node whose requested cpu or memory is below ``keep_below`` of allocatable
(only such a node can be removed), or that kso marked, is judged: it is *needed* while one of the pods the
autoscaler would move off it (not a placeholder, a DaemonSet's or a mirror pod) is refused by the safe agent
(risk > eps) on every other node kube-scheduler could offer it, and there is such a node (none: the autoscaler's own
drain check keeps the node). A needed node is marked scale-down-disabled and keeps the mark ``keep_hold_s`` after it
was last needed; then the mark goes and the cluster can shrink.
``CapacityDecision.step`` is pure (its inputs and its own hysteresis state); ``CapacitySignal`` runs it
against the live engine and cluster.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from decisions.agents.base import Call, PredicateResult
from decisions.agents.safe import RELEASE_NOTE, SafeAgent
from kso.core.capacity import (
    HOSTNAME,
    ApplyResult,
    CapacityReconciler,
    CapacitySettings,
    PlaceholderSpec,
    exclusion_digest,
    is_placeholder,
)
from kso.core.capacity_marks import NodeMarker, live_holders_everywhere
from kso.core.cluster import ClusterState
from kso.core.objects import PodInfo
from kso.core.placement import rule_violation
from kso.core.views import NodeView

log = logging.getLogger("kso.capacity")

# How often the placeholders of pods kso's watch sees bound (or deleted) are looked for and deleted, between rounds,
# seconds: a placeholder outliving its pod's bind shows the autoscaler demand that is gone, and rounds come every
# KSO_CAPACITY_INTERVAL_S (10 s) and at 1,000 refused pods take seconds themselves (placeholders outlived their
# pod's bind by up to 47 s when only rounds deleted them). A look is a set of the pending pods' uids against this
# kso's placeholders (at most KSO_CAPACITY_MAX_PLACEHOLDERS).
RELEASE_EVERY_S = 0.5

_RELEASE_HEAD = RELEASE_NOTE.split("{", 1)[0]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A pod the safe agent refused on every node of a filter call: the pod, and every node it was refused on while
    pending (kube-scheduler offers a large cluster's nodes a sample at a time: the samples add up)."""

    pod: PodInfo
    nodes: tuple[str, ...]
    first_at: float  # the first such verdict for this pod (placeholders are ordered by it)


@dataclass
class CapacityDecision:
    """The pure rule above. ``eps`` is the safe agent's; the other numbers are CapacitySettings'."""

    eps: float
    exit_ratio: float = 0.8
    min_hot_s: float = 60.0
    max_placeholders: int = 200
    # uid -> node -> the last time the node's risk for that pod was above eps (the node is hot for it)
    hot: dict[str, dict[str, float]] = field(default_factory=dict)

    def step(self, now: float, refusals: Iterable[Refusal], risks: Mapping[str, Mapping[str, float]]
             ) -> list[PlaceholderSpec]:
        """The placeholders wanted now. ``refusals``: the refused pods still pending; ``risks[uid]``: each of that
        pod's offered nodes that still exists -> its current risk for the pod (a missing node is gone)."""
        exit_risk = self.eps * self.exit_ratio
        wanted: list[tuple[float, PlaceholderSpec]] = []
        seen: set[str] = set()
        for refusal in refusals:
            uid = refusal.pod.uid
            seen.add(uid)
            current = risks.get(uid, {})
            hot = self.hot.setdefault(uid, {})
            for node in [n for n in hot if n not in current]:
                del hot[node]
            for node, risk in current.items():
                if risk > self.eps:
                    hot[node] = now
                elif node in hot and risk <= exit_risk and now - hot[node] >= self.min_hot_s:
                    del hot[node]
            if current and all(node in hot for node in current):
                wanted.append((refusal.first_at, spec_for(refusal.pod, tuple(sorted(current)))))
        for uid in [u for u in self.hot if u not in seen]:
            del self.hot[uid]
        wanted.sort(key=lambda item: (item[0], item[1].for_key))
        return [spec for _, spec in wanted[: self.max_placeholders]]

    def hot_nodes(self) -> set[str]:
        """Every node hot for some refused pod."""
        return {node for nodes in self.hot.values() for node in nodes}


def spec_for(pod: PodInfo, avoid: tuple[str, ...]) -> PlaceholderSpec:
    """The placeholder of ``pod``: its requests and hard placement rules, and the nodes to avoid."""
    return PlaceholderSpec(
        for_uid=pod.uid, for_key=pod.key, requests=tuple(sorted(pod.requests.items())), avoid=avoid,
        node_selector=tuple(sorted(pod.node_selector.items())),
        tolerations=tuple((t.key, t.operator, t.value, t.effect) for t in pod.tolerations),
        required_terms=pod.required_terms)


def refused_everywhere(result: PredicateResult) -> bool:
    """The safe filter refused every node of the call (a node passed only by the bounded hold's release counts as
    refused: the pod goes there because nothing better exists)."""
    n = len(result.passed)
    if n == 0:
        return False
    released = sum(1 for note in result.notes.values() if note.startswith(_RELEASE_HEAD))
    return len(result.reasons) + released == n


class RefusalLog:
    """The pods the safe agent refused on every node, as its filter answers them (``watch`` wraps the engine's
    ``safe-overload`` predicate; its answers are unchanged)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._refusals: dict[str, Refusal] = {}

    def watch(self, engine: Any, predicate: str = "safe-overload") -> bool:
        """Record the refusals of ``engine``'s safe filter; False when the engine has none."""
        original = engine.predicates.get(predicate)
        if original is None:
            return False

        def recorded(call: Call) -> PredicateResult:
            result: PredicateResult = original(call)
            # (a preemption call, with victims freed, judges a subset of nodes for another question: not recorded)
            if call.freed is None and refused_everywhere(result) and not is_placeholder(call.pod):
                self.record(call.pod, call.view.names)
            return result

        engine.predicates[predicate] = recorded
        return True

    def record(self, pod: PodInfo, nodes: Iterable[str]) -> None:
        with self._lock:
            old = self._refusals.get(pod.uid)
            if old is None:
                self._refusals[pod.uid] = Refusal(pod, tuple(dict.fromkeys(nodes)), self.clock())
            else:
                self._refusals[pod.uid] = Refusal(pod, tuple(dict.fromkeys((*old.nodes, *nodes))), old.first_at)

    def pending(self, still_pending: Callable[[str], bool]) -> list[Refusal]:
        """The refusals of pods still pending; the others are forgotten."""
        with self._lock:
            for uid in [u for u in self._refusals if not still_pending(u)]:
                del self._refusals[uid]
            return list(self._refusals.values())


def feasible(pod: PodInfo, view: NodeView) -> np.ndarray:
    """Nodes of ``view`` kube-scheduler could still offer the pod: known, its hard placement rules allowed
    (kso.core.placement) and its requests fitting what is left of the allocatable (bool per node)."""
    ok = view.known.copy()
    for resource, value in pod.requests.items():
        col = view.columns.get(resource)
        if col is not None and value > 0:
            with np.errstate(invalid="ignore"):
                ok &= view.alloc[:, col] - view.requested[:, col] >= value
    for i in np.flatnonzero(ok).tolist():
        node = view.nodes[i]
        if node is None or rule_violation(pod, node) is not None:
            ok[i] = False
    return ok


def node_risks(agent: SafeAgent, state: ClusterState, refusal: Refusal) -> dict[str, float]:
    """Each node the pod was refused on that kube-scheduler could still offer it -> the safe agent's risk of it for
    the pod now (the larger of cpu's and memory's; 0 where it has no statistics: the filter passes it unjudged)."""
    view = state.view(refusal.nodes)
    if not len(view):
        return {}
    s = agent.inputs(Call(refusal.pod, view))
    risk = np.where(s.valid, s.risk, 0.0).max(axis=1)
    ok = feasible(refusal.pod, view)
    return {name: float(r) for name, r, keep in zip(view.names, risk.tolist(), ok.tolist(), strict=True) if keep}


MIRROR_POD = "kubernetes.io/config.mirror"  # the kubelet's annotation on a static pod's mirror


def moved_by_drain(pod: PodInfo) -> bool:
    """A pod the autoscaler's scale-down would move to another node: not a placeholder (kso's own, recreated
    anywhere), a DaemonSet's (it runs on every node) or a static pod's mirror (it stays with its node)."""
    return not (is_placeholder(pod) or pod.owner_kind == "DaemonSet" or MIRROR_POD in pod.annotations)


def refused_on_every_other(agent: SafeAgent, view: NodeView, pod: PodInfo, offerable: np.ndarray | None = None,
                           but: int | None = None) -> bool:
    """The safe agent refuses ``pod`` (risk > eps) on every node of ``view`` kube-scheduler could offer it
    (``offerable``, default ``feasible``) but row ``but`` (the node it runs on), and there is at least one such node.
    The agent judges each node on its own row, so leaving a row out is the same as a view without it."""
    ok = feasible(pod, view) if offerable is None else offerable
    if but is not None:
        ok = ok.copy()
        ok[but] = False
    if not ok.any():
        return False
    failed, _ = agent.inputs(Call(pod, view)).over(agent.eps)
    return bool(failed.any(axis=1)[ok].all())


def requested_share(view: NodeView) -> np.ndarray:
    """Per node of ``view``, the larger of its requested cpu and memory as a fraction of allocatable (the
    autoscaler's utilisation; 0 where a resource is unknown)."""
    share = np.zeros(len(view))
    for resource in ("cpu", "memory"):
        col = view.columns.get(resource)
        if col is None:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = view.requested[:, col] / view.alloc[:, col]
        share = np.maximum(share, np.where(np.isfinite(frac), frac, 0.0))
    return share


def needed_nodes(agent: SafeAgent, state: ClusterState, below: float, marked: Iterable[str] = ()) -> set[str]:
    """The nodes needed now (the rule in the module's docstring), among those under ``below`` or in ``marked``."""
    names = state.node_names()
    marked = set(marked)
    view = state.view(names)  # one view of every node: each pod judged on the others by leaving its own row out
    share = requested_share(view)
    needed = set()
    for i, name in enumerate(names):
        if not (share[i] < below or name in marked):
            continue
        if any(refused_on_every_other(agent, view, pod, but=i) for pod in state.pods_on(name) if moved_by_drain(pod)):
            needed.add(name)
    return needed


@dataclass
class KeepDecision:
    """Which nodes carry the mark: every node needed within the last ``hold_s`` that still exists."""

    hold_s: float = 3600.0
    needed_at: dict[str, float] = field(default_factory=dict)  # node -> the last time it was needed

    def step(self, now: float, needed: Iterable[str], existing: Iterable[str]) -> set[str]:
        existing = set(existing)
        for node in needed:
            self.needed_at[node] = now
        for node in [n for n in self.needed_at if n not in existing]:
            del self.needed_at[node]  # a deleted Node's annotations are gone with it
        return {node for node, at in self.needed_at.items() if now - at <= self.hold_s}


class CapacityMetrics:
    """The signal on kso's /metrics: what it asks for now, and what it wrote."""

    def __init__(self, registry: Any, signal: CapacitySignal) -> None:
        from prometheus_client import Counter, Gauge

        Gauge("kso_capacity_refused_pods", "Pending pods the safe agent refused on every node they were offered",
              registry=registry).set_function(lambda: float(signal.refused))
        Gauge("kso_capacity_placeholders", "Placeholder pods the capacity signal wants (each a refused pod's demand)",
              registry=registry).set_function(lambda: float(len(signal.wanted)))
        Gauge("kso_capacity_hot_nodes", "Nodes hot for at least one refused pod (hysteresis included)",
              registry=registry).set_function(lambda: float(len(signal.decision.hot_nodes())))
        Gauge("kso_capacity_kept_nodes", "Nodes kso wants marked scale-down-disabled (KSO_CAPACITY_KEEP_NODES)",
              registry=registry).set_function(lambda: float(len(signal.kept)))
        self.writes = Counter("kso_capacity_placeholder_writes_total",
                              "Placeholder pods written, by action: created, deleted, failed, reaped (another kso's, "
                              "its Lease expired), released (deleted between rounds: its pod was bound or deleted)",
                              ["action"], registry=registry)
        self.released = self.writes.labels("released")
        self.rounds = Counter("kso_capacity_rounds_total", "Rounds of the capacity signal (each re-judges every "
                              "refused pod and writes the placeholders)", registry=registry)
        self.cpu = Counter("kso_capacity_cpu_seconds_total", "CPU time of the capacity signal's own threads (its "
                           "rounds, and the prompt release of the placeholders of bound pods), seconds",
                           registry=registry)

        self.bound = Counter("kso_capacity_placeholders_bound_total",
                             "Placeholder pods found bound to a node (none should ever be: no scheduler serves them, "
                             "admission refuses their binding), each deleted at once", registry=registry)

    def count(self, result: ApplyResult, reaped: list[str]) -> None:
        if result.bound:
            self.bound.inc(len(result.bound))
        for action, names in (("created", result.created), ("deleted", result.deleted), ("failed", result.failed),
                              ("reaped", reaped)):
            if names:
                self.writes.labels(action).inc(len(names))


class CapacitySignal:
    """The loop: every ``interval_s`` re-judge the refused pods still pending, step the decision, write the
    placeholders (kso.core.capacity), and delete what gone kso instances left. Cleans up on start and stop."""

    def __init__(self, engine: Any, state: ClusterState, reconciler: CapacityReconciler,
                 settings: CapacitySettings, clock: Callable[[], float] = time.time, registry: Any = None) -> None:
        safe = engine.agents.get("safe")
        if not isinstance(safe, SafeAgent):
            raise ValueError("KSO_CAPACITY_SIGNAL needs the safe agent (KSO_AGENTS)")
        self.agent = safe
        self.state = state
        self.reconciler = reconciler
        self.settings = settings
        self.clock = clock
        self.log = RefusalLog(clock)
        self.log.watch(engine)
        self.decision = CapacityDecision(eps=safe.eps, exit_ratio=settings.exit_ratio, min_hot_s=settings.min_hot_s,
                                         max_placeholders=settings.max_placeholders)
        self.wanted: list[PlaceholderSpec] = []
        # pod uid -> the nodes its placeholder excludes, their digest, their names
        self.excluded: dict[str, tuple[tuple[tuple[str, str], ...], str, frozenset[str]]] = {}
        self.keep = KeepDecision(settings.keep_hold_s) if settings.keep_nodes else None
        self.marker = NodeMarker(reconciler.core.api_client, reconciler.owner.identity) if settings.keep_nodes else None
        self.kept: set[str] = set()  # the nodes marked scale-down-disabled, as decided at the last round
        self.refused = 0  # refused pods still pending, at the last round
        self.metrics = CapacityMetrics(engine.metrics.registry if registry is None else registry, self)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._releaser = threading.Thread()
        self._life = threading.Lock()  # start and stop, from the serving thread and the leader-election thread

    def current_nodes(self) -> tuple[tuple[str, str], ...]:
        """(name, kubernetes.io/hostname label or "") of every node in the cluster now."""
        out = []
        for name in self.state.node_names():
            node = self.state.node(name)
            out.append((name, node.labels.get(HOSTNAME, "") if node is not None else ""))
        return tuple(sorted(out))

    def excluding(self, specs: list[PlaceholderSpec]) -> list[PlaceholderSpec]:
        """Each placeholder with the nodes it excludes: every node there was when it was made (so no existing node
        fits it, whatever kube-scheduler refused the pod there for: ports, inter-pod affinity, topology spread,
        volumes, claims), kept while it covers every node hot for the pod (a node added later is not excluded
        until kso refuses the pod there too: then every current node again, in a new placeholder)."""
        nodes: tuple[tuple[str, str], ...] | None = None
        out = []
        for spec in specs:
            exclude, digest, names = self.excluded.get(spec.for_uid, ((), "", frozenset()))
            if not digest or not names.issuperset(spec.avoid):
                nodes = self.current_nodes() if nodes is None else nodes
                known = {name for name, _ in nodes}
                exclude = tuple(sorted({*nodes, *((n, "") for n in spec.avoid if n not in known)}))
                digest, names = exclusion_digest(exclude), frozenset(name for name, _ in exclude)
                self.excluded[spec.for_uid] = (exclude, digest, names)
            out.append(replace(spec, exclude=exclude, exclude_digest=digest))
        wanted = {spec.for_uid for spec in specs}
        for uid in [u for u in self.excluded if u not in wanted]:
            del self.excluded[uid]
        return out

    def _pending_uids(self) -> set[str]:
        return {p.uid for p in self.state.pending_pods()}

    def _still_pending(self, uid: str) -> bool:
        pod = self.state.pending_pod(uid=uid)
        return pod is not None and not pod.node_name

    def release(self) -> list[str]:
        """Start deleting each placeholder whose pod kso's watch no longer sees pending (bound or deleted): between
        rounds, every RELEASE_EVERY_S."""
        if not self.reconciler.held:
            return []
        pending = self._pending_uids()
        started = self.reconciler.release(pending.__contains__, lambda name: self.metrics.released.inc())
        if started:
            log.info("capacity: deleting %d placeholders: their pods were bound or deleted", len(started))
        return started

    def tick(self) -> list[PlaceholderSpec]:
        """One round: decide and write. Returns the placeholders wanted."""
        pending = self._pending_uids()
        refusals = self.log.pending(pending.__contains__)
        risks = {r.pod.uid: node_risks(self.agent, self.state, r) for r in refusals}
        self.wanted = self.excluding(self.decision.step(self.clock(), refusals, risks))
        self.refused = len(refusals)
        # Gone instances' placeholders first: one of the same refused pod and nodes has the name this kso's would
        # have (it is "kept", not created, while it exists), so deleting it after would leave no signal for a round.
        live = self.reconciler.live_holders()
        reaped = self.reconciler.reap(live)
        result = self.reconciler.apply(self.wanted, live, self._still_pending)
        self.metrics.count(result, reaped)
        if self.keep is not None and self.marker is not None:
            needed = needed_nodes(self.agent, self.state, self.settings.keep_below, self.marker.marked)
            self.kept = self.keep.step(self.clock(), needed, self.state.node_names())
            nodes = self.marker.nodes()  # one listing for both (a mark reap takes off still shows in it: next round)
            # Marks are cluster-wide, Leases per install: a mark is another install's while that install's Lease
            # is current in its own namespace (judged against this namespace alone, two installs took each other's
            # marks off every round).
            everywhere = live_holders_everywhere(self.reconciler)
            if everywhere is not None:
                self.marker.reap(live | everywhere, nodes)
            self.marker.apply(self.kept, nodes)
        return self.wanted

    def start(self) -> CapacitySignal:
        """Run the loop (its first step deletes what this kso left before a restart, which keeps the identity, and
        what gone instances left) and the prompt release beside it. A stopped signal starts again (``kso
        scheduler``: each term as leader)."""
        with self._life:
            if self._thread is None:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._stop,), name="kso-capacity",
                                                daemon=True)
                self._releaser = threading.Thread(target=self._run_release, args=(self._stop,),
                                                  name="kso-capacity-release", daemon=True)
                self._thread.start()
                self._releaser.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None

    def clean_start(self) -> None:
        cleared = self.reconciler.clear()
        if self.marker is not None:
            self.marker.clear()
        reaped = self.reconciler.reap()
        log.info("capacity signal on: placeholders in %s as %s (left from before: %d deleted, of gone instances: %d)",
                 self.settings.namespace, self.reconciler.owner.identity, len(cleared), len(reaped))

    def _run(self, stop: threading.Event) -> None:
        started = False
        while not stop.is_set():
            cpu = time.thread_time()
            try:
                if not started:
                    self.clean_start()
                    started = True
                self.tick()
            except Exception as exc:  # the API may be away for a while; the next round tries again
                log.warning("capacity: round failed: %s: %s", type(exc).__name__, exc)
            finally:
                self.metrics.rounds.inc()
                self.metrics.cpu.inc(time.thread_time() - cpu)
            stop.wait(self.settings.interval_s)

    def _run_release(self, stop: threading.Event) -> None:
        while not stop.wait(RELEASE_EVERY_S):
            cpu = time.thread_time()
            try:
                self.release()
            except Exception as exc:  # the round tries again (and deletes what is left)
                log.warning("capacity: releasing the placeholders of bound pods failed: %s: %s",
                            type(exc).__name__, exc)
            self.metrics.cpu.inc(time.thread_time() - cpu)

    def stop(self) -> None:
        """Stop the loop and delete this kso's placeholders and Lease (once: a second call finds it stopped)."""
        with self._life:
            thread, self._thread = self._thread, None
            if thread is None:
                return
            self._stop.set()
            thread.join(timeout=30)
            self._releaser.join(timeout=30)
            self.reconciler.close()
            try:
                deleted = self.reconciler.clear()
                log.info("capacity signal off: %d placeholders deleted", len(deleted))
            except Exception as exc:
                log.warning("capacity: clean-up on stop failed (another kso deletes them once the Lease expires): "
                            "%s", exc)
            if self.marker is not None and self.keep is not None:
                self.kept = set()
                self.keep.needed_at.clear()  # the next term judges afresh
                try:
                    log.info("capacity: scale-down-disabled marks taken off %d nodes", len(self.marker.clear()))
                except Exception as exc:
                    log.warning("capacity: taking the node marks off on stop failed (another kso takes them off once "
                                "the Lease expires): %s", exc)


def capacity_signal(engine: Any, state: ClusterState, api_client: Any, settings: CapacitySettings,
                    registry: Any = None) -> CapacitySignal | None:
    """The capacity signal of a kso (``kso extender``, ``kso scheduler``), not started; its gauges go to
    ``registry`` (default: the engine's). None without an API server (a snapshot or the demo cluster: nothing to
    signal to; logged). Exits when the engine has no safe agent: the signal is the safe agent's refusals."""
    if api_client is None:
        log.warning("KSO_CAPACITY_SIGNAL is on but the cluster source is not the API server: no capacity signal")
        return None
    if not isinstance(engine.agents.get("safe"), SafeAgent):
        raise SystemExit("kso: KSO_CAPACITY_SIGNAL needs the safe agent (add safe to KSO_AGENTS)")
    return CapacitySignal(engine, state, CapacityReconciler(api_client, settings), settings, registry=registry)


def start_capacity_signal(engine: Any, state: ClusterState, api_client: Any,
                          settings: CapacitySettings) -> Callable[[], None]:
    """Start the capacity signal of a running kso (its stop function is returned; see capacity_signal)."""
    signal = capacity_signal(engine, state, api_client, settings)
    return (lambda: None) if signal is None else signal.start().stop
