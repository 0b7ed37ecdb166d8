"""The extender's decisions, independent of HTTP: filter, prioritize, bind, preempt and explain.

Every call is answered from memory (ClusterState and the enabled agents): no solver, no API server
and no Prometheus call happens here, except bind, whose job is the API call.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np
import orjson

from extender.agents import AGENTS
from extender.agents.base import MAX_PRIORITY, Agent, Call, Predicate, PredicateResult, Priority
from extender.agents.safe import SafeAgent
from extender.config import Config
from extender.metrics import ExtenderMetrics
from extender.plan_cache import PlanCache
from extender.protocol import KNOWN_PODS, BindingArgs, ExtenderArgs, Limits, PreemptionArgs, ProtocolError, names_ok
from kso.core.binder import AsyncBinder, Binder, BindError
from kso.core.cluster import ClusterState, LastKept, NodeView
from kso.core.logs import fields
from kso.core.objects import NodeInfo, ObjectError, PodInfo, PodMemo, node_from_k8s, pod_from_k8s
from kso.core.resources import CPU, MEMORY
from kso.core.stats import NodeStatsSource

log = logging.getLogger("kso.extender")

# np.clip(a, lo, hi) is this ufunc behind two Python wrappers (a numpy internal: the public function where it moved)
try:
    from numpy._core.umath import clip as _clip
except ImportError:
    _clip = np.clip


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

    min(fmax(s, 0), MAX): fmax takes the non-NaN operand, so NaN -> 0 in the same pass; one fifth of the
    time of nan_to_num(clip(...)) at 100 nodes (2.2 vs 11.7 us, x5 priorities per call)."""
    return np.minimum(np.fmax(np.asarray(scores, dtype=float), 0.0), MAX_PRIORITY)


def _safe_call(what: str, fn: Any, call: Call, metrics: ExtenderMetrics, verb: str) -> Any:
    """Run one agent function; an agent bug is logged and counted, and the agent sits this call out
    (kso must never block scheduling because one heuristic failed)."""
    try:
        return fn(call)
    except Exception:  # noqa: BLE001 - deliberately broad: any agent failure degrades, never 500s
        log.exception("%s failed for pod %s; ignoring it for this call", what, call.pod.key)
        metrics.errors.labels(verb, "agent_error").inc()
        return None


