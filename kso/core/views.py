"""The views of a ClusterState: one call's nodes as rows gathered from the store's columns (NodeView), the
views of the names lists kube-scheduler sends again and again, remembered with the columns they gathered
(ViewMemo), and LastKept, a value kept for the read-only arrays a remembered view hands out."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, Any

import numpy as np

from kso.core.objects import NodeInfo
from kso.core.resources import CPU, MEMORY, MIB

if TYPE_CHECKING:
    from kso.core.cluster import ClusterState

# Statistics columns: cpu (millicores) and memory (MB), the safe agent's units.
STAT_SCALE = np.array([1.0, 1.0 / MIB])


def image_sizes_scan(nodes: Sequence[NodeInfo | None], images: Sequence[str]) -> np.ndarray:
    """Bytes of each of ``images`` on each node, (n, k), by looking in every node (0 = absent or unknown
    node). The reference for ClusterState's image columns, and their fallback."""
    return np.array(
        [[0 if node is None else node.images.get(img, 0) for img in images] for node in nodes],
        dtype=float,
    ).reshape(len(nodes), len(images))


@dataclass(slots=True)
class NodeView:
    """The rows of ClusterState for the nodes of one call, in the call's order.

    Unknown nodes have ``known`` False, NaN allocatable and statistics, and zero requests."""

    names: list[str]
    known: np.ndarray  # bool (n,)
    alloc: np.ndarray  # (n, R) canonical units; NaN unknown
    requested: np.ndarray  # (n, R) sum of bound and assumed pods' requests
    columns: dict[str, int]  # resource -> column of alloc / requested
    mean_free: np.ndarray  # (n, 2) cpu milli, memory MB from annotations; NaN missing
    std_free: np.ndarray
    forecast_free: np.ndarray
    recent: np.ndarray  # (n, 2) requests of pods bound within the recent window (cpu milli, MB)
    congestion: np.ndarray  # (n,) NaN missing
    node_list: list[NodeInfo | None] | None  # see ``nodes``
    image_node_count: dict[str, int]  # normalised image name -> number of nodes holding it
    total_nodes: int
    rows: np.ndarray | None = None  # (n,) rows of the store (0 = unknown node)
    state: ClusterState | None = None  # the store the rows index, for its image columns
    layout: int = -1  # the store's row layout when the view was taken
    unknown: int = -1  # how many nodes are unknown (-1: not counted yet; see all_known)

    def __len__(self) -> int:
        return len(self.names)

    def all_known(self) -> bool:
        """Whether the store knows every node of the view: counted once per view (the view's builder counts it
        from its rows), where each agent used to ask ``known.all()`` again."""
        if self.unknown < 0:
            self.unknown = len(self.known) - int(np.count_nonzero(self.known))
        return self.unknown == 0

    @property
    def nodes(self) -> list[NodeInfo | None]:
        """The NodeInfo of each node (None = unknown), taken from the store on first use: most calls never
        need the objects, only the columns."""
        if self.node_list is None:
            self.node_list = [None] * len(self.names) if self.state is None or self.rows is None else \
                self.state.node_infos(self.rows)
        return self.node_list

    def image_sizes(self, images: Sequence[str]) -> np.ndarray:
        """Bytes of each of ``images`` on each node of the view, (n, k); 0 where absent or unknown."""
        if self.state is None or self.rows is None:
            return image_sizes_scan(self.nodes, images)
        return self.state.image_sizes(images, self.rows)

    def stat_capacity(self) -> np.ndarray:
        """Allocatable cpu (milli) and memory (MB), (n, 2)."""
        return self.alloc[:, [self.columns[CPU], self.columns[MEMORY]]] * STAT_SCALE


# Names lists whose rows ClusterState.view remembers (stable lists: kube-scheduler's filter list and its
# prioritize list, with a few sample windows besides).
MEMO_VIEWS = 8


def frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (a remembered view's columns are shared by every call that gets the view)."""
    array.flags.writeable = False
    return array


class LastKept:
    """The last value computed from some read-only arrays (a remembered view's columns), matched by their identity:
    ClusterState hands the same read-only arrays out while their values have not changed, so the same objects give
    the same value. ``get(*arrays)`` is the value kept for those very objects (a value kept for fewer arrays
    matches on its own: the ones it was computed from come first), else None; ``keep(value, *arrays)`` keeps it
    when every array is read-only. One attribute, set in one assignment: another thread sees all of it or none."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[tuple[np.ndarray, ...], Any] | None = None

    def get(self, *arrays: np.ndarray | None) -> Any:
        last = self.last
        if last is not None and len(last[0]) <= len(arrays) and all(map(is_, last[0], arrays)):
            return last[1]
        return None

    def keep(self, value: Any, *arrays: np.ndarray | None) -> Any:
        """``value``, kept for ``arrays`` if each is a read-only array (else left as it was)."""
        if all(a is not None and not a.flags.writeable for a in arrays):
            self.last = (arrays, value)
        return value

    @property
    def value(self) -> Any:
        """The value last kept, whatever its arrays (None before any)."""
        last = self.last
        return None if last is None else last[1]


@dataclass(slots=True, eq=False)
class Gathered:
    """What ClusterState.view remembers of one names list: its rows, and its columns as of the generations noted
    (-1: not gathered yet), with the view last built from them."""

    names: list[str]
    layout: int
    rows: np.ndarray
    known: np.ndarray
    unknown: int
    node_gen: int = -1
    req_gen: int = -1
    recent_gen: int = -1
    alloc: np.ndarray | None = None
    mean_free: np.ndarray | None = None
    std_free: np.ndarray | None = None
    forecast_free: np.ndarray | None = None
    congestion: np.ndarray | None = None
    columns: dict[str, int] | None = None
    requested: np.ndarray | None = None
    recent: np.ndarray | None = None
    view: NodeView | None = None


class ViewMemo:
    """ClusterState.view's memory: the rows of each stable names list, and its columns while they have not changed."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.entries: OrderedDict[int, Gathered] = OrderedDict()  # id(names) -> the rows gathered for that list

    def view(self, names: Iterable[str], stable: bool = False) -> NodeView:
        """Gather the store's rows of ``names`` (in that order); unknown names get the sentinel row.

        ``stable``: ``names`` is a list its owner never changes in place (the protocol's kept NodeNames list,
        the same object for the same bytes: kube-scheduler sends the same names call after call). Then the
        rows of that list are remembered, and so are the gathered columns while they have not changed (the
        generations above): a call with the same list gathers again only the columns that changed since (a
        pod bound: ``requested``), and none when nothing did (then the very same view is handed out). A
        remembered view's arrays are shared by the calls that get it, so they are made read-only."""
        if not stable or type(names) is not list:
            names = list(names)
            stable = False
        state = self.state
        with state.lock:
            state.expire_recent(time.time())
            if stable:
                memo = self.entries.get(id(names))
                if memo is not None and memo.names is names and memo.layout == state.layout:
                    return self._regathered(memo)
            # map over the bound dict.get runs in C: ~4x faster than a comprehension at 500 names
            found = list(map(state.row_of.get, names, repeat(0, len(names))))
            rows = np.array(found, dtype=np.intp)
            unknown = found.count(0)
            if stable:
                memo = self._remember(names, rows, unknown)
                return self._regathered(memo)
            # take(axis=0) is the same gather as fancy indexing, at a fraction of its overhead
            return NodeView(
                names=names,
                known=rows > 0,
                alloc=state.alloc.take(rows, axis=0),
                requested=state.requested.take(rows, axis=0),
                columns=dict(state.columns),
                mean_free=state.mean_free.take(rows, axis=0),
                std_free=state.std_free.take(rows, axis=0),
                forecast_free=state.forecast_free.take(rows, axis=0),
                recent=state.recent.take(rows, axis=0),
                congestion=state.congestion.take(rows),
                node_list=None,
                image_node_count=state.image_node_count,
                total_nodes=len(state.row_of),
                rows=rows,
                state=state,
                layout=state.layout,
                unknown=unknown,
            )

    def _remember(self, names: list[str], rows: np.ndarray, unknown: int) -> Gathered:
        """A memo entry for ``names`` (its columns not gathered yet); the least recently used beyond MEMO_VIEWS go.
        Under the lock."""
        known = rows > 0
        rows.flags.writeable = known.flags.writeable = False
        memo = Gathered(names, self.state.layout, rows, known, unknown)
        views = self.entries
        views[id(names)] = memo
        while len(views) > MEMO_VIEWS:
            views.popitem(last=False)
        return memo

    def _regathered(self, memo: Gathered) -> NodeView:
        """The view of a remembered names list: the columns that changed since it was last taken gathered again
        (read-only), the others as they were. Under the lock."""
        state = self.state
        self.entries.move_to_end(id(memo.names))
        view = memo.view
        rows = memo.rows
        if memo.node_gen != state.node_gen:
            memo.node_gen = state.node_gen
            memo.alloc = frozen(state.alloc.take(rows, axis=0))
            memo.mean_free = frozen(state.mean_free.take(rows, axis=0))
            memo.std_free = frozen(state.std_free.take(rows, axis=0))
            memo.forecast_free = frozen(state.forecast_free.take(rows, axis=0))
            memo.congestion = frozen(state.congestion.take(rows))
            memo.columns = dict(state.columns)
            view = None
        if memo.req_gen != state.req_gen:
            memo.req_gen = state.req_gen
            memo.requested = frozen(state.requested.take(rows, axis=0))
            view = None
        if memo.recent_gen != state.recent_gen:
            memo.recent_gen = state.recent_gen
            memo.recent = frozen(state.recent.take(rows, axis=0))
            view = None
        if view is None:
            view = memo.view = NodeView(
                names=memo.names, known=memo.known, alloc=memo.alloc, requested=memo.requested, columns=memo.columns,
                mean_free=memo.mean_free, std_free=memo.std_free, forecast_free=memo.forecast_free,
                recent=memo.recent, congestion=memo.congestion, node_list=None,
                image_node_count=state.image_node_count, total_nodes=len(state.row_of), rows=rows, state=state,
                layout=memo.layout, unknown=memo.unknown)
        return view
