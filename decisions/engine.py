"""The decision engine: the enabled agents' predicates and priorities over one call (a pod and the rows of
its candidate nodes), combined into verdicts, scores and the plan's preference, and explained.

Both front ends use it: the extender (extender/verbs.py answers kube-scheduler's calls in its wire format)
and ``kso scheduler`` (scheduler/core.py). Every call is answered from memory (ClusterState and the
agents): no solver, no API server and no Prometheus call happens here.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from decisions.agents import AGENTS
from decisions.agents.base import MAX_PRIORITY, Agent, Call, Predicate, PredicateResult, Priority
from decisions.agents.safe import SafeAgent
from decisions.metrics import DecisionMetrics
from decisions.sight import seen_nodes
from kso.core.cluster import ClusterState
from kso.core.logs import fields
from kso.core.objects import NodeInfo, ObjectError, PodInfo, PodMemo, node_from_k8s, pod_from_k8s
from kso.core.resources import CPU, MEMORY
from kso.core.stats import AnnotationStats, NodeStatsSource
from kso.core.views import LastKept, NodeView

log = logging.getLogger("kso.extender")


class InputError(ValueError):
    """An input kso cannot judge (a malformed Pod or Node, one past a bound); the message says what is wrong.
    ``kind`` labels the metric. The extender answers it with a 400 (its ProtocolError is one)."""

    def __init__(self, message: str, kind: str = "bad_request") -> None:
        super().__init__(message)
        self.kind = kind


class EngineConfig(Protocol):
    """What the engine reads of kso's configuration (extender.config.Config): the settings (agents, weights,
    filters, the per-node bounds) and each agent's parameters."""

    settings: Any
    agent_params: dict[str, Any]


class PlanSlots(Protocol):
    """The cached placement plan as the engine uses it (extender.plan_cache.PlanCache)."""

    def slots_for(self, pod: PodInfo) -> dict[str, int] | None: ...

    def consume(self, pod: PodInfo, node: str) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def age_s(self) -> float: ...

# np.clip(a, lo, hi) is this ufunc behind two Python wrappers (a numpy internal: the public function where it moved)
try:
    from numpy._core.umath import clip as _clip
except ImportError:
    _clip = np.clip


def names_ok(names: list[Any]) -> bool:
    """Every item exactly a str and none empty: node names as the protocol requires them (checked in C)."""
    return set(map(type, names)) <= {str} and "" not in names


def _merge(per_predicate: list[dict[int, str]]) -> dict[int, list[str]]:
    """index -> texts, in predicate order, from one index -> text map per predicate."""
    out: dict[int, list[str]] = {}
    for texts in per_predicate:
        for i, text in texts.items():
            out.setdefault(i, []).append(text)
    return out


@dataclass(slots=True)
class Verdicts:
    """What the predicates of one call said: per predicate (in order) failed index -> reason and
    index -> note (known nodes only), and the nodes no predicate can judge (no capacity)."""

    n: int
    reasons: list[dict[int, str]]
    unresolvable: dict[int, str]
    notes: list[dict[int, str]]

    def failed_lists(self) -> dict[int, list[str]]:
        return _merge(self.reasons)

    def failed_joined(self) -> dict[int, str]:
        """index -> the reasons of every predicate that failed it, "; "-joined, in index order of the first
        predicate that failed each node (the order a dict built predicate by predicate has)."""
        if len(self.reasons) == 1:
            return self.reasons[0]
        return {i: "; ".join(r) for i, r in _merge(self.reasons).items()}

    def passed(self) -> list[bool]:
        """Per node: no predicate failed it and it is not unresolvable."""
        if not self.reasons and not self.unresolvable:
            return [True] * self.n
        ok = np.ones(self.n, dtype=bool)
        for texts in (*self.reasons, self.unresolvable):
            if texts:
                ok[list(texts)] = False
        return ok.tolist()

    def n_failed(self) -> int:
        if not self.reasons:
            return len(self.unresolvable)
        if len(self.reasons) == 1 and not self.unresolvable:
            return len(self.reasons[0])
        return self.n - sum(self.passed())


