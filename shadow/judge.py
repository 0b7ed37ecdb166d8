"""What kso would have decided for one bind: kube-scheduler's core filters as kso reads them (scheduler.feasibility),
then the decision engine's verdicts, scores and ranking (DecisionEngine.explain) on the nodes that pass them, as the
extender is asked about them. Judged on a copy of the node cache's rows taken before the bind was applied."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decisions.engine import DecisionEngine
from kso.core.objects import PodInfo
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.views import NodeView
from scheduler.feasibility import resource_reasons, rule_reasons
from shadow.counterfactual import Counterfactual


@dataclass(slots=True)
class NodeOutcome:
    """What Prometheus saw on a node during a bind's horizon (None: no samples, or the metric does not exist)."""

    peak_cpu: float | None = None
    peak_memory: float | None = None
    oom_kills: float | None = None
    throttled: float | None = None  # peak share of throttled CFS periods
    # kso's node in kso's schedule: what that schedule put there beyond what ran there (the pods kso moved in, the
    # pod itself where it ran elsewhere, less the pods it moved away), at their requests, as shares of the node's
    # allocatable (cpu, memory), added to the measured peaks to judge it (None: the node as it ran)
    pod_share: tuple[float, float] | None = None
    oom_new: float | None = None  # of oom_kills, those no earlier bind's window counted on this node (in this role)
    pod_measured: bool = False  # pod_share counts the pod itself at its measured peak usage, not its requests

    @property
    def peak(self) -> float | None:
        """The measured peak, the larger of cpu and memory."""
        values = [v for v in (self.peak_cpu, self.peak_memory) if v is not None]
        return max(values) if values else None

    @property
    def with_pod(self) -> float | None:
        """The peak the node would have had with the pod: measured, plus the pod at its requests where it did not run."""
        if self.pod_share is None:
            return self.peak
        values = [max(0.0, v + a) for v, a in zip((self.peak_cpu, self.peak_memory), self.pod_share, strict=True)
                  if v is not None]
        return max(values) if values else None

    def over(self, u_star: float) -> bool | None:
        peak = self.with_pod
        return None if peak is None else peak > u_star


@dataclass(slots=True)
class Bind:
    """One bind seen by the watch: the pod as it was pending, the node a scheduler chose, and the node cache's rows
    at that moment (the pod not counted anywhere yet)."""

    pod: PodInfo
    node: str
    at: float
    view: NodeView
    late: bool = False  # seen in a re-list after a watch gap, not as its own event
    seq: int = 0  # the deletions and re-lists the watch had noted at the snapshot (Counterfactual.seq)


@dataclass(slots=True)
class Record:
    """kso's judgement of one bind, then its outcome."""

    uid: str
    pod: str
    scheduler: str
    cpu_m: float
    memory_mb: float
    at: float
    chosen: str  # the node the cluster's scheduler bound the pod to
    pick: str | None  # the node kso would have picked (None: kso would have left the pod pending)
    warned: bool  # kso would have refused the chosen node
    reasons: list[str]  # why (core filters, then kso's predicates)
    chosen_score: int | None
    pick_score: int | None
    chosen_risk: float | None  # the safe agent's P(util > U*) with the pod, the worse of cpu and memory
    pick_risk: float | None
    # what kso's schedule adds on its pick beyond the real schedule, as shares of its allocatable (cpu, memory): the
    # pod where it ran elsewhere, plus the pods kso moved there before, less those it moved away
    pick_share: tuple[float, float] | None
    nodes: int
    fitting: int  # nodes passing the core filters
    passing: int  # of those, nodes passing kso's predicates
    pick_alloc: tuple[float, float] | None = None  # the pick's allocatable (cpu milli, memory MB)
    # the pod's peak usage in its horizon where it ran (cpu milli, memory MB; cAdvisor), None where not known
    pod_usage: tuple[float | None, float | None] | None = None
    late: bool = False
    # the chosen node is not in kso's node cache (added since, or never seen): kso cannot judge it, so it neither
    # warned about it nor accepted it
    unknown_node: bool = False
    seconds: float = 0.0  # time to judge
    chosen_outcome: NodeOutcome | None = None
    pick_outcome: NodeOutcome | None = None
    judged_at: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.pick != self.chosen

    @property
    def kind(self) -> str:
        """same (kso's pick is the chosen node); safety (kso refused the chosen node: another pick, or none);
        score (kso accepted the chosen node and scored another higher); unknown_node (the chosen node not judged)."""
        if not self.changed:
            return "same"
        if self.unknown_node:
            return "unknown_node"
        return "safety" if self.warned or self.pick is None else "score"

    def missed(self, u_star: float) -> bool:
        """kso's own node (in its schedule) went over U* in the horizon."""
        return self.pick is not None and self.pick_outcome is not None and bool(self.pick_outcome.over(u_star))

    @property
    def verdict(self) -> bool | None:
        """What kso said of the chosen node: True warned (would have refused it), False accepted it, None could not
        judge it (not in kso's node cache)."""
        return None if self.unknown_node else self.warned


