"""What happened in one run, counted from the engine's truth (true usage per node and step).

Scored window: steps ``W..T-1``, W = ``RunResult.warmup_steps`` (``EngineRules.warmup_s``: the first hour, at most
a quarter of the replay). Every harm and cost figure below counts those steps only; ``scheduled``,
``pending_end``, ``failed``, ``attempts``, ``pending_p95_min``, the autoscaler's and the policy's counters
(``scale_ups``, ``scale_downs``, ``ca_evictions``, ``pods_moved``) and the per-step arrays cover the whole run.

Harm (what users pay for; h = step length in hours, demand = what the node's pods asked for):

- ``overloaded_node_hours``: node-steps whose cpu or memory demand exceeds U* of allocatable, x h;
  ``overloaded_node_hours_80`` / ``_90`` / ``_100``: the same above 80%, 90% and 100% of allocatable, whatever U*
  (``overloaded_node_hours`` is ``_90`` at the default U* = 90%);
- ``memory_over_allocatable_node_hours``: node-steps whose memory demand exceeds allocatable (before the kills
  it causes), x h;
- ``unmet_cpu_core_hours``: sum over node-steps of (cpu demand - allocatable)+ in cores, x h (throttled cpu);
- ``memory_overcommit_tib_hours``: sum over node-steps of (memory demand - allocatable)+ in TiB, x h;
- ``oom_kills``: pods killed or evicted for memory (events); ``pods_oom_killed``: distinct pods among them;
- ``pod_hours_lost_to_kills``: per kill in step k, the pod-steps from k until the pod runs again, or until its
  departure or the replay's end, x h (the step of the kill counts: the engine's monitoring has the node without
  the victim in it, so the victim did not serve it; a pod killed again before it ran through a step is one
  stretch, counted once; a part of ``pending_pod_hours``);
- ``pending_pod_hours``: pod-steps in which a pod was alive (arrived, not departed) and not running through the
  step (in the queue, or killed in it), plus the part of a step before a pod's partial-step start, x h;
- ``start_latency_p50_s`` / ``start_latency_p99_s`` / ``start_latency_mean_s``: per queue entry that ended with the
  pod started in a scored step (a pod's arrival, or its return after a kill, an eviction or a drain), the seconds
  from entering the queue to starting, at the engine's retry rounds (``EngineRules.retry_s``: a pod held one
  minute shows 60 s); ``pods_started``: how many. A pod that never started before its departure is not in them:
  it is in ``pods_never_served``;
- ``pods_never_served``: pods alive after the warm-up that were not running when their life ended (at their
  departure or the replay's end): never placed, or killed / evicted / drained and not placed again;
- ``pod_time_served_pct``: 100 x pod-time running / pod-time alive (what the trace asked for; a partial-step start
  serves the rest of its step);
- ``mem_pressure_node_hours``: node-steps with the kubelet's MemoryPressure condition (memory demand above
  allocatable in the step, or the taint carried over the transition period), x h;
- ``overload_episodes`` (secondary): runs of consecutive overloaded node-steps, per node.

Cost: ``provisioned_node_hours`` (billed node-steps: provisioning or ready, x h), ``provisioned_core_hours``
and ``provisioned_memory_tib_hours`` (the same weighted by each node's allocatable cpu cores / memory TiB)."""

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
    attempts: int  # scheduling attempts (each pod in the queue, each step and each retry round of it)
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
    overloaded_node_hours: float = 0.0
    unmet_cpu_core_hours: float = 0.0
    memory_overcommit_tib_hours: float = 0.0
    pods_oom_killed: int = 0
    pod_hours_lost_to_kills: float = 0.0
    pending_pod_hours: float = 0.0
    pods_never_served: int = 0
    start_latency_p50_s: float = 0.0
    start_latency_p99_s: float = 0.0
    start_latency_mean_s: float = 0.0
    pods_started: int = 0
    overloaded_node_hours_80: float = 0.0
    overloaded_node_hours_90: float = 0.0
    overloaded_node_hours_100: float = 0.0
    memory_over_allocatable_node_hours: float = 0.0
    pod_time_served_pct: float = 100.0
    provisioned_core_hours: float = 0.0
    provisioned_memory_tib_hours: float = 0.0
    mem_pressure_node_hours: float = 0.0
    warmup_steps: int = 0
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


TIB = 1024.0**4


# Pod-time lost to kills: per pod p, the union over its kills k of the steps [max(k, W), min(next run of p after k,
# departure, T)) (a pod killed again before it ran through a step is in one stretch, counted once).
def lost_to_kills(kills: list[tuple[int, int, int]], ran: np.ndarray, departure: np.ndarray, warmup: int) -> int:
    """Pod-steps from each kill until the pod ran again (or departed, or the replay ended), from step ``warmup``."""
    T = ran.shape[1]
    lost = 0
    covered: dict[int, int] = {}  # pod -> the end of its stretch counted so far
    for k, p, _ in sorted(kills):
        after = ran[p, k + 1:]
        back = k + 1 + int(np.argmax(after)) if after.any() else T
        end = min(back, int(departure[p]), T)
        lost += max(0, end - max(k, warmup, covered.get(p, 0)))
        covered[p] = max(covered.get(p, 0), end)
    return lost


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1e3, q)) if values else float("nan")