def clamp_scores(scores: Any) -> np.ndarray:
    """An agent's scores as floats in 0..MAX_PRIORITY; NaN (an agent that could not judge) counts 0.

    min(fmax(s, 0), MAX): fmax takes the non-NaN operand, so NaN -> 0 in the same pass, several times faster
    than nan_to_num(clip(...)), once per priority per call."""
    return np.minimum(np.fmax(np.asarray(scores, dtype=float), 0.0), MAX_PRIORITY)


def run_guarded(what: str, fn: Any, call: Call, metrics: DecisionMetrics, verb: str) -> Any:
    """Run one agent function; an agent bug is logged and counted, and the agent sits this call out
    (kso must never block scheduling because one heuristic failed)."""
    try:
        return fn(call)
    except Exception:  # noqa: BLE001 - deliberately broad: any agent failure degrades, never 500s
        log.exception("%s failed for pod %s; ignoring it for this call", what, call.pod.key)
        metrics.errors.labels(verb, "agent_error").inc()
        return None


class DecisionEngine:
    """The agents of ``config`` over ``state``: verdicts (filter), scores (prioritize), preemption and explain."""

    def __init__(self, config: EngineConfig, state: ClusterState, stats: NodeStatsSource | None = None,
                 plan: PlanSlots | None = None, cache_bodies: bool = True, pod_memo: PodMemo | None = None) -> None:
        self.config = config
        # Pods parsed by uid and resourceVersion (filter, then prioritize, of the same pending pod); shared
        # with the watch in API mode, which parses each pending pod before kube-scheduler asks about it.
        self.pod_memo = pod_memo if pod_memo is not None else PodMemo()
        self.settings = config.settings
        self.state = state
        # False (API mode): the watched cache is the only source of cluster state; Nodes and Pods in
        # request bodies are judged for their call and never written into it. True (snapshot, demo):
        # a body's nodes refresh the cache and its pending pods are remembered, as the only source there is.
        self.cache_bodies = cache_bodies
        self.agents: dict[str, Agent] = {}
        for name in self.settings.agents:
            cls = AGENTS[name]
            params = config.agent_params[name]
            self.agents[name] = cls(params, stats) if cls is SafeAgent else cls(params)  # type: ignore[call-arg]
        self.predicates: dict[str, Predicate] = {}
        self.priorities: dict[str, Priority] = {}
        for agent in self.agents.values():
            self.predicates.update(agent.predicates)
            self.priorities.update(agent.priorities)
        wanted = self.settings.filters or list(self.predicates)
        unknown = [p for p in wanted if p not in self.predicates]
        if unknown:
            log.warning("KSO_FILTERS names predicates no enabled agent has: %s (ignored)", ", ".join(unknown))
        self.filters = [p for p in wanted if p in self.predicates]
        self.weights = {p: w for p, w in self.settings.weights.items() if p in self.priorities and w > 0}
        # see before you pack (decisions/sight.py): the weighted priorities that pack, and how far past what the
        # statistics saw they may still pull
        self.packing = frozenset(p for a in self.agents.values() for p in a.packing if p in self.weights)
        self.max_unseen = getattr(self.settings, "pack_unseen_max", 25) / 100.0
        self.stats: NodeStatsSource = stats or AnnotationStats()
        self.metrics = DecisionMetrics(state.age_seconds, lambda: float(len(state)))
        if isinstance(safe := self.agents.get("safe"), SafeAgent):  # held pods released, counted
            safe.released_total = self.metrics.safe_released
        self.forecast_status = getattr(getattr(stats, "store", None), "status", None)
        if self.forecast_status is not None:
            self.metrics.watch_forecasts(lambda: self.forecast_status)
        self.plan = plan
        # no_capacity's answer for the last store-wide view's alloc and known: never changed by a caller
        self._capacity_kept = LastKept()
        self._measured_kept = LastKept()  # sight()'s measured of the last store-wide view's statistics
        self._sight_kept = LastKept()  # sight()'s answer for the last read-only statistics, recent binds, allocatable
        # weights of the priorities that answered -> (those weights, _int_combined's table of rounded quotients)
        self._combine_tables: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        if plan is not None:
            self.metrics.plan_age.set_function(plan.age_s)
        log.info("%s", fields({"agents": list(self.agents), "filters": self.filters, "weights": self.weights}))

    # ---- inputs ------------------------------------------------------------------------------
    def parse_pod(self, pod: dict[str, Any], shared: bool = False) -> PodInfo:
        """The call's Pod object as a PodInfo (PodMemo's: parsed once per uid and resourceVersion, and once per
        object when ``shared``, a read-only object handed to every call that sent its bytes)."""
        try:
            info = self.pod_memo.parse(pod, shared)
        except ObjectError as exc:
            raise InputError(str(exc), "bad_pod") from None
        if not info.node_name and self.cache_bodies:
            self.state.remember_pending(info)
        return info

    def body_node(self, i: int, item: dict[str, Any]) -> NodeInfo:
        """Nodes.items[i] as a NodeInfo, within the per-node bounds (checked on the raw object first)."""
        s = self.settings
        meta, status, spec = (item.get(k) if isinstance(item.get(k), dict) else {} for k in ("metadata", "status", "spec"))
        alloc = status.get("allocatable") if status.get("allocatable") is not None else status.get("capacity")
        if isinstance(alloc, dict) and len(alloc) > s.max_resources_per_node:
            raise InputError(f"Nodes.items[{i}] lists {len(alloc)} resources, more than the {s.max_resources_per_node} "
                                "allowed (KSO_MAX_RESOURCES_PER_NODE)", "too_many_resources")
        images = status.get("images")
        names = sum(len(x) for x in (meta.get("labels"), meta.get("annotations"), spec.get("taints"))
                    if isinstance(x, (dict, list)))
        if isinstance(images, list):
            names += sum(len(img.get("names") or ()) for img in images if isinstance(img, dict)
                         and isinstance(img.get("names"), list))
        if names > s.max_names_per_node:
            raise InputError(f"Nodes.items[{i}] lists {names} labels, annotations, taints and image names, more "
                                f"than the {s.max_names_per_node} allowed (KSO_MAX_NAMES_PER_NODE)", "too_many_names")
        try:
            return node_from_k8s(item)
        except ObjectError as exc:
            raise InputError(f"Nodes.items[{i}]: {exc}", "bad_node") from None

    def resolve(self, nodes: list[dict[str, Any]] | None, node_names: list[str] | None) -> NodeView:
        """The call's nodes (Node objects, else names) as rows of the cache. Full Node objects in the call: with
        cache_bodies they refresh the cache when it does not have that resourceVersion yet; without, the cache's
        row is used for a node it knows and a node it does not know is judged from the body for this call only.
        ``node_names`` is never changed in place: the cache remembers its rows by the list's identity."""
        if nodes is not None:
            if not self.cache_bodies:
                # API mode, every node in the cache (the usual call): the names in one comprehension and the view,
                # without the per-item checks below (a cost per node), which would find every name good and known
                try:
                    names = [item["metadata"]["name"] for item in nodes]
                except (KeyError, TypeError):
                    names = []
                if (len(names) == len(nodes) and names_ok(names)
                        and (view := self.state.view(names)).all_known()):
                    return view
            names = []
            scratch: list[NodeInfo] = []
            for i, item in enumerate(nodes):
                meta = item.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                rv = meta.get("resourceVersion", "") if isinstance(meta, dict) else ""
                if not isinstance(name, str) or not name:
                    raise InputError(f"Nodes.items[{i}] has no metadata.name", "bad_node")
                if self.cache_bodies:
                    if not self.state.knows(name, rv if isinstance(rv, str) else ""):
                        self.state.upsert_node(self.body_node(i, item))
                elif not self.state.knows(name):
                    scratch.append(self.body_node(i, item))
                names.append(name)
            view = self.state.view(names)
            return view if not scratch else self._with_body_nodes(view, scratch)
        view = self.state.view(node_names or [])
        unknown = 0 if view.all_known() else view.unknown
        if unknown:
            self.metrics.unknown_nodes.inc(unknown)
            log.debug("%d node(s) not in the node cache; passed unjudged", unknown)
        return view

    def _with_body_nodes(self, view: NodeView, nodes: list[NodeInfo]) -> NodeView:
        """``view`` with the rows of the nodes the cache does not know filled from their Node objects, by a
        throw-away ClusterState of just those nodes (no pods: nothing is known to run there)."""
        s = self.settings
        scratch = ClusterState(max_resource_columns=s.max_resource_columns)
        for node in nodes:
            scratch.upsert_node(node)
        other = scratch.view(view.names)
        take = other.known
        merged = {}
        for field in ("mean_free", "std_free", "forecast_free", "recent", "congestion"):
            merged[field] = np.where(take.reshape((-1,) + (1,) * (getattr(view, field).ndim - 1)),
                                     getattr(other, field), getattr(view, field))
        alloc = view.alloc.copy()
        requested = view.requested.copy()
        for res, col in view.columns.items():
            o = other.columns.get(res)
            alloc[take, col] = other.alloc[take, o] if o is not None else 0.0
            requested[take, col] = 0.0
        node_list = [b if t else a for a, b, t in zip(view.nodes, other.nodes, take.tolist(), strict=True)]
        return NodeView(names=view.names, known=view.known | take, alloc=alloc, requested=requested,
                        columns=view.columns, node_list=node_list, image_node_count=view.image_node_count,
                        total_nodes=view.total_nodes, **merged)

    def no_capacity(self, view: NodeView) -> list[int]:
        """Known nodes with no allocatable cpu or memory (their indexes): nothing can be judged or placed there.
        Kept for the last read-only alloc (a store-wide view's: the same object is the same values); a call's view
        looks only when its store has such a node."""
        if view.whole is not None and not self.no_capacity(view.whole):
            return []
        found = self._capacity_kept.get(view.alloc, view.known)
        if found is None:
            found = self._capacity_kept.keep(self._no_capacity_of(view), view.alloc, view.known)
        return found

    @staticmethod
    def _no_capacity_of(view: NodeView) -> list[int]:
        alloc = view.alloc
        cpu, memory = alloc[:, view.columns[CPU]], alloc[:, view.columns[MEMORY]]
        # Every node with some of both (the usual call; an unknown node's NaN fails this): two reductions, not
        # five operations and a search. Two columns combined explicitly: a reduction along a row of two is ~10x
        # slower in numpy.
        if cpu.size and np.minimum.reduce(cpu) > 0 and np.minimum.reduce(memory) > 0:
            return []
        return np.flatnonzero(view.known & ~((cpu > 0) & (memory > 0))).tolist()

    # ---- filter ------------------------------------------------------------------------------
    def verdicts(self, call: Call, predicates: list[str], verb: str) -> Verdicts:
        """Run predicates over the call's nodes; unknown and unresolvable nodes are never failed by one."""
        view = call.view
        unresolvable: dict[int, str] = {}
        for i in self.no_capacity(view):
            unresolvable[i] = (f"node reports no allocatable cpu or memory (cpu {view.alloc[i, view.columns[CPU]]:g}m,"
                                    f" memory {view.alloc[i, view.columns[MEMORY]]:g} bytes); kso cannot place pods there")
        all_known = view.all_known()
        known: list[bool] | None = None
        reasons: list[dict[int, str]] = []
        notes: list[dict[int, str]] = []
        for name in predicates:
            res: PredicateResult | None = run_guarded(f"predicate {name}", self.predicates[name], call, self.metrics, verb)
            if res is None:
                continue
            failed, noted = res.reasons, res.notes
            if not all_known or unresolvable:
                if known is None:
                    known = view.known.tolist()
                # unknown nodes are passed, never judged on a sentinel row
                failed = {i: r for i, r in failed.items() if known[i] and i not in unresolvable}
                noted = {i: r for i, r in noted.items() if known[i]}
            if failed:
                self.metrics.child(self.metrics.filtered, name).inc(len(failed))
                reasons.append(failed)
            if noted:
                self.metrics.child(self.metrics.unjudged, name).inc(len(noted))
                notes.append(noted)
        if unresolvable:
            self.metrics.child(self.metrics.filtered, "no-capacity").inc(len(unresolvable))
        return Verdicts(len(view), reasons, unresolvable, notes)

    def judge(self, call: Call, predicates: list[str], verb: str) -> tuple[dict[int, list[str]], dict[int, str],
                                                                              dict[int, list[str]]]:
        """Run predicates; return failed index -> reasons, unresolvable index -> reason, notes."""
        v = self.verdicts(call, predicates, verb)
        return v.failed_lists(), v.unresolvable, _merge(v.notes)

    # ---- see before you pack ---------------------------------------------------------------------
    def _valid_stats(self, call: Call) -> np.ndarray:
        """(n, 2): load statistics exist for cpu / memory of each node (the safe agent's own inputs when it is
        enabled: the same statistics its filter judges by, kept read-only while the view's columns are the same)."""
        safe = self.agents.get("safe")
        if isinstance(safe, SafeAgent):
            return safe.inputs(call).valid
        return ~np.isnan(self.stats.free_stats(call.view).mean_free) & (call.view.stat_capacity() > 0)

    def sight(self, call: Call) -> tuple[np.ndarray, np.ndarray, bool]:
        """(measured, seen, every node seen) of the call's nodes (decisions/sight.py): measured taken by the call's
        rows from its store-wide view's where the statistics are the safe agent's annotations (kept for the same
        read-only statistics), seen from the call's recent binds; else from the call's view (kept for the same
        read-only statistics, recent binds and allocatable)."""
        got = call.memo.get("sight")
        if got is None:
            view = call.view
            valid = None if view.whole is None or view.rows is None else self._whole_valid(view.whole)
            if valid is not None and view.rows is not None:
                measured = self._measured_kept.get(valid)
                if measured is None:
                    measured = np.logical_and.reduce(valid, axis=1)
                    measured.flags.writeable = False
                    self._measured_kept.keep(measured, valid)
                measured = measured.take(view.rows)
                seen = seen_nodes(measured, view, self.max_unseen)
                got = (measured, seen, bool(np.logical_and.reduce(seen)))
            else:
                got = self._sight_of(view, self._valid_stats(call))
            call.memo["sight"] = got
        return got

    def _whole_valid(self, whole: NodeView) -> np.ndarray | None:
        """_valid_stats of a store-wide view (the pod plays no part), kept with the safe agent's SafeBase; None when
        the safe agent is not enabled or reads statistics of its own source."""
        safe = self.agents.get("safe")
        if not isinstance(safe, SafeAgent) or type(safe.stats) is not AnnotationStats:
            return None
        base = safe.whole_base(whole)
        return base.valid if base.inputs is None else base.inputs.valid

    def _sight_of(self, view: NodeView, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        got = self._sight_kept.get(valid, view.recent, view.alloc)
        if got is None:
            measured = np.logical_and.reduce(valid, axis=1) if valid.size else np.zeros(len(view), dtype=bool)
            seen = seen_nodes(measured, view, self.max_unseen)
            got = self._sight_kept.keep((measured, seen, bool(np.logical_and.reduce(seen))),
                                        valid, view.recent, view.alloc)
        return got

    def measured(self, call: Call) -> np.ndarray:
        """Per node of the call: load statistics exist for cpu and memory."""
        return self.sight(call)[0]

    def seen(self, call: Call) -> np.ndarray:
        """Per node of the call: measured, and not past KSO_PACK_UNSEEN_MAX of allocatable bound since (sight.py)."""
        return self.sight(call)[1]

    def withhold_packing(self, call: Call, name: str, scores: Any) -> Any:
        """A packing priority's scores with no pull (0) on the nodes kso cannot see yet."""
        _, seen, every = self.sight(call)
        if every:
            return scores
        self.metrics.packing_withheld.inc(len(seen) - int(np.count_nonzero(seen)))
        return np.where(seen, np.asarray(scores), 0)

    # ---- prioritize --------------------------------------------------------------------------
    def scores(self, call: Call, verb: str, per_agent: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The weighted mean of the priorities, rounded half up, 0 for a node the cache does not know; with
        ``per_agent`` also each priority's clamped scores (explain's)."""
        n = len(call.view)
        got: list[tuple[int, str, Any]] = []
        for name, w in self.weights.items():
            s = run_guarded(f"priority {name}", self.priorities[name], call, self.metrics, verb)
            if s is not None:
                if name in self.packing:
                    s = self.withhold_packing(call, name, s)
                got.append((w, name, s))
        per: dict[str, np.ndarray] = {}
        if not per_agent and got and all(isinstance(s, np.ndarray) and s.dtype.kind == "i" and s.shape == (n,)
                                         for _, _, s in got):
            combined = self._int_combined(got, n)
        else:
            total = np.zeros(n)
            weight_sum = 0
            for w, name, s in got:
                s = clamp_scores(s)
                if per_agent:
                    per[name] = s
                total += w * s
                weight_sum += w
            combined = np.floor(total / weight_sum + 0.5) if weight_sum else np.zeros(n)
        # A node the cache does not know gets no preference: kso cannot judge it.
        if not call.view.all_known():
            combined = np.where(call.view.known, combined, 0)
        return combined.astype(int), per

    def _int_combined(self, got: list[tuple[int, str, Any]], n: int) -> np.ndarray:
        """_scores' floor(sum w s / sum w + 0.5) when every priority gave integers (every built-in agent does):
        clamped to 0..MAX_PRIORITY in one array and the weighted sum taken in integers, which is exactly the float
        sum (integers far below 2**53, whatever the order), so the same floats would be divided; the rounded quotient
        of each possible sum 0..MAX_PRIORITY * sum w is in a table made by those very float operations (per set of
        weights): 4 numpy calls in all."""
        weights = tuple(w for w, _, _ in got)
        kept = self._combine_tables.get(weights)
        if kept is None:
            total = sum(weights)
            kept = self._combine_tables[weights] = (
                np.array(weights, dtype=np.int64),
                np.floor(np.arange(MAX_PRIORITY * total + 1, dtype=np.int64) / total + 0.5))
        scores = np.concatenate([s for _, _, s in got], dtype=np.int64).reshape(len(got), n)
        _clip(scores, 0, MAX_PRIORITY, out=scores)
        return kept[1].take(np.dot(kept[0], scores))

    def plan_nodes(self, call: Call) -> np.ndarray | None:
        """Nodes of the call with a free plan slot for the pod's class; None when the plan has nothing."""
        if self.plan is None:
            return None
        slots = self.plan.slots_for(call.pod)
        if slots is None:
            self.metrics.child(self.metrics.plan_decisions, "none").inc()
            return None
        free = {n for n, k in slots.items() if k > 0}
        hit = np.fromiter(map(free.__contains__, call.view.names), dtype=bool, count=len(call.view))
        hit &= self.measured(call)  # the plan pulls only onto nodes whose load is measured (sight.py)
        some = bool(np.logical_or.reduce(hit))
        self.metrics.child(self.metrics.plan_decisions, "hit" if some else "miss").inc()
        return hit if some else None

    # Plan first: nodes with a free slot of the pod's class get the top score (10) and every other node
    # half its heuristic score (0..5), so that, at the deployment's extender weight (5, x10 per point),
    # the plan's 250-point lead outweighs the default profile's resource scores (at most 200 apart).
    # The heuristic agents still rank the other nodes, and decide alone when the plan has no slot.
    @staticmethod
    def apply_plan(combined: np.ndarray, hit: np.ndarray | None) -> np.ndarray:
        if hit is None:
            return combined
        return np.where(hit, MAX_PRIORITY, combined // 2)

    def ranked(self, call: Call) -> np.ndarray:
        """prioritize's scores of the call's nodes, an int array 0..MAX_PRIORITY: the rounded weighted mean of the
        priorities (0 for a node the cache does not know), halved or MAX_PRIORITY by the plan."""
        combined, _ = self.scores(call, "prioritize", per_agent=False)
        return self.apply_plan(combined, self.plan_nodes(call))

    def priority_scores(self, name: str, call: Call) -> list[int]:
        """One agent priority, raw: clamped to 0..MAX_PRIORITY, all 0 when it failed."""
        s = run_guarded(f"priority {name}", self.priorities[name], call, self.metrics, "prioritize")
        return [0] * len(call.view) if s is None else clamp_scores(s).astype(int).tolist()

    # ---- placing -----------------------------------------------------------------------------
    def place(self, pod: PodInfo, node: str) -> None:
        """A pod bound (or about to be) to ``node``: it counts there at once, and takes its plan slot."""
        self.state.assume(pod, node)
        if self.plan is not None:
            self.plan.consume(pod, node)

    # ---- preempt -----------------------------------------------------------------------------
    def preemption_survivors(self, pod: PodInfo, candidates: dict[str, Any]) -> list[str]:
        """The candidate nodes (name -> victims: ``uids``, and ``pods``, their Pod objects, or None) on which
        the pod would be safe once the victims are gone, in the candidates' order."""
        names = list(candidates)
        view = self.state.view(names)
        freed = np.zeros_like(view.requested)
        for i, name in enumerate(names):
            victims = candidates[name]
            for j, uid in enumerate(victims.uids):
                if victims.pods is not None:
                    try:
                        requests = pod_from_k8s(victims.pods[j]).requests
                    except ObjectError as exc:
                        raise InputError(f"NodeNameToVictims[{name}].Pods[{j}]: {exc}", "bad_pod") from None
                else:
                    known = self.state.pods.get(uid)
                    # An unknown victim frees nothing in our books: the conservative reading.
                    requests = known.requests if known else {}
                for res, value in requests.items():
                    col = view.columns.get(res)
                    if col is not None:
                        freed[i, col] += value
        call = Call(pod, view, freed=freed)
        failed, unresolvable, _ = self.judge(call, self.filters, "preempt")
        kept = []
        for i, name in enumerate(names):
            if i in failed or i in unresolvable:
                log.debug("preempt %s: dropping candidate %s: %s", pod.key, name,
                          "; ".join(failed.get(i, [])) or unresolvable.get(i))
            else:
                kept.append(name)
        return kept

    # ---- explain -----------------------------------------------------------------------------
    def explain(self, pod: PodInfo, view: NodeView) -> dict[str, Any]:
        """Why each node passed or failed and what each agent scored, ranked as the scheduler would."""
        call = Call(pod, view)
        failed, unresolvable, notes = self.judge(call, self.filters, "explain")
        combined, per = self.scores(call, "explain")
        slots = self.plan.slots_for(pod) if self.plan is not None else None
        measured = self.measured(call)
        seen = self.seen(call) if self.packing else measured
        hit = np.array([bool(slots and slots.get(n, 0) > 0) for n in view.names], dtype=bool) & measured
        combined = self.apply_plan(combined, hit if hit.any() else None)
        weight_sum = sum(self.weights[p] for p in per) or 1
        details: dict[str, dict[str, Any]] = {}  # agent -> per-node values
        call_wide: dict[str, dict[str, Any]] = {}  # agent -> values of the whole call
        for name, agent in self.agents.items():
            try:
                d = agent.explain(call)
            except Exception as exc:  # noqa: BLE001 - explain must always answer
                d = {"error": str(exc)}
            per_node = agent.explain_per_node
            details[name] = {k: v for k, v in d.items() if k in per_node and isinstance(v, list) and len(v) == len(view)}
            call_wide[name] = {k: v for k, v in d.items() if k not in details[name]}
        rows = []
        for i, node in enumerate(view.names):
            weighted = sum(self.weights[p] * float(s[i]) for p, s in per.items()) / weight_sum
            rows.append({
                "node": node,
                "known": bool(view.known[i]),
                "passed": i not in failed and i not in unresolvable,
                "reasons": failed.get(i, []) + ([unresolvable[i]] if i in unresolvable else []),
                "notes": notes.get(i, []) + ([] if view.known[i] else ["not in the node cache: passed unjudged, score 0"])
                         + ([] if seen[i] or not self.packing or not view.known[i] else
                            [f"load not {'seen past recent binds' if measured[i] else 'measured'}: "
                             f"{', '.join(sorted(self.packing))} withheld (see before you pack)"]),
                "scores": {p: int(s[i]) for p, s in per.items()},
                "weighted_mean": round(weighted, 4),
                "score": int(combined[i]),
                "plan_slots": int(slots.get(node, 0)) if slots else 0,
                "details": {a: {k: v[i] for k, v in d.items()} for a, d in details.items()},
            })
        rows.sort(key=lambda r: (not r["passed"], -r["score"], -r["weighted_mean"]))
        return {
            "pod": pod.key,
            "uid": pod.uid,
            "requests": pod.requests,
            "filters": self.filters,
            "weights": self.weights,
            "winner": rows[0]["node"] if rows and rows[0]["passed"] else None,
            "nodes": rows,
            "agents": call_wide,
            "plan": self.plan.describe() if self.plan is not None else None,
            "cache": {"source": self.state.source, "synced": self.state.synced,
                      "age_s": None if math.isinf(a := self.state.age_seconds()) else round(a, 3)},
            "at": time.time(),
        }
