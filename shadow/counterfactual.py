"""The counterfactual schedule: kso's picks applied to a shadow copy of the cluster, so that they add up.

The real node cache never receives kso's picks: it counts each pod on the node the cluster's scheduler chose. Judged
on that cache alone, every pick of a burst sees the same empty node, and 185 of 200 picks can land on one 4-core node.
So the shadow keeps, beside the cache, the difference between the two schedules: for each judged pod still alive, its
requests (and, within the recent-bind window, its recent-bind load) are taken off the chosen node and put on kso's
pick (on no node when kso would have held it). Each bind is judged on the cache's rows with that difference applied:
the cluster as it would be had kso placed every pod it judged before.

Threads: the watch thread notes deletions and re-lists (``note_gone``, ``note_listed``) and stamps each bind with the
sequence number of the last one (``seq``); the judge thread applies them up to that number before it judges the bind,
so a pod deleted before the bind's snapshot is off both schedules, one deleted after is on both.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace

import numpy as np

from kso.core.objects import PodInfo
from kso.core.resources import CPU, MEMORY, MIB
from kso.core.views import NodeView

# uids deleted before their bind was judged, kept so that the bind is not counted once judged
EARLY_GONE = 10_000


@dataclass(slots=True)
class Placed:
    uid: str
    chosen: str
    pick: str | None
    requests: dict[str, float]
    recent: tuple[float, float]  # cpu milli, memory MB: the recent-bind load while within the window
    at: float
    live: bool = True
    recent_moved: bool = True  # its recent load is still moved (not expired)


@dataclass(slots=True)
class NodeSchedule:
    """One node in kso's schedule: the pods kso would have put there that the cluster's scheduler did not (and those
    it would have taken away), its requests against allocatable in both schedules, and what was measured there."""

    alloc: tuple[float, float] = (0.0, 0.0)  # cpu milli, memory bytes
    picked: int = 0  # binds whose pod kso would have put here (same node included)
    moved_in: int = 0  # ... of them, pods the cluster's scheduler put elsewhere
    moved_out: int = 0  # pods the cluster's scheduler put here that kso would have put elsewhere (or held)
    live_in: int = 0  # moved-in pods alive now
    requested: tuple[float, float] = (0.0, 0.0)  # kso's schedule's requests, at the latest bind judged
    real_requested: tuple[float, float] = (0.0, 0.0)  # the real cache's, then
    peak_share: float = 0.0  # the largest share of allocatable kso's schedule requested (cpu or memory) at any bind
    measured_peak: float | None = None  # the largest measured peak in the horizons of binds kso put here
    with_pods_peak: float | None = None  # ... plus kso's moved pods at their requests


@dataclass
class Counterfactual:
    recent_window_s: float
    placed: dict[str, Placed] = field(default_factory=dict)
    delta: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> resource -> kso's minus the real
    recent_delta: dict[str, np.ndarray] = field(default_factory=dict)  # node -> (cpu milli, MB)
    nodes: dict[str, NodeSchedule] = field(default_factory=dict)
    over_alloc: dict[str, float] = field(default_factory=dict)  # nodes whose kso-schedule requests passed allocatable

    def __post_init__(self) -> None:
        self.lock = threading.Lock()
        self.seq = 0  # changes noted by the watch thread
        self.log: deque[tuple[int, str | frozenset[str]]] = deque()
        self.early_gone: OrderedDict[str, None] = OrderedDict()
        self.recent: deque[Placed] = deque()

    # ---- the watch thread --------------------------------------------------------------------------------
    def note_gone(self, uid: str) -> None:
        with self.lock:
            self.seq += 1
            self.log.append((self.seq, uid))

    def note_listed(self, live: frozenset[str]) -> None:
        """A re-list: the pods bound now (a pod of kso's schedule missing from it was deleted in the gap)."""
        with self.lock:
            self.seq += 1
            self.log.append((self.seq, live))

    # ---- the judge thread --------------------------------------------------------------------------------
    def _consume(self, upto: int) -> None:
        while True:
            with self.lock:
                if not self.log or self.log[0][0] > upto:
                    return
                _, item = self.log.popleft()
            if isinstance(item, str):
                p = self.placed.get(item)
                if p is None:
                    self.early_gone[item] = None
                    while len(self.early_gone) > EARLY_GONE:
                        self.early_gone.popitem(last=False)
                else:
                    self._forget(p)
            else:
                for p in [p for uid, p in self.placed.items() if uid not in item]:
                    self._forget(p)

    def _forget(self, p: Placed) -> None:
        del self.placed[p.uid]
        p.live = False
        self._move(p, -1)
        if p.recent_moved:
            self._move_recent(p, -1)
        if p.pick is not None and p.pick != p.chosen:
            self._node(p.pick).live_in -= 1

    def _move(self, p: Placed, sign: int) -> None:
        if p.pick == p.chosen:
            return
        for node, s in ((p.chosen, -sign), (p.pick, sign)):
            if node is None:
                continue
            d = self.delta.setdefault(node, {})
            for res, v in p.requests.items():
                d[res] = d.get(res, 0.0) + s * v

    def _move_recent(self, p: Placed, sign: int) -> None:
        if p.pick == p.chosen:
            return
        for node, s in ((p.chosen, -sign), (p.pick, sign)):
            if node is not None:
                self.recent_delta[node] = self.recent_delta.get(node, np.zeros(2)) + s * np.asarray(p.recent)

    def _expire(self, now: float) -> None:
        while self.recent and self.recent[0].at < now - self.recent_window_s:
            p = self.recent.popleft()
            if p.live and p.recent_moved:
                self._move_recent(p, -1)
            p.recent_moved = False

    def _node(self, name: str) -> NodeSchedule:
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = NodeSchedule()
        return node

    def moved(self, node: str) -> bool:
        """Whether kso's schedule differs from the real one on ``node`` (its requests or its recent-bind load)."""
        d, r = self.delta.get(node), self.recent_delta.get(node)
        return bool(d and any(abs(v) > 1e-9 for v in d.values())) or (r is not None and bool(np.any(np.abs(r) > 1e-9)))

    def apply(self, view: NodeView, upto: int, now: float) -> NodeView:
        """``view`` (the real cache's rows before a bind) as kso's schedule has them: every judged pod alive at the
        bind's snapshot on kso's pick instead of the chosen node. The view's arrays are not changed (a copy)."""
        self._consume(upto)
        self._expire(now)
        if not self.delta and not self.recent_delta:
            return view
        index = {n: i for i, n in enumerate(view.names)}
        requested, recent = view.requested.copy(), view.recent.copy()
        for node, d in self.delta.items():
            i = index.get(node)
            if i is None:
                continue
            for res, v in d.items():
                col = view.columns.get(res)
                if col is not None:
                    requested[i, col] += v
        for node, r in self.recent_delta.items():
            i = index.get(node)
            if i is not None:
                recent[i] += r
        np.maximum(requested, 0.0, out=requested)
        np.maximum(recent, 0.0, out=recent)
        return replace(view, requested=requested, recent=recent)

    def place(self, pod: PodInfo, chosen: str, pick: str | None, at: float, real: NodeView,
              ours: NodeView) -> None:
        """Count a judged pod in kso's schedule (after its judgement on ``ours``, the schedule's rows; ``real``, the
        cache's), and note the requests of the nodes involved against their allocatable."""
        index = {n: i for i, n in enumerate(ours.names)}
        cpu_col, mem_col = ours.columns.get(CPU), ours.columns.get(MEMORY)
        for name in {chosen, pick} - {None}:
            i = index.get(name)  # type: ignore[arg-type]
            if i is None or cpu_col is None or mem_col is None:
                continue
            node = self._node(name)  # type: ignore[arg-type]
            node.alloc = (float(ours.alloc[i, cpu_col]), float(ours.alloc[i, mem_col]))
            add = pod.requests if name == pick else {}
            node.requested = (float(ours.requested[i, cpu_col]) + add.get(CPU, 0.0),
                              float(ours.requested[i, mem_col]) + add.get(MEMORY, 0.0))
            node.real_requested = (float(real.requested[i, cpu_col]), float(real.requested[i, mem_col]))
            share = max((r / a for r, a in zip(node.requested, node.alloc, strict=True) if a > 0), default=0.0)
            node.peak_share = max(node.peak_share, share)
            if share > 1.0 + 1e-9:
                self.over_alloc[name] = max(self.over_alloc.get(name, 0.0), share)  # type: ignore[index]
        if pick is not None:
            node = self._node(pick)
            node.picked += 1
            if pick != chosen:
                node.moved_in += 1
        if pick != chosen:
            self._node(chosen).moved_out += 1
        if pod.uid in self.early_gone:  # deleted before its bind was judged: on neither schedule now
            del self.early_gone[pod.uid]
            return
        p = Placed(pod.uid, chosen, pick, dict(pod.requests),
                   (pod.requests.get(CPU, 0.0), pod.requests.get(MEMORY, 0.0) / MIB), at)
        self.placed[pod.uid] = p
        self._move(p, +1)
        self._move_recent(p, +1)
        self.recent.append(p)
        if pick is not None and pick != chosen:
            self._node(pick).live_in += 1

    @staticmethod
    def extra_share(ours: NodeView, real: NodeView, node: str, pod: PodInfo | None) -> tuple[float, float] | None:
        """What kso's schedule adds on ``node`` beyond the real one, as shares of its allocatable (cpu, memory): the
        requests of every pod kso put there that ran elsewhere (``pod`` too, when given), less those it took away."""
        try:
            i = ours.names.index(node)
        except ValueError:
            return None
        out = []
        for res in (CPU, MEMORY):
            col = ours.columns.get(res)
            if col is None:
                out.append(0.0)
                continue
            alloc = float(ours.alloc[i, col])
            extra = float(ours.requested[i, col] - real.requested[i, col]) + (pod.requests.get(res, 0.0) if pod else 0.0)
            out.append(extra / alloc if alloc > 0 else 0.0)
        return out[0], out[1]

    def outcome(self, pick: str, measured: float | None, with_pods: float | None) -> None:
        node = self._node(pick)
        if measured is not None:
            node.measured_peak = measured if node.measured_peak is None else max(node.measured_peak, measured)
        if with_pods is not None:
            node.with_pods_peak = with_pods if node.with_pods_peak is None else max(node.with_pods_peak, with_pods)
