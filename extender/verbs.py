"""The scheduler verbs in kube-scheduler's extender wire format: the decision engine's answers to filter,
prioritize, bind and preempt as the reply objects (or bytes) kube-scheduler reads, and the bind through the
binder. HTTP is app.py's; the request bodies are parsed by protocol.py."""

from __future__ import annotations

import asyncio
import logging
import time
from itertools import compress
from typing import Any

import orjson

from decisions.agents.base import Call
from decisions.engine import DecisionEngine, EngineConfig, PlanSlots
from extender.protocol import KNOWN_PODS, BindingArgs, ExtenderArgs, Limits, PreemptionArgs
from extender.replies import HostScoreReplies
from kso.core.binder import Binder, BindError, RecordingBinder
from kso.core.cluster import ClusterState
from kso.core.objects import PodInfo, PodMemo, pod_from_k8s
from kso.core.stats import NodeStatsSource
from kso.core.views import NodeView

log = logging.getLogger("kso.extender")


class Extender(DecisionEngine):
    """The decision engine answering kube-scheduler's extender calls (parsed ExtenderArgs, BindingArgs,
    PreemptionArgs), binding through ``binder`` on the event loop (``bind_async``)."""

    def __init__(self, config: EngineConfig, state: ClusterState, binder: Binder,
                 stats: NodeStatsSource | None = None, plan: PlanSlots | None = None,
                 cache_bodies: bool = True, pod_memo: PodMemo | None = None) -> None:
        super().__init__(config, state, stats, plan, cache_bodies, pod_memo)
        self.binder = binder
        self.replies = HostScoreReplies(state)  # prioritize's reply entries per node
        s = self.settings
        self.limits = Limits(max_depth=s.max_json_depth, max_nodes=s.max_nodes)

    def call_of(self, args: ExtenderArgs) -> Call:
        """The call's pod (a Pod object KnownPods shares is known again by identity) and its nodes' rows."""
        return Call(self.parse_pod(args.pod, KNOWN_PODS.holds(args.pod)), self.resolve(args.nodes, args.node_names))

    # ---- filter ------------------------------------------------------------------------------
    def filter(self, args: ExtenderArgs, predicates: list[str] | None = None) -> dict[str, Any]:
        call = self.call_of(args)
        view = call.view
        v = self.verdicts(call, self.filters if predicates is None else predicates, "filter")
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
            log.debug("filter %s: %d of %d nodes rejected", call.pod.key, failed, len(view))
        return reply

    # ---- prioritize --------------------------------------------------------------------------
    def prioritized(self, args: ExtenderArgs) -> tuple[NodeView, Any]:
        """The call's nodes and their scores, an int array."""
        call = self.call_of(args)
        return call.view, self.ranked(call)

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        view, scores = self.prioritized(args)
        return [{"Host": h, "Score": s} for h, s in zip(view.names, scores.tolist(), strict=True)]

    def prioritize_json(self, args: ExtenderArgs) -> bytes:
        """prioritize's reply already encoded (the same bytes as dumps(prioritize(args))), from the node
        replies' ready-made per-node entries."""
        view, scores = self.prioritized(args)
        # one int per node, 0..MAX_PRIORITY: the engine's rounded mean of clamped scores (or 0), halved or MAX by the plan
        return self.replies.encode(view, scores, in_range=True)

    def priority(self, name: str, args: ExtenderArgs) -> list[dict[str, Any]]:
        """One agent priority, raw (kube-safe-scheduler's /scheduler/priorities/<name>)."""
        call = self.call_of(args)
        scores = self.priority_scores(name, call)
        return [{"Host": h, "Score": v} for h, v in zip(call.view.names, scores, strict=True)]

    # ---- bind --------------------------------------------------------------------------------
    @property
    def watched(self) -> bool:
        """The cache follows an API server's watch (else a snapshot, the demo, a test's or the simulator's)."""
        return self.state.source == "api"

    async def bind_async(self, args: BindingArgs, deadline: float | None = None) -> dict[str, Any]:
        """Bind through the binder, on the event loop; ``deadline`` (time.monotonic()): the binder's requests are
        not sent past it and given no more than what is left (kube-scheduler's httpTimeout, see app.py)."""
        pod = self.state.pending_pod(args.pod_uid, args.pod_namespace, args.pod_name)
        if isinstance(self.binder, RecordingBinder) and not self.state.knows(args.node):  # no API server to refuse it
            return self._bind_failed(args, BindError(f"node {args.node} is not in kso's cluster ({self.state.source})"))
        start = time.perf_counter()
        try:
            await self.binder.bind(args.pod_namespace, args.pod_name, args.pod_uid, args.node, deadline)
        except Exception as exc:  # noqa: BLE001 - any binder failure is the scheduler's to see
            return self._bind_failed(args, exc)
        finally:
            self.metrics.bind_api.observe(time.perf_counter() - start)
        if pod is None:
            try:
                pod = self._read_back(await self.binder.fetch_pod(args.pod_namespace, args.pod_name, deadline))
            except Exception as exc:  # noqa: BLE001 - the binding stands; only our bookkeeping is late
                self._not_read_back(args, exc)
        return self._bound(args, pod)

    def bind(self, args: BindingArgs) -> dict[str, Any]:
        """``bind_async`` for a synchronous caller without an event loop (the simulator's in-process extender,
        tests; offline, a RecordingBinder), run to its end."""
        return asyncio.run(self.bind_async(args))

    async def aclose(self) -> None:
        """Close what the binder holds open (an ApiBinder's HTTP session), on the loop that served it."""
        await self.binder.aclose()

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
            self.place(pod, args.node)
        self.metrics.bindings.labels("ok").inc()
        return {"Error": ""}

    def bind_not_posted(self, args: BindingArgs) -> None:
        """A bind kso answers with an error without posting it (no bind slot in time): kube-scheduler, the
        extender being ``ignorable``, binds the pod itself, to the node it asked kso for. The pod counts there
        now, as for a bind kso posts, not once the watch reports kube-scheduler's Binding: at peak that is the
        API server's round trip later (seconds on a busy control plane), and every call meanwhile would see the
        node without it. Were the pod not bound there after all, the watch's next event for it (unbound, deleted,
        or bound elsewhere) puts it right, as for any assumed pod."""
        pod = self.state.pending_pod(args.pod_uid, args.pod_namespace, args.pod_name)
        if pod is not None and not pod.node_name:
            self.place(pod, args.node)

    # ---- preempt -----------------------------------------------------------------------------
    def preempt(self, args: PreemptionArgs) -> dict[str, Any]:
        """Keep the candidates on which the pod would be safe once the victims are gone."""
        pod = self.parse_pod(args.pod, KNOWN_PODS.holds(args.pod))
        out = {}
        for name in self.preemption_survivors(pod, args.candidates):
            v = args.candidates[name]
            out[name] = {"Pods": [{"UID": u} for u in v.uids], "NumPDBViolations": v.pdb_violations}
        return {"NodeNameToMetaVictims": out}
