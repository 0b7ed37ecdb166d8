"""The views of a ClusterState: one call's nodes as rows gathered from the store's columns (NodeView, with the
store-wide view its rows index: what is computed per node from the store alone is computed once for every row and
taken by the call's rows), and LastKept, a value kept for the read-only arrays of a store-wide view."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any, Protocol

import numpy as np

from kso.core.objects import NodeInfo
from kso.core.resources import CPU, MEMORY, MIB

# Statistics columns: cpu (millicores) and memory (MB), the safe agent's units.
STAT_SCALE = np.array([1.0, 1.0 / MIB])


class RowSource(Protocol):
    """What a view reads from its store on demand, by the store's rows (ClusterState)."""

    def node_infos(self, rows: np.ndarray) -> list[NodeInfo | None]: ...

    def image_sizes(self, images: Sequence[str], rows: np.ndarray) -> np.ndarray: ...


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
    state: RowSource | None = None  # the store the rows index, for its NodeInfos and image columns
    layout: int = -1  # the store's row layout when the view was taken
    unknown: int = -1  # how many nodes are unknown (-1: not counted yet; see all_known)
    # The store-wide view the rows index (row r of the store is its row r), read only and the same object while
    # its columns do not change: a value computed per node from the store alone is computed on it once and taken by
    # ``rows`` (kso.core.cluster.ClusterState.whole). None for a view not gathered from a store, and for that view.
    whole: NodeView | None = None

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


def frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (a store-wide view's columns are shared by every call that gets the view)."""
    array.flags.writeable = False
    return array


class LastKept:
    """The last value computed from some read-only arrays (a store-wide view's columns), matched by their identity:
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
