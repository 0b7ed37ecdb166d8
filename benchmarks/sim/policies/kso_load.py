"""kso's node statistics in the replay (what its annotator or forecaster would report), and the measured usage per
Deployment that ``judge="usage"`` reads: pure functions of the replay's visible history (benchmarks/sim/policies/
kso_extender.py uses them; see its docstring for the modes)."""

from __future__ import annotations

import numpy as np

from benchmarks.sim.engine import SimView

WINDOW_S = 900.0  # the statistics' window (load-watcher's 15 minutes)
TREND_STEPS = 12  # stats="trend": the last hour of the node's current pods' usage


# Planned node load under stats="trend", per node and resource, from y_t = the node's current pods' summed
# usage over the last w steps (t = 0..w-1; the past only):
#   slope b = sum_t (t - tbar)(y_t - ybar) / sum_t (t - tbar)^2     (least squares; 0 when w < 2)
#   mean    = window mean + max(b, 0) x horizon_steps               (rises are planned for, falls are not)
#   std     = max(window std, std_t(y_t))                           (the hour's spread, drift included)
def trend_stats(window_mean: np.ndarray, window_std: np.ndarray, series: np.ndarray,
                horizon_steps: float) -> tuple[np.ndarray, np.ndarray]:
    w = series.shape[1]
    if w < 2:
        return window_mean, window_std
    t = np.arange(w) - (w - 1) / 2.0
    slope = np.einsum("t,ntr->nr", t, series - series.mean(axis=1, keepdims=True)) / float((t * t).sum())
    return window_mean + np.maximum(slope, 0.0) * horizon_steps, np.maximum(window_std, series.std(axis=1))


# A pod bound at step b is in the window's samples b..s-1 only: until the window (steps s-w..s-1) has fully
# seen it (b <= s-w, or b = 0 while the window is still filling), its samples are taken out of its node's
# series and it counts at its request instead. Per node n and resource r, with R = those pods on n:
#   settled[n, t, r] = (usage[n, t, r] - sum_{p in R, t >= b_p} usage_p[t, r])+   (cpu is throttled: never below 0)
#   mean = mean_t settled + sum_{p in R} request_p,   std = std_t settled.
def settled_window_stats(sim: SimView, window_steps: int, sizes: dict[int, np.ndarray] | None = None
                         ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(N, 2) mean and std of each node's usage over the last ``window_steps`` steps with every pod the window
    has not fully seen counted at its request (the rule above; at ``sizes[pod index]`` where given), and whether
    any metric exists yet."""
    mean, std, has = sim.window_stats(window_steps)
    lo = max(sim.step - window_steps, 0)
    pods = [p for p in sim.running.values() if p.node >= 0 and lo < p.bound_step < sim.step]
    if not has or not pods:
        return mean, std, has
    idx = np.fromiter((p.index for p in pods), dtype=np.int64, count=len(pods))
    since = np.fromiter((p.bound_step - lo for p in pods), dtype=np.int64, count=len(pods))
    node = np.fromiter((p.node for p in pods), dtype=np.int64, count=len(pods))
    req = np.array([(p.cpu, p.memory) for p in pods])
    use = np.nan_to_num(sim.pod_usage_window(idx, lo)) * req[:, None, :]  # (P, w, 2)
    use = np.where((np.arange(use.shape[1])[None, :] >= since[:, None])[:, :, None], use, 0.0)
    partial = np.zeros((len(sim.node_names), use.shape[1], 2))
    np.add.at(partial, node, use)
    settled = np.clip(sim.usage_history[:, lo:] - partial, 0.0, None)
    held = np.zeros_like(sim.alloc)
    if sizes:
        req = np.array([sizes.get(p.index, (p.cpu, p.memory)) for p in pods], dtype=float)
    np.add.at(held, node, req)
    return settled.mean(axis=1) + held, settled.std(axis=1), True


def node_load_stats(sim: SimView, stats: str, horizon_steps: float, sizes: dict[int, np.ndarray] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, bool]:
    """(N, 2) mean and std of absolute usage kso's statistics give each node (``STATS_MODES``, not "forecast"),
    and whether any metric exists yet; a pod the window has not fully seen counts at its request (at
    ``sizes[pod index]`` where given: ``settled_window_stats``)."""
    mean, std, has = settled_window_stats(sim, max(1, int(round(WINDOW_S / sim.step_s))), sizes)
    if has and stats == "trend":
        mean, std = trend_stats(mean, std, sim.current_pods_usage(TREND_STEPS), horizon_steps)
    return mean, std, has


# judge="usage": per Deployment d, from its running pods' measured usage over the last ``window_steps`` finished
# steps (each pod's samples since it was bound), n = the samples, per resource:
#   ratio_d = sum over samples of usage / request  /  n          (a pod of d is judged at request x ratio_d)
# Deployments with fewer than ``min_samples`` samples are left out (their pods are judged at their requests).
def owner_usage_ratio(sim: SimView, window_steps: int, min_samples: int) -> dict[str, np.ndarray]:
    pods = [p for p in sim.running.values() if p.node >= 0 and p.owner and p.bound_step < sim.step]
    lo = max(sim.step - window_steps, 0)
    if not pods or lo >= sim.step:
        return {}
    idx = np.fromiter((p.index for p in pods), dtype=np.int64, count=len(pods))
    since = np.fromiter((max(p.bound_step, lo) for p in pods), dtype=np.int64, count=len(pods))
    ratio = sim.pod_usage_window(idx, lo)  # (P, w, 2) usage / request
    seen = (np.arange(lo, sim.step)[None, :] >= since[:, None])[:, :, None] & np.isfinite(ratio) & (ratio >= 0)
    n, s1 = seen.sum(axis=1), np.where(seen, ratio, 0.0).sum(axis=1)  # (P, 2)
    acc: dict[str, np.ndarray] = {}
    for j, pod in enumerate(pods):
        row = np.concatenate([n[j], s1[j]])
        acc[pod.owner] = acc[pod.owner] + row if pod.owner in acc else row
    return {owner: row[2:] / row[:2] for owner, row in acc.items() if row[:2].min() >= min_samples}