def compute(result: RunResult, u_star: float = DEFAULT_U_STAR) -> RunMetrics:
    T = result.usage.shape[1]
    W = min(result.warmup_steps, T)
    h = result.step_s / 3600.0
    util = result.usage / result.alloc[:, None, :]
    absolute = result.demand if result.demand is not None else result.usage
    demand = absolute / result.alloc[:, None, :]
    events, severity = overload_counts(demand, u_star)
    scored, severity_w, demand_w = events[:, W:], severity[:, W:], demand[:, W:]
    in_use = result.pods_on_node > 0
    placed = [p for p in result.pods if p.ever_bound or p.node >= 0]
    billed = (result.provisioned if result.provisioned is not None else in_use)[:, W:]
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
    P = len(result.pods)
    departure = np.array([p.departure_step for p in result.pods], dtype=np.int64)
    arrival = np.array([p.arrival_step for p in result.pods], dtype=np.int64)
    steps = np.arange(W, T)
    alive = (arrival[:, None] <= steps[None, :]) & (departure[:, None] > steps[None, :])  # (P, T - W)
    ran = result.ran[:, W:] if result.ran is not None else np.zeros((P, T - W), dtype=bool)
    asked = int(alive.sum())
    # the part of a step before a partial-step start (the pod ran through the step's rest)
    idle = sum(frac for _, k, frac in result.partial_starts if k >= W)
    running = int((ran & alive).sum()) - idle
    started = np.array([s for k, s in result.start_latency_s if k >= W], dtype=float)
    worst_w = demand_w.max(axis=2) if demand_w.size else np.zeros((0, 0))
    served = result.served if result.served is not None else np.zeros(P, dtype=bool)
    kills = [kill for kill in result.oom_kills if kill[0] >= W]
    overcommit = np.clip(absolute[:, W:, 1] - result.alloc[:, None, 1], 0.0, None)
    pressure = result.memory_pressure[:, W:] if result.memory_pressure is not None else np.zeros((0, 0), dtype=bool)
    unmet = result.unmet_cpu_core_min[:, W:] if result.unmet_cpu_core_min is not None else np.zeros((0, 0))
    return RunMetrics(
        policy=result.policy, mode=result.mode, u_star=u_star, pods_total=len(result.pods), scheduled=len(placed),
        pending_end=pending_end, failed=len(never) - pending_end, attempts=result.attempts,
        overload_events=int(scored.sum()), overload_events_100=int((demand_w.max(axis=2) > 1.0).sum()),
        overload_cpu=int((demand_w[:, :, 0] > u_star).sum()), overload_memory=int((demand_w[:, :, 1] > u_star).sum()),
        severity_sum=float(severity_w.sum()), severity_max=float(severity_w.max()) if severity_w.size else 0.0,
        node_hours=float(n_used * result.step_s / 3600.0), nodes_in_use_mean=float(in_use.sum(axis=0).mean()),
        fragmentation_cpu=float(frag[:, 0].mean()), fragmentation_memory=float(frag[:, 1].mean()),
        spread_cpu=float(spread[:, 0].mean()), spread_memory=float(spread[:, 1].mean()),
        mean_util_cpu=float(util[:, :, 0][in_use].mean()) if n_used else 0.0, pods_moved=result.moves,
        latency_ms={verb: (_pct(v, 50), _pct(v, 99), len(v)) for verb, v in result.latencies.items()},
        wall_s=result.wall_s, extra=dict(result.extra), per_step_overloads=events.sum(axis=0),
        per_step_nodes_in_use=in_use.sum(axis=0),
        util=demand, overload_episodes=episodes(scored), overload_node_steps=int(scored.sum()),
        unmet_cpu_core_min=float(unmet.sum()), oom_kills=len(kills), provisioned_node_hours=float(billed.sum() * h),
        pending_mean=float(result.pending_per_step[W:].mean()) if result.pending_per_step is not None and T > W else 0.0,
        pending_p95_min=float(np.percentile(waits, 95)) if len(waits) else 0.0, ca_evictions=result.ca_evictions,
        scale_ups=result.scale_ups, scale_downs=result.scale_downs,
        overloaded_node_hours=float(scored.sum() * h), unmet_cpu_core_hours=float(unmet.sum() / 60.0),
        memory_overcommit_tib_hours=float(overcommit.sum() / TIB * h), pods_oom_killed=len({p for _, p, _ in kills}),
        pod_hours_lost_to_kills=lost_to_kills(kills, result.ran, departure, W) * h if result.ran is not None else 0.0,
        pending_pod_hours=(asked - running) * h, pods_never_served=int((~served & (departure > W)).sum()),
        pod_time_served_pct=100.0 * running / asked if asked else 100.0,
        provisioned_core_hours=float((billed * result.alloc[:, None, 0]).sum() / 1000.0 * h),
        provisioned_memory_tib_hours=float((billed * result.alloc[:, None, 1]).sum() / TIB * h),
        mem_pressure_node_hours=float(pressure.sum() * h), warmup_steps=W,
        start_latency_p50_s=float(np.percentile(started, 50)) if len(started) else 0.0,
        start_latency_p99_s=float(np.percentile(started, 99)) if len(started) else 0.0,
        start_latency_mean_s=float(started.mean()) if len(started) else 0.0, pods_started=len(started),
        overloaded_node_hours_80=float((worst_w > 0.8).sum() * h), overloaded_node_hours_90=float((worst_w > 0.9).sum() * h),
        overloaded_node_hours_100=float((worst_w > 1.0).sum() * h),
        memory_over_allocatable_node_hours=float((demand_w[:, :, 1] > 1.0).sum() * h) if demand_w.size else 0.0)
