"""What happened in one run, counted from the engine's truth (true usage per node and step)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from benchmarks.sim.engine import RunResult

DEFAULT_U_STAR = 0.90  # SAFEUTILIZATION's default (90 %)


@dataclass
class RunMetrics:
    policy: str
    mode: str
    u_star: float
    pods_total: int
    scheduled: int  # placed at some point
    pending_end: int  # never placed, still waiting at the end of the replay
    failed: int  # never placed and left the trace (deleted while pending)
    attempts: int  # scheduling attempts (each pod in the queue, each step)
    overload_events: int  # node-steps with cpu or memory demand above u_star of allocatable
    overload_events_100: int  # ... above 100 %
    overload_cpu: int  # node-steps above u_star in cpu
    overload_memory: int
    severity_sum: float  # sum over node-steps of max_r (util_r - u_star)+, in fractions of capacity
    severity_max: float
    node_hours: float  # node-steps with at least one pod x step length
    nodes_in_use_mean: float
    fragmentation_cpu: float  # mean over steps: free cpu on used nodes that cannot hold the median pod / free cpu there
    fragmentation_memory: float
    spread_cpu: float  # mean over steps of the std across used nodes of cpu utilisation (true usage)
    spread_memory: float
    mean_util_cpu: float  # mean over node-steps in use
    pods_moved: int  # 0: no re-optimisation in these runs
    latency_ms: dict[str, tuple[float, float, int]]  # verb -> (p50, p99, calls)
    wall_s: float
    extra: dict[str, float] = field(default_factory=dict)  # policy-specific timings and counters
    overload_episodes: int = 0  # runs of consecutive node-steps whose demand exceeds U* (cpu or memory)
    overload_node_steps: int = 0  # node-steps whose demand exceeds U* (the episodes' total length)
    unmet_cpu_core_min: float = 0.0  # cpu demand above allocatable, throttled
    oom_kills: int = 0
    provisioned_node_hours: float = 0.0  # billed: provisioning or ready node-steps x step length
    pending_mean: float = 0.0  # pods in the queue after scheduling, mean over steps
    pending_p95_min: float = 0.0  # p95 over queue entries of the time until bound (censored at departure / end)
    ca_evictions: int = 0
    scale_ups: int = 0
    scale_downs: int = 0
    per_step_overloads: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    per_step_nodes_in_use: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    util: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))  # (N, T, 2)


# Overload event: node-step with max_r usage_r / alloc_r > U*; severity = max_r (usage_r / alloc_r - U*)+.
def overload_counts(util: np.ndarray, u_star: float) -> tuple[np.ndarray, np.ndarray]:
    """(N, T) bool events and (N, T) severity, from util (N, T, 2)."""
    worst = util.max(axis=2)
    return worst > u_star, np.clip(worst - u_star, 0.0, None)


# Fragmentation at a step, per resource r: sum over used nodes whose free capacity cannot hold the median pod
# (free_cpu < median_cpu or free_mem < median_mem) of free_r, divided by the free_r summed over all used nodes.
def fragmentation(free: np.ndarray, in_use: np.ndarray, median_pod: np.ndarray) -> np.ndarray:
    """(T, 2) fragmented fraction of free capacity on used nodes; free (N, T, 2), in_use (N, T)."""
    stuck = ((free < median_pod[None, None, :]).any(axis=2) & in_use)[:, :, None]
    used_free = np.where(in_use[:, :, None], free, 0.0).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(stuck, free, 0.0).sum(axis=0) / used_free
    return np.nan_to_num(frac, nan=0.0)


# Episodes: per node, the number of rising edges of the boolean series above[t] (a run of consecutive
# node-steps above U* is one episode).
def episodes(above: np.ndarray) -> int:
    """Count of runs of True along the last axis, summed; ``above`` (N, T) bool."""
    if above.size == 0:
        return 0
    starts = above[:, 1:] & ~above[:, :-1]
    return int(above[:, 0].sum() + starts.sum())


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1e3, q)) if values else float("nan")


def compute(result: RunResult, u_star: float = DEFAULT_U_STAR) -> RunMetrics:
    T = result.usage.shape[1]
    util = result.usage / result.alloc[:, None, :]
    demand = (result.demand if result.demand is not None else result.usage) / result.alloc[:, None, :]
    events, severity = overload_counts(demand, u_star)
    in_use = result.pods_on_node > 0
    placed = [p for p in result.pods if p.ever_bound or p.node >= 0]
    billed = result.provisioned if result.provisioned is not None else in_use
    waits = np.array(result.waits_steps, dtype=float) * result.step_s / 60.0
    never = [p for p in result.pods if not (p.ever_bound or p.node >= 0)]
    pending_end = sum(1 for p in never if p.departure_step >= T)
    free = result.alloc[:, None, :] - result.requested
    frag = fragmentation(free, in_use, result.median_pod)
    spread = np.zeros((T, 2))
    for k in range(T):
        used = in_use[:, k]
        if used.sum() > 1:
            spread[k] = util[used, k].std(axis=0)
    n_used = in_use.sum()
    return RunMetrics(
        policy=result.policy, mode=result.mode, u_star=u_star, pods_total=len(result.pods), scheduled=len(placed),
        pending_end=pending_end, failed=len(never) - pending_end, attempts=result.attempts,
        overload_events=int(events.sum()), overload_events_100=int((demand.max(axis=2) > 1.0).sum()),
        overload_cpu=int((demand[:, :, 0] > u_star).sum()), overload_memory=int((demand[:, :, 1] > u_star).sum()),
        severity_sum=float(severity.sum()), severity_max=float(severity.max()) if severity.size else 0.0,
        node_hours=float(n_used * result.step_s / 3600.0), nodes_in_use_mean=float(in_use.sum(axis=0).mean()),
        fragmentation_cpu=float(frag[:, 0].mean()), fragmentation_memory=float(frag[:, 1].mean()),
        spread_cpu=float(spread[:, 0].mean()), spread_memory=float(spread[:, 1].mean()),
        mean_util_cpu=float(util[:, :, 0][in_use].mean()) if n_used else 0.0, pods_moved=result.moves,
        latency_ms={verb: (_pct(v, 50), _pct(v, 99), len(v)) for verb, v in result.latencies.items()},
        wall_s=result.wall_s, extra=dict(result.extra), per_step_overloads=events.sum(axis=0),
        per_step_nodes_in_use=in_use.sum(axis=0),
        util=demand, overload_episodes=episodes(events), overload_node_steps=int(events.sum()),
        unmet_cpu_core_min=float(result.unmet_cpu_core_min.sum()) if result.unmet_cpu_core_min is not None else 0.0,
        oom_kills=len(result.oom_kills), provisioned_node_hours=float(billed.sum() * result.step_s / 3600.0),
        pending_mean=float(result.pending_per_step.mean()) if result.pending_per_step is not None else 0.0,
        pending_p95_min=float(np.percentile(waits, 95)) if len(waits) else 0.0, ca_evictions=result.ca_evictions,
        scale_ups=result.scale_ups, scale_downs=result.scale_downs)
