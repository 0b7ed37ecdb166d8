"""ClusterState, the store: nodes and the pods bound to them, kept as columns so a decision can be made by
gathering rows instead of walking objects (the views gathered are kso.core.views').

The same type is filled from the API server (kso.core.watcher) or from a snapshot file (kso.core.snapshot), and is
mutated in place by the extender's bind verb ("assumed" pods), so the next decision counts a pod the
moment it is bound, before the watch or the metrics show it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import repeat

import numpy as np

from kso.core.capacity import is_placeholder
from kso.core.objects import NodeInfo, PodInfo, normalize_image, trim_annotations
from kso.core.resources import CPU, EPHEMERAL_STORAGE, GPU, MEMORY, MIB, PODS
from kso.core.views import NodeView, frozen

# Node annotations written by kube-safe-scheduler's annotator (sic: "forcasted"). Units: cpu in
# millicores, memory in MB (bytes / 1024^2).
ANNOTATION_MEAN_FREE = ("mean-free-cpu", "mean-free-memory")
ANNOTATION_STD_FREE = ("std-free-cpu", "std-free-memory")
ANNOTATION_FORECAST_FREE = ("forcasted-free-cpu", "forcasted-free-memory")
ANNOTATION_CONGESTION = "congestion-factor"

CORE_RESOURCES = (CPU, MEMORY, PODS, EPHEMERAL_STORAGE, GPU)
# Image-size columns kept for the images pods asked about most recently (image-locality), each one
# float64 per row: 256 x 8 bytes per node at most (10 MiB at 5,000 nodes).
IMAGE_COLUMNS = 256
# Resource columns (one float64 per row in alloc and in requested): every node or pod naming a new
# extended resource adds one. Past the cap, columns no node or pod uses any more are dropped; if none
# is free, the new resource is ignored (counted in dropped_resources) rather than grown without end.
MAX_RESOURCE_COLUMNS = 256
# Annotation bytes (keys and values) kept per remembered pod; the largest are dropped first.
MAX_POD_ANNOTATION_BYTES = 16_384


def _annotation_float(annotations: dict[str, str], key: str) -> float:
    """An annotation as a float; missing, unparsable, negative or non-finite -> NaN (= no data)."""
    raw = annotations.get(key)
    if raw is None:
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        return math.nan
    if not math.isfinite(value) or value < 0:
        return math.nan
    return value


@dataclass(slots=True, eq=False)
class PlanCopy:
    """What a plan's build reads of a ClusterState, copied under its lock in one go (``ClusterState.plan_copy``), so
    that the build itself runs without the lock the request path needs: C-level copies of the store's dicts and
    lists, numpy copies of the columns gathered for the known nodes, no per-pod Python work. The NodeInfo and PodInfo
    objects are shared (nothing changes them in place)."""

    names: list[str]  # the known nodes, in the store's order
    nodes: list[NodeInfo | None]  # each one's NodeInfo
    requested: np.ndarray  # (n, R) sum of the requests of the pods bound (or assumed) there, by ``columns``
    columns: dict[str, int]  # resource -> column of ``requested``
    mean_free: np.ndarray  # (n, 2) kube-safe-scheduler's annotations: cpu milli, memory MB; NaN missing
    std_free: np.ndarray
    occupied: set[str]  # names of the nodes some pod is bound (or assumed) on
    bound: list[str]  # uids of the pods bound (or assumed) on a node
    pending: list[PodInfo]  # pods seen without a node, oldest first
    version: int  # the store's version when copied
    age_s: float  # the store's age_seconds() when copied


class ClusterState:
    """Thread-safe columnar store of nodes and bound pods. Row 0 is a sentinel for unknown nodes."""

    def __init__(self, recent_window_s: float = 300.0, pending_pod_memory: int = 10_000,
                 max_resource_columns: int = MAX_RESOURCE_COLUMNS,
                 max_pod_annotation_bytes: int = MAX_POD_ANNOTATION_BYTES) -> None:
        self.lock = threading.RLock()
        self.recent_window_s = recent_window_s
        self.max_resource_columns = max(max_resource_columns, len(CORE_RESOURCES))
        self.max_pod_annotation_bytes = max_pod_annotation_bytes
        self.dropped_resources = 0  # resource quantities not kept because every column was in use
        self.columns: dict[str, int] = {r: i for i, r in enumerate(CORE_RESOURCES)}
        self._capacity = 0
        self.row_of: dict[str, int] = {}  # node name -> its row in every column
        self._nodes: list[NodeInfo | None] = [None]
        self.layout = 0  # changes whenever a row changes hands (node added or removed)
        # Generations of the columns a view gathers, each bumped whenever those columns change (see whole):
        # node columns (alloc, the statistics, congestion, the column map), requested, recent.
        self.node_gen = self.req_gen = self.recent_gen = 0
        self._whole: NodeView | None = None  # see whole
        self._whole_block = np.zeros((0, 0))  # the store-wide view's node columns, packed (see whole)
        # The last view of a names list, with a copy of the list: kube-scheduler asks prioritize about the nodes filter
        # passed, in that order (every one, usually), and the protocol hands out the same list for the same bytes
        self._last_view: tuple[list[str], list[str], NodeView, tuple[int, int]] | None = None
        self._whole_gens = -1  # the generation of its node columns
        self._free: list[int] = []
        self._allocate(64)
        self.pods: dict[str, PodInfo] = {}  # uid -> pod bound to (or assumed on) a node
        self._pods_by_node: dict[str, set[str]] = {}
        self._pending: OrderedDict[str, PodInfo] = OrderedDict()  # uid -> pod seen without a node
        self._pending_limit = pending_pod_memory
        self._recent: deque[tuple[float, str, str, float, float]] = deque()  # (t, uid, node, cpu, MB)
        self.assumed: dict[str, float] = {}  # uid -> time kso bound it, until the watch confirms
        self.image_node_count: dict[str, int] = {}
        # image name (any name a node lists, raw or normalised) -> size in bytes per row, for the images
        # pods asked about recently; kept up to date by upsert_node / remove_node (least recently used
        # dropped beyond IMAGE_COLUMNS).
        self._image_columns: OrderedDict[str, np.ndarray] = OrderedDict()
        self.version = 0
        self.synced = False
        self.last_change = time.time()
        self.last_sync = 0.0
        self.last_heard = 0.0
        self.source = "empty"

    # ---- storage -----------------------------------------------------------------------------
    def _allocate(self, capacity: int) -> None:
        n_res = len(self.columns)
        old = self._capacity

        def grow(arr: np.ndarray | None, shape: tuple[int, ...], fill: float) -> np.ndarray:
            new = np.full(shape, fill)
            if arr is not None:
                new[tuple(slice(0, k) for k in arr.shape)] = arr
            return new

        self.alloc = grow(getattr(self, "alloc", None), (capacity, n_res), math.nan)
        self.requested = grow(getattr(self, "requested", None), (capacity, n_res), 0.0)
        self.mean_free = grow(getattr(self, "mean_free", None), (capacity, 2), math.nan)
        self.std_free = grow(getattr(self, "std_free", None), (capacity, 2), math.nan)
        self.forecast_free = grow(getattr(self, "forecast_free", None), (capacity, 2), math.nan)
        self.recent = grow(getattr(self, "recent", None), (capacity, 2), 0.0)
        self.congestion = grow(getattr(self, "congestion", None), (capacity,), math.nan)
        columns = getattr(self, "_image_columns", None)
        for image, column in (columns or {}).items():
            columns[image] = grow(column, (capacity,), 0.0)  # type: ignore[index]
        if old == 0:
            self._nodes = [None]
        self._capacity = capacity
        self._changed(node=True, req=True, recent=True)

    def _column(self, resource: str) -> int | None:
        """The column of ``resource``, added if new; None when the column cap leaves no room."""
        col = self.columns.get(resource)
        if col is None:
            return self._add_columns([resource]).get(resource)
        return col

    def _add_columns(self, resources: Iterable[str]) -> dict[str, int]:
        """Add columns for the new ones of ``resources`` in one step (one copy of alloc and requested,
        not one per resource), within max_resource_columns. Returns resource -> column of those kept."""
        new = [r for r in dict.fromkeys(resources) if r not in self.columns]
        if new and len(self.columns) + len(new) > self.max_resource_columns:
            self._evict_unused_columns()
        room = max(0, self.max_resource_columns - len(self.columns))
        if len(new) > room:
            self.dropped_resources += len(new) - room
            new = new[:room]
        if new:
            base = len(self.columns)
            for k, r in enumerate(new):
                self.columns[r] = base + k
            self.alloc = np.hstack([self.alloc, np.full((self._capacity, len(new)), math.nan)])
            self.requested = np.hstack([self.requested, np.zeros((self._capacity, len(new)))])
            self._changed(node=True, req=True)
        return {r: c for r in resources if (c := self.columns.get(r)) is not None}

    def _evict_unused_columns(self) -> None:
        """Drop the extended-resource columns no node has allocatable of and no pod requests."""
        rows = list(self.row_of.values())
        used = (np.nan_to_num(self.alloc[rows]) != 0).any(axis=0) | (self.requested != 0).any(axis=0)
        for pod in self.pods.values():
            for r in pod.requests:
                c = self.columns.get(r)
                if c is not None:
                    used[c] = True
        used[: len(CORE_RESOURCES)] = True
        if used.all():
            return
        keep = np.flatnonzero(used)
        names = list(self.columns)
        self.columns = {names[c]: i for i, c in enumerate(keep.tolist())}
        self.alloc = self.alloc[:, keep]
        self.requested = self.requested[:, keep]
        self._changed(node=True, req=True)

    def _row_for(self, name: str) -> int:
        row = self.row_of.get(name)
        if row is not None:
            return row
        if self._free:
            row = self._free.pop()
        else:
            row = len(self._nodes)
            if row >= self._capacity:
                self._allocate(self._capacity * 2)
            self._nodes.append(None)
        self.row_of[name] = row
        self.layout += 1
        return row

    def _touch(self) -> None:
        self.version += 1
        self.last_change = time.time()

    def _changed(self, node: bool = False, req: bool = False, recent: bool = False) -> None:
        """Columns a view gathers changed in place: the views memo'd for a names list gather them again."""
        if node:
            self.node_gen += 1
        if req:
            self.req_gen += 1
        if recent:
            self.recent_gen += 1

    # ---- nodes -------------------------------------------------------------------------------
    def upsert_node(self, node: NodeInfo) -> None:
        with self.lock:
            row = self._row_for(node.name)
            old = self._nodes[row]
            if old is not None:
                self._count_images(old, -1)
            self._nodes[row] = node
            self._count_images(node, +1)
            self._update_image_columns(row, old, node)
            cols = self._add_columns(node.allocatable)
            self.alloc[row, :] = 0.0
            for res, col in cols.items():
                self.alloc[row, col] = node.allocatable[res]
            ann = node.annotations
            for i in range(2):
                self.mean_free[row, i] = _annotation_float(ann, ANNOTATION_MEAN_FREE[i])
                self.std_free[row, i] = _annotation_float(ann, ANNOTATION_STD_FREE[i])
                self.forecast_free[row, i] = _annotation_float(ann, ANNOTATION_FORECAST_FREE[i])
            self.congestion[row] = _annotation_float(ann, ANNOTATION_CONGESTION)
            self._changed(node=True)
            if old is None:
                self._recount_node(node.name, row)
            self._touch()

    def remove_node(self, name: str) -> None:
        with self.lock:
            row = self.row_of.pop(name, None)
            if row is None:
                return
            self.layout += 1
            node = self._nodes[row]
            if node is not None:
                self._count_images(node, -1)
                self._update_image_columns(row, node, None)
            self._nodes[row] = None
            self.alloc[row] = math.nan
            self.requested[row] = 0.0
            self.mean_free[row] = self.std_free[row] = self.forecast_free[row] = math.nan
            self.recent[row] = 0.0
            self.congestion[row] = math.nan
            self._changed(node=True, req=True, recent=True)
            self._free.append(row)
            self._touch()

    def _count_images(self, node: NodeInfo, sign: int) -> None:
        # Count each normalised image once per node (a node lists several names for one image).
        for name in {normalize_image(n) for n in node.raw_image_names}:
            c = self.image_node_count.get(name, 0) + sign
            if c > 0:
                self.image_node_count[name] = c
            else:
                self.image_node_count.pop(name, None)

    def _update_image_columns(self, row: int, old: NodeInfo | None, new: NodeInfo | None) -> None:
        columns = self._image_columns
        if not columns:
            return
        new_images = new.images if new is not None else {}
        for image in (old.images.keys() | new_images.keys()) if old is not None else new_images.keys():
            column = columns.get(image)
            if column is not None:
                column[row] = new_images.get(image, 0)

    def _image_column(self, image: str) -> np.ndarray:
        """Size of ``image`` per row (0 = absent, free or sentinel row); built on first use. Under the lock."""
        columns = self._image_columns
        column = columns.get(image)
        if column is not None:
            columns.move_to_end(image)
            return column
        column = np.zeros(self._capacity)
        for row, node in enumerate(self._nodes):
            if node is not None:
                size = node.images.get(image)
                if size:
                    column[row] = size
        columns[image] = column
        while len(columns) > IMAGE_COLUMNS:
            columns.popitem(last=False)
        return column

    def image_sizes(self, images: Sequence[str], rows: np.ndarray) -> np.ndarray:
        """Bytes of each of ``images`` on each of ``rows``, (n, k): a gather from one column per image,
        instead of a look into every node of the call."""
        out = np.zeros((len(rows), len(images)))
        with self.lock:
            for j, image in enumerate(images):
                out[:, j] = self._image_column(image).take(rows)
        return out

    def _recount_node(self, name: str, row: int) -> None:
        self.requested[row] = 0.0
        self._changed(req=True)
        for uid in self._pods_by_node.get(name, ()):
            self._account(self.pods[uid], row, +1)

    def _account(self, pod: PodInfo, row: int, sign: int) -> None:
        for res, value in pod.requests.items():
            col = self._column(res)
            if col is not None:
                self.requested[row, col] += sign * value
                self.req_gen += 1

    # ---- pods --------------------------------------------------------------------------------
    def upsert_pod(self, pod: PodInfo, observed_binding: bool = False) -> None:
        """Record a pod from the API or a snapshot. A pod without a node is remembered as pending
        (its requests are needed when kso binds it); a terminal pod is forgotten."""
        with self.lock:
            old = self.pods.get(pod.uid)
            if not pod.node_name or pod.terminal:
                if old is not None:
                    self._unbind(old)
                if pod.node_name == "" and not pod.terminal:
                    self.remember_pending(pod)
                else:
                    self._pending.pop(pod.uid, None)
                return
            self._pending.pop(pod.uid, None)
            if old is not None:
                if old.node_name == pod.node_name and old.requests == pod.requests:
                    self.pods[pod.uid] = self._bounded(pod)
                    self.assumed.pop(pod.uid, None)
                    return
                self._unbind(old)
            elif observed_binding and pod.uid not in self.assumed and not is_placeholder(pod):
                # (a capacity placeholder runs a pause container: it reserves requests but adds no load)
                self._note_recent(pod)
            self.assumed.pop(pod.uid, None)
            self._bind(pod)

    def remove_pod(self, uid: str) -> None:
        with self.lock:
            self._pending.pop(uid, None)
            old = self.pods.get(uid)
            if old is not None:
                self._unbind(old)

    def _bounded(self, pod: PodInfo) -> PodInfo:
        """``pod`` with at most max_pod_annotation_bytes of annotations (a copy when some are dropped)."""
        ann = pod.annotations
        if not ann or sum(map(len, ann.values())) + sum(map(len, ann)) <= self.max_pod_annotation_bytes:
            return pod
        return replace(pod, annotations=trim_annotations(ann, self.max_pod_annotation_bytes))

    def _bind(self, pod: PodInfo) -> None:
        pod = self._bounded(pod)
        self.pods[pod.uid] = pod
        self._pods_by_node.setdefault(pod.node_name, set()).add(pod.uid)
        row = self.row_of.get(pod.node_name)
        if row is not None:
            self._account(pod, row, +1)
        self._touch()

    def _unbind(self, pod: PodInfo) -> None:
        self.pods.pop(pod.uid, None)
        self.assumed.pop(pod.uid, None)
        uids = self._pods_by_node.get(pod.node_name)
        if uids is not None:
            uids.discard(pod.uid)
            if not uids:
                del self._pods_by_node[pod.node_name]
        row = self.row_of.get(pod.node_name)
        if row is not None:
            self._account(pod, row, -1)
        self._touch()

    def pending_pods(self) -> list[PodInfo]:
        """Pods seen without a node (the scheduling queue as far as the watch shows it), oldest first."""
        with self.lock:
            return list(self._pending.values())

    def bound_pods(self) -> list[PodInfo]:
        with self.lock:
            return list(self.pods.values())

    def remember_pending(self, pod: PodInfo) -> None:
        pod = self._bounded(pod)
        with self.lock:
            self._pending[pod.uid] = pod
            self._pending.move_to_end(pod.uid)
            while len(self._pending) > self._pending_limit:
                self._pending.popitem(last=False)

    def pending_pod(self, uid: str = "", namespace: str = "", name: str = "") -> PodInfo | None:
        with self.lock:
            if uid and uid in self._pending:
                return self._pending[uid]
            if uid and uid in self.pods:
                return self.pods[uid]
            if name:
                for pod in reversed(self._pending.values()):
                    if pod.name == name and pod.namespace == namespace:
                        return pod
            return None

    def assume(self, pod: PodInfo, node_name: str) -> bool:
        """kso bound ``pod`` to ``node_name``: count it there now. Returns False when it already was
        (a retried bind), so nothing is counted twice."""
        with self.lock:
            old = self.pods.get(pod.uid)
            if old is not None and old.node_name == node_name:
                return False
            bound = PodInfo(**{**{s: getattr(pod, s) for s in PodInfo.__slots__}, "node_name": node_name})
            if old is not None:
                self._unbind(old)
            self._pending.pop(pod.uid, None)
            self._bind(bound)
            self.assumed[pod.uid] = time.time()
            self._note_recent(bound)
            return True

    def _note_recent(self, pod: PodInfo) -> None:
        row = self.row_of.get(pod.node_name)
        cpu, mem = pod.requests.get(CPU, 0.0), pod.requests.get(MEMORY, 0.0) / MIB
        self._recent.append((time.time(), pod.uid, pod.node_name, cpu, mem))
        if row is not None:
            self.recent[row] += (cpu, mem)
            self.recent_gen += 1

    def expire_recent(self, now: float) -> None:
        horizon = now - self.recent_window_s
        while self._recent and self._recent[0][0] < horizon:
            _, _, node, cpu, mem = self._recent.popleft()
            row = self.row_of.get(node)
            if row is not None:
                self.recent[row] -= (cpu, mem)
                np.maximum(self.recent[row], 0.0, out=self.recent[row])
                self.recent_gen += 1

    # ---- reads -------------------------------------------------------------------------------
    def node(self, name: str) -> NodeInfo | None:
        with self.lock:
            row = self.row_of.get(name)
            return None if row is None else self._nodes[row]

    def node_names(self) -> list[str]:
        with self.lock:
            return list(self.row_of)

    def knows(self, name: str, resource_version: str = "") -> bool:
        with self.lock:
            row = self.row_of.get(name)
            if row is None:
                return False
            node = self._nodes[row]
            return not resource_version or (node is not None and node.resource_version == resource_version)

    def __len__(self) -> int:
        return len(self.row_of)

    def node_infos(self, rows: np.ndarray) -> list[NodeInfo | None]:
        with self.lock:
            nodes = self._nodes
            return [nodes[r] for r in rows.tolist()]

    def view(self, names: Iterable[str]) -> NodeView:
        """The rows of ``names`` (in that order; unknown names get the sentinel row 0), found in one dict lookup per
        name, and their columns taken by those rows from the store-wide view (``whole``), which the view carries:
        the cost of a call does not depend on having seen its list before (kube-scheduler never sends the same list
        twice in a row: a rotating sample, in completion order)."""
        if type(names) is not list:
            names = list(names)
        with self.lock:
            self.expire_recent(time.time())
            whole = self.whole()
            gens = (self.req_gen, self.recent_gen)
            last = self._last_view
            # the same list, unchanged since (compared with its copy: identical strings compare at once), and the
            # same store-wide view: the same view, whose arrays are read only
            if (last is not None and last[0] is names and last[2].whole is whole and last[3] == gens
                    and last[1] == names):
                return last[2]
            # fromiter over a map of the bound dict.get runs in C (no list of the rows in between): ~4x faster than a
            # comprehension at 500 names
            rows = np.fromiter(map(self.row_of.get, names, repeat(0, len(names))), dtype=np.intp, count=len(names))
            # One gather of the store-wide view's packed node columns (row-major: a row's columns side by side) for
            # all of them, the columns then slices of it; requested and recent from the store's own columns
            block = self._whole_block.take(rows, axis=0)
            block.flags.writeable = False  # its slices, shared by the calls that get this view again, are read only
            view = NodeView(
                names=names, known=rows > 0, requested=self.requested.take(rows, axis=0), columns=whole.columns,
                recent=self.recent.take(rows, axis=0), node_list=None, image_node_count=self.image_node_count,
                total_nodes=len(self.row_of), rows=rows, state=self, layout=self.layout, whole=whole,
                **self._node_column_slices(block, len(whole.columns)))
            view.unknown = len(rows) - int(np.count_nonzero(view.known))
            for array in (view.known, view.requested, view.recent, rows):
                array.flags.writeable = False  # shared by the calls that get this view again
            self._last_view = (names, list(names), view, gens)
            return view

    def whole(self) -> NodeView:
        """The store-wide view: every row of the store, row r being the store's row r (the sentinel row 0 and free
        rows unknown, named ""). Its node columns (allocatable, the statistics, congestion) are read-only copies,
        taken again only when they changed (node_gen, or a row changing hands): while they do not change it is the
        same view with the same arrays, so a value computed per node from them is computed once (LastKept) and taken
        by each call's rows. ``requested`` and ``recent`` change with every bind: not copied here (empty, no rows),
        each call takes them from the store's own columns and applies them itself. Its ``columns`` map is shared
        with the views gathered from it: read only."""
        with self.lock:
            old, cap = self._whole, self._capacity
            if old is not None and len(old) == cap and old.layout == self.layout and self._whole_gens == self.node_gen:
                return old
            names = [""] * cap
            for name, row in self.row_of.items():
                names[row] = name
            known = np.zeros(cap, dtype=bool)
            known[list(self.row_of.values())] = True
            # the node columns packed side by side in one row-major block (a call's view gathers its rows in one take)
            block = self._whole_block = frozen(np.hstack(
                [self.alloc, self.mean_free, self.std_free, self.forecast_free, self.congestion[:, None]]))
            self._whole = NodeView(
                names=names, known=frozen(known), requested=frozen(np.zeros((0, len(self.columns)))),
                columns=dict(self.columns), recent=frozen(np.zeros((0, 2))), node_list=None,
                image_node_count=self.image_node_count, total_nodes=len(self.row_of),
                rows=frozen(np.arange(cap, dtype=np.intp)), state=self, layout=self.layout,
                unknown=cap - len(self.row_of), **self._node_column_slices(block, len(self.columns)))
            self._whole_gens = self.node_gen
            return self._whole

    @staticmethod
    def _node_column_slices(block: np.ndarray, resources: int) -> dict[str, np.ndarray]:
        """A NodeView's node columns as slices of ``block``, whole()'s packing: allocatable (``resources`` columns),
        mean, std and forecast free (2 each), congestion (1)."""
        r = resources
        return {"alloc": block[:, :r], "mean_free": block[:, r:r + 2], "std_free": block[:, r + 2:r + 4],
                "forecast_free": block[:, r + 4:r + 6], "congestion": block[:, r + 6]}

    def plan_copy(self) -> PlanCopy:
        """A consistent copy of what a plan's build reads (PlanCopy), taken under the lock in O(nodes + pods) C-level
        copies (a few ms at 150k pods, against most of a second for a build under the lock)."""
        with self.lock:
            names = list(self.row_of)
            rows = np.fromiter(self.row_of.values(), dtype=np.intp, count=len(names))
            nodes = self._nodes
            return PlanCopy(names, [nodes[r] for r in rows.tolist()], self.requested.take(rows, axis=0),
                            dict(self.columns), self.mean_free.take(rows, axis=0), self.std_free.take(rows, axis=0),
                            set(self._pods_by_node), list(self.pods), list(self._pending.values()), self.version,
                            self.age_seconds())

    def pods_on(self, name: str) -> list[PodInfo]:
        with self.lock:
            return [self.pods[u] for u in self._pods_by_node.get(name, ())]

    def mark_synced(self, source: str) -> None:
        with self.lock:
            self.synced = True
            self.source = source
            self.last_sync = time.time()

    def mark_heard(self) -> None:
        """The source spoke without a change (a watch bookmark): the cache is current as of now."""
        self.last_heard = time.time()

    def age_seconds(self) -> float:
        """Seconds since the cache last heard from its source (sync, event or bookmark)."""
        ref = max(self.last_sync, self.last_change, self.last_heard) if self.synced else 0.0
        return time.time() - ref if ref else math.inf

    def clear(self) -> None:
        """Forget everything (before a re-list)."""
        with self.lock:
            for name in list(self.row_of):
                self.remove_node(name)
            self.pods.clear()
            self._pods_by_node.clear()
            self._recent.clear()
            self.assumed.clear()
            self._touch()
