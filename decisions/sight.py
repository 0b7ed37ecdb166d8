"""See before you pack: which of a call's nodes kso's packing priorities (and the plan) may pull pods onto.

kso packs by requests (pigeon-holing's A_BINPACK) and by the plan, and filters by measured load (safe-overload).
Where a node's load is not measured, the filter passes it unjudged, so packing it would put pods where kso cannot
see whether they fit: the empty cluster at start-up, a node the autoscaler just added, a Job of hundreds of pods
whose binds the statistics have not seen yet. The rule: packing pulls only onto nodes whose load kso can see; on
the others kube-scheduler's own scores (spreading, in the default profile) choose, and kso's filter still judges.

Per node n of a call, with S_n = load statistics exist for cpu and memory (a mean, a positive capacity),
R_n,r = the requests bound to n recently that the statistics cannot have seen yet (ClusterState's recent binds,
cpu millicores and memory MB), C_n,r = allocatable, f = KSO_PACK_UNSEEN_MAX / 100:

    measured_n = S_n
    seen_n     = S_n  and  max_r R_n,r / C_n,r <= f

A packing priority scores 0 (no pull) on a node that is not seen; the plan's preference is dropped on a node that
is not measured (the plan places its own pods, so it accounts for the binds it ordered). Nothing changes where
every node is seen, and kso's filter and binder are untouched.
"""

from __future__ import annotations

import numpy as np

from kso.core.views import NodeView


def unseen_share(view: NodeView) -> np.ndarray:
    """Per node, the larger of recent (unseen) cpu and memory requests over allocatable; 0 where allocatable is not
    positive or unknown (such a node is not measured anyway)."""
    cap = view.stat_capacity()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(cap > 0, view.recent / np.where(cap > 0, cap, 1.0), 0.0)
    return np.nan_to_num(share, nan=0.0).max(axis=1) if share.size else np.zeros(len(view))


def seen_nodes(measured: np.ndarray, view: NodeView, max_unseen: float) -> np.ndarray:
    """``seen_n`` above: measured and at most ``max_unseen`` (a fraction) of allocatable bound but not yet seen."""
    if not measured.any():
        return measured
    return measured & (unseen_share(view) <= max_unseen)


def least_requested(view: NodeView) -> np.ndarray:
    """Per node, 1 - the larger of requested cpu and memory over allocatable (0 where unknown): what kube-scheduler's
    default profile spreads by (NodeResourcesFit LeastAllocated), for a front end that has no such score of its own
    (``kso scheduler``) to fall back on where packing is withheld."""
    cols = [view.columns["cpu"], view.columns["memory"]]
    alloc, req = view.alloc[:, cols], view.requested[:, cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(alloc > 0, req / np.where(alloc > 0, alloc, 1.0), 1.0)
    return np.clip(1.0 - np.nan_to_num(share, nan=1.0).max(axis=1), 0.0, 1.0)