def subview(view: NodeView, idx: list[int]) -> NodeView:
    """The rows ``idx`` of ``view``, as a view of its own (the call kube-scheduler would send the extender)."""
    take = np.asarray(idx, dtype=np.intp)
    nodes = view.nodes
    return NodeView(names=[view.names[i] for i in idx], known=view.known[take], alloc=view.alloc[take],
                    requested=view.requested[take], columns=view.columns, mean_free=view.mean_free[take],
                    std_free=view.std_free[take], forecast_free=view.forecast_free[take], recent=view.recent[take],
                    congestion=view.congestion[take], node_list=[nodes[i] for i in idx],
                    image_node_count=view.image_node_count, total_nodes=view.total_nodes,
                    rows=None if view.rows is None else view.rows[take], state=view.state, layout=view.layout)


def _risk(row: dict[str, Any]) -> float | None:
    safe = row.get("details", {}).get("safe") or {}
    risks = [r for r in (safe.get("cpu_risk"), safe.get("memory_risk")) if r is not None and math.isfinite(r)]
    return max(risks) if risks else None


def judge(engine: DecisionEngine, bind: Bind, counterfactual: Counterfactual | None = None) -> Record:
    """kso's decision for ``bind``'s pod on ``bind.view``: the core filters, then the engine's explain on the nodes
    that pass them; the chosen node is judged by both even when kso would not have offered it to the engine. With
    ``counterfactual``, judged on kso's schedule (every earlier judged pod on kso's pick), and the pod placed in it."""
    started = time.perf_counter()
    pod, real = bind.pod, bind.view
    view = real if counterfactual is None else counterfactual.apply(real, bind.seq, bind.at)
    names = view.names
    core = rule_reasons(pod, view.nodes)
    for i, why in resource_reasons(pod, view).items():
        core.setdefault(i, why)  # kube-scheduler reports the first failing plugin per node
    fitting = [i for i in range(len(names)) if i not in core]
    rows: dict[str, dict[str, Any]] = {}
    pick = None
    if fitting:
        explained = engine.explain(pod, subview(view, fitting))
        rows = {r["node"]: r for r in explained["nodes"]}
        pick = explained["winner"]
    index = {n: i for i, n in enumerate(names)}
    reasons: list[str] = []
    chosen_row = rows.get(bind.node)
    differs = view is not real and counterfactual is not None and counterfactual.moved(bind.node)
    if bind.node in index and (differs or index[bind.node] in core):
        # the chosen node's verdict and risk on the real cache (it ran the real schedule, and its outcome is
        # measured there), by the core filters and kso's own predicates, even when kso would not have offered it
        one = subview(real if differs else view, [index[bind.node]])
        why = rule_reasons(pod, one.nodes).get(0) or resource_reasons(pod, one).get(0)
        if why:
            reasons.append(why)
        chosen_row = engine.explain(pod, one)["nodes"][0]
    if chosen_row is not None:
        reasons += chosen_row["reasons"]
    pick_row = rows.get(pick) if pick is not None else None
    share = alloc = None
    if pick is not None:
        share = Counterfactual.extra_share(view, real, pick, pod if pick != bind.node else None)
        row, cols = view.alloc[index[pick]], view.columns
        alloc = (float(row[cols[CPU]]) if CPU in cols else 0.0, float(row[cols[MEMORY]]) / MIB if MEMORY in cols else 0.0)
    if counterfactual is not None:
        counterfactual.place(pod, bind.node, pick, bind.at, real, view)
    return Record(
        uid=pod.uid, pod=pod.key, scheduler=pod.scheduler_name, cpu_m=pod.requests.get(CPU, 0.0),
        memory_mb=pod.requests.get(MEMORY, 0.0) / MIB, at=bind.at, chosen=bind.node, pick=pick,
        warned=bool(reasons), reasons=reasons, unknown_node=bind.node not in index,
        chosen_score=None if bind.node not in rows else int(rows[bind.node]["score"]),
        pick_score=None if pick_row is None else int(pick_row["score"]),
        chosen_risk=None if chosen_row is None else _risk(chosen_row),
        pick_risk=None if pick_row is None else _risk(pick_row), pick_share=share, pick_alloc=alloc,
        nodes=len(names), fitting=len(fitting), passing=sum(1 for r in rows.values() if r["passed"]),
        late=bind.late, seconds=time.perf_counter() - started)