class Extender:
    def __init__(self, config: Config, state: ClusterState, binder: Binder | AsyncBinder,
                 stats: NodeStatsSource | None = None, plan: PlanCache | None = None,
                 cache_bodies: bool = True, pod_memo: PodMemo | None = None) -> None:
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
        s = self.settings
        self.limits = Limits(max_depth=s.max_json_depth, max_nodes=s.max_nodes)
        self.binder = binder
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
        self.metrics = ExtenderMetrics(state.age_seconds, lambda: float(len(state)))
        if isinstance(safe := self.agents.get("safe"), SafeAgent):  # held pods released (issue 12)
            safe.released_total = self.metrics.safe_released
        self.forecast_status = getattr(getattr(stats, "store", None), "status", None)
        if self.forecast_status is not None:
            self.metrics.watch_forecasts(lambda: self.forecast_status)
        self.plan = plan
        # _no_capacity's answer for the last remembered view's alloc and known: never changed by a caller
        self._capacity_kept = LastKept()
        # weights of the priorities that answered -> (those weights, _int_combined's table of rounded quotients)
        self._combine_tables: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}
        if plan is not None:
            self.metrics.plan_age.set_function(plan.age_s)
        log.info("%s", fields({"agents": list(self.agents), "filters": self.filters, "weights": self.weights}))

    # ---- inputs ------------------------------------------------------------------------------
    def parse_pod(self, pod: dict[str, Any]) -> PodInfo:
        info = KNOWN_PODS.info(pod, self.pod_memo)  # this very Pod object parsed before (filter, then prioritize)
        if info is None:
            try:
                info = self.pod_memo.parse(pod)
            except ObjectError as exc:
                raise ProtocolError(str(exc), "bad_pod") from None
            KNOWN_PODS.keep_info(pod, self.pod_memo, info)
        if not info.node_name and self.cache_bodies:
            self.state.remember_pending(info)
        return info

    def body_node(self, i: int, item: dict[str, Any]) -> NodeInfo:
        """Nodes.items[i] as a NodeInfo, within the per-node bounds (checked on the raw object first)."""
        s = self.settings
        meta, status, spec = (item.get(k) if isinstance(item.get(k), dict) else {} for k in ("metadata", "status", "spec"))
        alloc = status.get("allocatable") if status.get("allocatable") is not None else status.get("capacity")
        if isinstance(alloc, dict) and len(alloc) > s.max_resources_per_node:
            raise ProtocolError(f"Nodes.items[{i}] lists {len(alloc)} resources, more than the {s.max_resources_per_node} "
                                "allowed (KSO_MAX_RESOURCES_PER_NODE)", "too_many_resources")
        images = status.get("images")
        names = sum(len(x) for x in (meta.get("labels"), meta.get("annotations"), spec.get("taints"))
                    if isinstance(x, (dict, list)))
        if isinstance(images, list):
            names += sum(len(img.get("names") or ()) for img in images if isinstance(img, dict)
                         and isinstance(img.get("names"), list))
        if names > s.max_names_per_node:
            raise ProtocolError(f"Nodes.items[{i}] lists {names} labels, annotations, taints and image names, more "
                                f"than the {s.max_names_per_node} allowed (KSO_MAX_NAMES_PER_NODE)", "too_many_names")
        try:
            return node_from_k8s(item)
        except ObjectError as exc:
            raise ProtocolError(f"Nodes.items[{i}]: {exc}", "bad_node") from None

    def resolve(self, args: ExtenderArgs) -> NodeView:
        """The call's nodes as rows of the cache. Full Node objects in the call: with cache_bodies they
        refresh the cache when it does not have that resourceVersion yet; without, the cache's row is
        used for a node it knows and a node it does not know is judged from the body for this call only."""
        if args.nodes is not None:
            if not self.cache_bodies:
                # API mode, every node in the cache (the usual call): the names in one comprehension and the view,
                # without the per-item checks below (~1 us a node), which would find every name good and known
                try:
                    names = [item["metadata"]["name"] for item in args.nodes]
                except (KeyError, TypeError):
                    names = []
                if (len(names) == len(args.nodes) and names_ok(names)
                        and (view := self.state.view(names)).all_known()):
                    return view
            names = []
            scratch: list[NodeInfo] = []
            for i, item in enumerate(args.nodes):
                meta = item.get("metadata")
                name = meta.get("name") if isinstance(meta, dict) else None
                rv = meta.get("resourceVersion", "") if isinstance(meta, dict) else ""
                if not isinstance(name, str) or not name:
                    raise ProtocolError(f"Nodes.items[{i}] has no metadata.name", "bad_node")
                if self.cache_bodies:
                    if not self.state.knows(name, rv if isinstance(rv, str) else ""):
                        self.state.upsert_node(self.body_node(i, item))
                elif not self.state.knows(name):
                    scratch.append(self.body_node(i, item))
                names.append(name)
            view = self.state.view(names)
            return view if not scratch else self._with_body_nodes(view, scratch)
        # the protocol's NodeNames list is never changed in place (it is kept for its bytes): the cache remembers its rows
        view = self.state.view(args.node_names or [], stable=True)
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

    def _no_capacity(self, view: NodeView) -> list[int]:
        """Known nodes with no allocatable cpu or memory (their indexes): nothing can be judged or placed there.
        Kept for the last read-only alloc (ClusterState's remembered view: the same object is the same values)."""
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
    def _verdicts(self, call: Call, predicates: list[str], verb: str) -> Verdicts:
        """Run predicates over the call's nodes; unknown and unresolvable nodes are never failed by one."""
        view = call.view
        unresolvable: dict[int, str] = {}
        for i in self._no_capacity(view):
            unresolvable[i] = (f"node reports no allocatable cpu or memory (cpu {view.alloc[i, view.columns[CPU]]:g}m,"
                                    f" memory {view.alloc[i, view.columns[MEMORY]]:g} bytes); kso cannot place pods there")
        all_known = view.all_known()
        known: list[bool] | None = None
        reasons: list[dict[int, str]] = []
        notes: list[dict[int, str]] = []
        for name in predicates:
            res: PredicateResult | None = _safe_call(f"predicate {name}", self.predicates[name], call, self.metrics, verb)
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

    def _judge(self, call: Call, predicates: list[str], verb: str) -> tuple[dict[int, list[str]], dict[int, str],
                                                                              dict[int, list[str]]]:
        """Run predicates; return failed index -> reasons, unresolvable index -> reason, notes."""
        v = self._verdicts(call, predicates, verb)
        return v.failed_lists(), v.unresolvable, _merge(v.notes)

    def filter(self, args: ExtenderArgs, predicates: list[str] | None = None) -> dict[str, Any]:
        pod = self.parse_pod(args.pod)
        view = self.resolve(args)
        call = Call(pod, view)
        v = self._verdicts(call, self.filters if predicates is None else predicates, "filter")
        names = view.names
        unresolvable = v.unresolvable
        reply: dict[str, Any] = {
            "FailedNodes": {names[i]: r for i, r in v.failed_joined().items()},
            "FailedAndUnresolvableNodes": {names[i]: r for i, r in unresolvable.items()},
            "Error": "",
        }
        if args.nodes is not None:
            passed = v.passed()
            raws = args.node_raw
            # the passing items' bytes as sent, spliced (an orjson.Fragment: dumps writes it as is) when each is
            # exactly what orjson writes for its object (protocol.KnownNodeItems), else the objects, encoded again
            items: Any = (list(compress(args.nodes, passed)) if raws is None
                          else orjson.Fragment(b"[" + b",".join(compress(raws, passed)) + b"]"))
            reply["Nodes"] = {**(args.node_list or {}), "items": items}
            reply["NodeNames"] = None
        elif not v.reasons and not unresolvable:  # every node passed: the call's names as they are (read only)
            reply["NodeNames"] = names
        else:
            reply["NodeNames"] = list(compress(names, v.passed()))
        failed = v.n_failed()
        if failed:
            log.debug("filter %s: %d of %d nodes rejected", pod.key, failed, len(view))
        return reply

    # ---- prioritize --------------------------------------------------------------------------
    def _scores(self, call: Call, verb: str, per_agent: bool = True) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The weighted mean of the priorities, rounded half up, 0 for a node the cache does not know; with
        ``per_agent`` also each priority's clamped scores (explain's)."""
        n = len(call.view)
        got: list[tuple[int, str, Any]] = []
        for name, w in self.weights.items():
            s = _safe_call(f"priority {name}", self.priorities[name], call, self.metrics, verb)
            if s is not None:
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

    def _plan_nodes(self, call: Call) -> np.ndarray | None:
        """Nodes of the call with a free plan slot for the pod's class; None when the plan has nothing."""
        if self.plan is None:
            return None
        slots = self.plan.slots_for(call.pod)
        if slots is None:
            self.metrics.child(self.metrics.plan_decisions, "none").inc()
            return None
        free = {n for n, k in slots.items() if k > 0}
        hit = np.fromiter(map(free.__contains__, call.view.names), dtype=bool, count=len(call.view))
        some = bool(np.logical_or.reduce(hit))
        self.metrics.child(self.metrics.plan_decisions, "hit" if some else "miss").inc()
        return hit if some else None

    # Plan first: nodes with a free slot of the pod's class get the top score (10) and every other node
    # half its heuristic score (0..5), so that, at the deployment's extender weight (5, x10 per point),
    # the plan's 250-point lead outweighs the default profile's resource scores (at most 200 apart).
    # The heuristic agents still rank the other nodes, and decide alone when the plan has no slot.
    @staticmethod
    def _apply_plan(combined: np.ndarray, hit: np.ndarray | None) -> np.ndarray:
        if hit is None:
            return combined
        return np.where(hit, MAX_PRIORITY, combined // 2)

    def _prioritized(self, args: ExtenderArgs) -> tuple[NodeView, np.ndarray]:
        """The call's nodes and their scores, an int array."""
        call = Call(self.parse_pod(args.pod), self.resolve(args))
        combined, _ = self._scores(call, "prioritize", per_agent=False)
        return call.view, self._apply_plan(combined, self._plan_nodes(call))

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        view, scores = self._prioritized(args)
        return [{"Host": h, "Score": s} for h, s in zip(view.names, scores.tolist(), strict=True)]

    def prioritize_json(self, args: ExtenderArgs) -> bytes:
        """prioritize's reply already encoded (the same bytes as dumps(prioritize(args))), from the node
        cache's ready-made per-node entries."""
        view, scores = self._prioritized(args)
        # one int per node, 0..MAX_PRIORITY: _scores' rounded mean of clamped scores (or 0), halved or MAX by the plan
        return self.state.host_scores_json(view, scores, in_range=True)

    def priority(self, name: str, args: ExtenderArgs) -> list[dict[str, Any]]:
        """One agent priority, raw (kube-safe-scheduler's /scheduler/priorities/<name>)."""
        call = Call(self.parse_pod(args.pod), self.resolve(args))
        s = _safe_call(f"priority {name}", self.priorities[name], call, self.metrics, "prioritize")
        scores = [0] * len(call.view) if s is None else clamp_scores(s).astype(int).tolist()
        return [{"Host": h, "Score": v} for h, v in zip(call.view.names, scores, strict=True)]

    # ---- bind --------------------------------------------------------------------------------
    @property
    def binds_on_loop(self) -> bool:
        """The binder is an AsyncBinder (API mode): ``bind_async`` on the event loop, not ``bind``."""
        return inspect.iscoroutinefunction(self.binder.bind)

    @property
    def watched(self) -> bool:
        """The cache follows an API server's watch (else a snapshot, the demo, a test's or the simulator's)."""
        return self.state.source == "api"

    def bind(self, args: BindingArgs) -> dict[str, Any]:
        """Bind through a synchronous Binder (offline: RecordingBinder; the simulator's in-process extender)."""
        pod = self.state.pending_pod(args.pod_uid, args.pod_namespace, args.pod_name)
        if not self.watched and not self.state.knows(args.node):  # no API server to refuse it: kso does
            return self._bind_failed(args, BindError(f"node {args.node} is not in kso's cluster ({self.state.source})"))
        start = time.perf_counter()
        try:
            self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except Exception as exc:  # noqa: BLE001 - any binder failure is the scheduler's to see
            return self._bind_failed(args, exc)
        finally:
            self.metrics.bind_api.observe(time.perf_counter() - start)
        if pod is None:
            try:
                pod = self._read_back(self.binder.fetch_pod(args.pod_namespace, args.pod_name))
            except Exception as exc:  # noqa: BLE001 - the binding stands; only our bookkeeping is late
                self._not_read_back(args, exc)
        return self._bound(args, pod)

    async def bind_async(self, args: BindingArgs) -> dict[str, Any]:
        """``bind`` through an AsyncBinder, on the event loop (API mode)."""
        pod = self.state.pending_pod(args.pod_uid, args.pod_namespace, args.pod_name)
        start = time.perf_counter()
        try:
            await self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - any binder failure is the scheduler's to see
            return self._bind_failed(args, exc)
        finally:
            self.metrics.bind_api.observe(time.perf_counter() - start)
        if pod is None:
            try:
                pod = self._read_back(await self.binder.fetch_pod(args.pod_namespace, args.pod_name))  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - the binding stands; only our bookkeeping is late
                self._not_read_back(args, exc)
        return self._bound(args, pod)

    async def aclose(self) -> None:
        """Close what the binder holds open (an AsyncBinder's HTTP session), on the loop that served it."""
        aclose = getattr(self.binder, "aclose", None)
        if aclose is not None:
            await aclose()

    def _bind_failed(self, args: BindingArgs, exc: Exception) -> dict[str, Any]:
        self.metrics.bindings.labels("error").inc()
        log.warning("bind %s/%s -> %s failed: %s", args.pod_namespace, args.pod_name, args.node, exc)
        return {"Error": f"binding {args.pod_namespace}/{args.pod_name} to {args.node} failed: {exc}"}

    @staticmethod
    def _read_back(raw: dict[str, Any] | None) -> PodInfo | None:
        return pod_from_k8s(raw) if raw else None

    @staticmethod
    def _not_read_back(args: BindingArgs, exc: Exception) -> None:
        log.warning("bound %s/%s but could not read it back: %s", args.pod_namespace, args.pod_name, exc)

    def _bound(self, args: BindingArgs, pod: PodInfo | None) -> dict[str, Any]:
        """A bind that went through: the pod counts on its node (and takes its plan slot) at once."""
        if pod is None and self.watched:
            log.info("bound %s/%s to %s; its requests count once the watch reports it",
                     args.pod_namespace, args.pod_name, args.node)
        elif pod is None:
            log.info("bound %s/%s to %s; the pod is not in kso's cluster (%s), so its requests are not counted",
                     args.pod_namespace, args.pod_name, args.node, self.state.source)
        else:
            self._place(pod, args.node)
        self.metrics.bindings.labels("ok").inc()
        return {"Error": ""}

    def bind_not_posted(self, args: BindingArgs) -> None:
        """A bind kso answers with an error without posting it (no bind slot in time): kube-scheduler, the
        extender being ``ignorable``, binds the pod itself, to the node it asked kso for. The pod counts there
        now, as for a bind kso posts, not once the watch reports kube-scheduler's Binding: at peak that is the
        API server's round trip later (1-2 s on the benchmark's 2 cores), and every call meanwhile would see the
        node without it. Were the pod not bound there after all, the watch's next event for it (unbound, deleted,
        or bound elsewhere) puts it right, as for any assumed pod."""
        pod = self.state.pending_pod(args.pod_uid, args.pod_namespace, args.pod_name)
        if pod is not None and not pod.node_name:
            self._place(pod, args.node)

    def _place(self, pod: PodInfo, node: str) -> None:
        self.state.assume(pod, node)
        if self.plan is not None:
            self.plan.consume(pod, node)

    # ---- preempt -----------------------------------------------------------------------------
    def preempt(self, args: PreemptionArgs) -> dict[str, Any]:
        """Keep the candidates on which the pod would be safe once the victims are gone."""
        pod = self.parse_pod(args.pod)
        names = list(args.candidates)
        view = self.state.view(names)
        freed = np.zeros_like(view.requested)
        for i, name in enumerate(names):
            victims = args.candidates[name]
            for j, uid in enumerate(victims.uids):
                if victims.pods is not None:
                    try:
                        requests = pod_from_k8s(victims.pods[j]).requests
                    except ObjectError as exc:
                        raise ProtocolError(f"NodeNameToVictims[{name}].Pods[{j}]: {exc}", "bad_pod") from None
                else:
                    known = self.state.pods.get(uid)
                    # An unknown victim frees nothing in our books: the conservative reading.
                    requests = known.requests if known else {}
                for res, value in requests.items():
                    col = view.columns.get(res)
                    if col is not None:
                        freed[i, col] += value
        call = Call(pod, view, freed=freed)
        failed, unresolvable, _ = self._judge(call, self.filters, "preempt")
        out = {}
        for i, name in enumerate(names):
            if i in failed or i in unresolvable:
                log.debug("preempt %s: dropping candidate %s: %s", pod.key, name,
                          "; ".join(failed.get(i, [])) or unresolvable.get(i))
                continue
            v = args.candidates[name]
            out[name] = {"Pods": [{"UID": u} for u in v.uids], "NumPDBViolations": v.pdb_violations}
        return {"NodeNameToMetaVictims": out}

    # ---- explain -----------------------------------------------------------------------------
    def explain(self, pod: PodInfo, view: NodeView) -> dict[str, Any]:
        """Why each node passed or failed and what each agent scored, ranked as the scheduler would."""
        call = Call(pod, view)
        failed, unresolvable, notes = self._judge(call, self.filters, "explain")
        combined, per = self._scores(call, "explain")
        slots = self.plan.slots_for(pod) if self.plan is not None else None
        hit = np.array([bool(slots and slots.get(n, 0) > 0) for n in view.names], dtype=bool)
        combined = self._apply_plan(combined, hit if hit.any() else None)
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
                "notes": notes.get(i, []) + ([] if view.known[i] else ["not in the node cache: passed unjudged, score 0"]),
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
