"""prioritize's reply bytes: ``[{"Host": name, "Score": s}, ...]`` joined from ready-made entries per node and
score, byte for byte what orjson writes for the list (kube-scheduler reads them on every prioritize call)."""

from __future__ import annotations

from operator import itemgetter

import numpy as np
import orjson

from decisions.agents.base import MAX_PRIORITY
from kso.core.cluster import ClusterState
from kso.core.views import NodeView


def host_score_entries(name: str) -> list[bytes]:
    """The JSON of {"Host": name, "Score": s} for s = 0..MAX_PRIORITY, byte for byte as orjson writes it."""
    head = b'{"Host":' + orjson.dumps(name) + b',"Score":'
    return [head + b"%d}" % s for s in range(MAX_PRIORITY + 1)]


class HostScoreReplies:
    """The entries of every node of ``state``, by its row in the store: row * (MAX_PRIORITY + 1) + score -> that
    node's {"Host": ..., "Score": score} JSON. Brought up to date when a row changed hands (the store's layout),
    for the rows whose node is not the one their entries name."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.entries: list[bytes] = []
        self.names: list[str | None] = []  # the node each row's entries are for
        self.layout = -1  # the store's layout the entries are up to date with

    def _follow_layout(self) -> None:
        """Entries for every row's current node. Under the store's lock."""
        state, names, entries = self.state, self.names, self.entries
        for name, row in state.row_of.items():
            if row >= len(names):
                grow = row + 1 - len(names)
                names.extend([None] * grow)
                entries.extend([b""] * (grow * (MAX_PRIORITY + 1)))
            if names[row] != name:
                names[row] = name
                entries[row * (MAX_PRIORITY + 1):(row + 1) * (MAX_PRIORITY + 1)] = host_score_entries(name)
        self.layout = state.layout

    def encode(self, view: NodeView, scores: list[int] | np.ndarray, in_range: bool = False) -> bytes:
        """orjson.dumps([{"Host": name, "Score": score} ...]) for the view's nodes, from the entries (scores
        0..MAX_PRIORITY of nodes in the store; anything else is encoded on the spot). ``scores``: ints, or an
        integer array (its range checked in numpy, not element by element; ``in_range``: the caller knows each
        is 0..MAX_PRIORITY, not checked again)."""
        rows = view.rows
        if rows is not None and len(rows) > 1 and view.all_known():
            if isinstance(scores, np.ndarray):
                ok = (scores.dtype.kind == "i" and scores.shape == rows.shape
                      and (in_range or (0 <= np.minimum.reduce(scores) and np.maximum.reduce(scores) <= MAX_PRIORITY)))
                given = scores if ok else None
            else:
                given = np.array(scores, dtype=np.intp) if 0 <= min(scores) and max(scores) <= MAX_PRIORITY else None
            if given is not None:
                keys = rows * (MAX_PRIORITY + 1) + given
                state = self.state
                with state.lock:
                    if view.layout == state.layout:  # no row has changed hands since the view was taken
                        if self.layout != state.layout:
                            self._follow_layout()
                        return b"[" + b",".join(itemgetter(*keys.tolist())(self.entries)) + b"]"
        if isinstance(scores, np.ndarray):
            scores = scores.tolist()
        return orjson.dumps([{"Host": h, "Score": s} for h, s in zip(view.names, scores, strict=True)])
