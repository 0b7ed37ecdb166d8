"""``kso-plan``: kube-scheduler's default profile + the kso extender, following a PlacementPlan.

Every ``replan_steps`` steps (15 minutes by default) the optimizer solves a plan from what kso would know:
the extender's node cache (requests of bound pods, ready nodes only), the nodes' load (the kso
forecaster's, or with ``stats="window"`` the 15-minute mean and std load-watcher would report, or with ``stats="trend"`` that
mean raised by the last hour's upward trend up to the next re-solve and a std covering the hour: ``node_load_stats``), the
pods to place (the pending queue plus, per class, as many pods as arrived in the last planning window:
kso's guess at the next arrivals; the trace's future is never read), and **per-class usage from the
replay's own past**: ``optimizer.plan.cluster_problem.class_usage_from_history`` over the measured usage of the
class's running pods in the last ``history_steps`` (no oracle). The plan is installed into the
extender's PlanCache, so the prioritize calls that decide follow plan slots, as in production.

``kso-plan+reopt``: the same, plus ``kso reoptimize`` every ``reopt_steps`` (``optimizer.migration.
plan_migration`` over the running pods, at most ``max_moves`` moves, its default move cost): each move
is an eviction the engine counts; the evicted pod is re-queued and the migration's target plan guides it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.kso_extender import KsoInprocPolicy, node_load_stats, pod_object

HISTORY_STEPS = 12  # one hour of each running pod's measured usage
PRIORS = {
    "none": "a class with no measured usage counts at its requests, no spread (optimizer.plan.problem.request_usage)",
    "pooled": "a class with no measured usage counts at request x the mean usage/request of every measured pod of "
              "the last hour, std request x that ratio's std (pooled over pod-steps)",
}


# Usage prior of a class nothing was measured of (a new Deployment), from every measured pod p of the last
# hour with n_p samples, S1_p = sum of its usage, S2_p = sum of its usage^2, request q_p (per resource):
#   m = sum_p (S1_p / q_p) / sum_p n_p,   v = sum_p (S2_p / q_p^2) / sum_p n_p - m^2   (ratio pooled over pod-steps)
#   the new class's usage: mean = request x m, std = request x sqrt(v).
def pooled_ratio(n: np.ndarray, s1: np.ndarray, s2: np.ndarray, req: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    from optimizer.plan.cluster_problem import MIN_USAGE_SAMPLES  # a prior needs as many samples as a class's own model

    total = n.sum(axis=0)
    if (total < MIN_USAGE_SAMPLES).any():
        return None
    m = (s1 / req).sum(axis=0) / total
    v = (s2 / (req * req)).sum(axis=0) / total - m * m
    return m, np.sqrt(np.maximum(v, 0.0))


class KsoPlanPolicy(KsoInprocPolicy):
    name = "kso-plan"
    mode = "in-process kso extender + CP-SAT plan (optimizer in-process, re-solved every replan_steps)"
    plan_policy = "binpack"

    def __init__(self, seed: int = 0, replan_steps: int = 3, time_limit_s: float = 5.0, prior: str = "none",
                 **kw: Any) -> None:
        env = dict(kw.pop("env", None) or {})
        super().__init__(seed=seed, env=env, **kw)
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {', '.join(PRIORS)}, not {prior!r}")
        self.prior = prior
        self.mode = f"{self.mode}; new classes: {PRIORS[prior]}"
        self._ratio: tuple[np.ndarray, np.ndarray] | None = None  # pooled usage/request mean and std, per resource
        if env.get("KSO_PLAN_POLICY"):
            self.plan_policy = env["KSO_PLAN_POLICY"].lower()
        elif self.plan_policy != "binpack" and not env:
            self.name = f"kso-plan[{self.plan_policy}]"
        elif self.plan_policy != "binpack":
            self.name = self.name.replace("kso-plan", f"kso-plan[{self.plan_policy}]", 1)
        self.replan_steps = replan_steps
        self.time_limit_s = time_limit_s
        self._arrivals: deque[tuple[int, Any]] = deque()  # (step, PodInfo) first seen
        self._seen: set[int] = set()
        self._infos: dict[int, Any] = {}
        self._keys: dict[int, tuple[str, ...]] = {}  # pod index -> the class and owner keys its usage pools under
        self.extra.update({"solves": 0, "solve_s": 0.0, "planned_pods": 0, "unplaced": 0, "nodes_over_bound": 0,
                           "classes_with_history": 0})

    def setup(self, sim: SimView) -> None:
        super().setup(sim)
        from extender.plan_cache import PlanCache
        from kso.core.settings import load_settings
        from optimizer.settings import PlanSettings

        settings = load_settings(PlanSettings, {**self.env, "KSO_PLAN_POLICY": self.plan_policy.upper(),
                                                "KSO_PLAN_MAX_AGE_S": "86400"})
        self.cache = PlanCache(settings, self.state)
        self.extender.plan = self.cache

    def info(self, pod: SimPod) -> Any:
        from kso.core.objects import pod_from_k8s

        got = self._infos.get(pod.index)
        if got is None:
            got = self._infos[pod.index] = pod_from_k8s(pod_object(pod))
        return got

    def forecasts(self, sim: SimView, wall: float) -> dict[str, Any] | None:
        """Per node and resource, the load kso plans with: the forecaster's, or ``node_load_stats``'s."""
        from forecasting.types import NodeForecast

        if self.stats != "forecast":  # the next re-solve is replan_steps away: the horizon the spread must cover
            mean_abs, std_abs, has = node_load_stats(sim, self.stats, self.replan_steps)
            if not has:
                return None
            fc = {"mean": mean_abs / sim.alloc, "std": std_abs / sim.alloc}
            fc["p95"] = fc["mean"] + 1.645 * fc["std"]
        else:
            fc = sim.node_forecasts(self.forecaster, 900.0)
            if fc is None:
                return None
        return {name: {res: NodeForecast(name, res, float(fc["mean"][i, r]), float(fc["std"][i, r]), float(fc["mean"][i, r]),
                                         float(fc["p95"][i, r]), float(fc["p95"][i, r]), float(fc["p95"][i, r]), 900.0,
                                         "sim", wall, 0.0)
                       for r, res in enumerate(("cpu", "memory"))}
                for i, name in enumerate(sim.node_names) if sim.active[i]}

    def class_usage(self, sim: SimView) -> dict[str, Any]:
        """Per Deployment, mean and std of its running pods' measured usage over the last hour (the past only):
        ``optimizer.plan.cluster_problem.class_usage_from_history``'s pooled statistics, computed here from per-pod sums
        (the replay's usage is a dense array; building per-pod sample lists each plan cost ~10% of a run).
        tests/benchmarks/sim/test_google.py checks both give the same models."""
        from optimizer.plan.cluster_problem import MIN_USAGE_SAMPLES
        from optimizer.plan.problem import UsageModel, class_key, owner_key

        pods = [p for p in sim.running.values() if p.node >= 0 and p.bound_step < sim.step]
        lo = max(sim.step - HISTORY_STEPS, 0)
        self._ratio = None
        if not pods or lo >= sim.step:
            return {}
        idx = np.fromiter((p.index for p in pods), dtype=np.int64, count=len(pods))
        since = np.fromiter((max(p.bound_step, lo) for p in pods), dtype=np.int64, count=len(pods))
        req = np.array([(p.cpu, p.memory) for p in pods])
        use = sim.pod_usage_window(idx, lo) * req[:, None, :]  # (P, w, 2) absolute usage
        seen = (np.arange(lo, sim.step)[None, :] >= since[:, None])[:, :, None] & np.isfinite(use) & (use >= 0)
        use = np.where(seen, use, 0.0)
        n, s1, s2 = seen.sum(axis=1), use.sum(axis=1), (use * use).sum(axis=1)  # (P, 2) each
        self._ratio = pooled_ratio(n, s1, s2, np.maximum(req, 1e-9))
        acc: dict[str, np.ndarray] = {}
        for j, pod in enumerate(pods):
            keys = self._keys.get(pod.index)
            if keys is None:
                info = self.info(pod)
                keys = self._keys[pod.index] = tuple({class_key(info), owner_key(info)} - {""})
            row = np.concatenate([n[j], s1[j], s2[j]])
            for key in keys:
                acc[key] = acc[key] + row if key in acc else row.copy()
        out = {}
        # pooled mean = S1 / n, pooled (population) variance = S2 / n - mean^2, per resource
        for key, (n_c, n_m, s1_c, s1_m, s2_c, s2_m) in acc.items():
            if min(n_c, n_m) < MIN_USAGE_SAMPLES:
                continue
            mean = {"cpu": s1_c / n_c, "memory": s1_m / n_m}
            var = {"cpu": s2_c / n_c - mean["cpu"] ** 2, "memory": s2_m / n_m - mean["memory"] ** 2}
            out[key] = UsageModel({r: float(v) for r, v in mean.items()},
                                  {r: float(np.sqrt(max(v, 0.0))) for r, v in var.items()}, "history")
        return out

    def add_prior(self, usage: dict[str, Any], pods: list[Any]) -> int:
        """``prior="pooled"``: a usage model (``pooled_ratio``) for each class to plan that has none; returns how many."""
        from optimizer.plan.problem import LOAD_RESOURCES, UsageModel, class_key, owner_key

        if self._ratio is None:
            return 0
        m, sd = self._ratio
        added = 0
        for info in pods:
            key = class_key(info)
            if key in usage or owner_key(info) in usage:
                continue
            req = np.array([info.requests.get(r, 0.0) for r in LOAD_RESOURCES])
            usage[key] = UsageModel(dict(zip(LOAD_RESOURCES, (req * m).tolist(), strict=True)),
                                    dict(zip(LOAD_RESOURCES, (req * sd).tolist(), strict=True)), "prior")
            added += 1
        return added

    def observe(self, sim: SimView) -> None:
        super().observe(sim)
        if sim.step % self.replan_steps:
            return
        from optimizer.plan.cluster_problem import problem_from_state
        from optimizer.plan.model import SolverOptions
        from optimizer.plan.pipeline import plan_cluster

        t0 = time.perf_counter()
        wall = time.time()
        while self._arrivals and self._arrivals[0][0] < sim.step - self.replan_steps:
            self._arrivals.popleft()
        pending = [self.info(p) for p in sim.pending]
        expected = [self.info(SimPod(-1 - k, f"expected-{k}", f"expected-{sim.step}-{k}", p.cpu, p.memory, 0, 0,
                                     owner=p.owner)) for k, (_, p) in enumerate(self._arrivals)]
        self._infos = {i: v for i, v in self._infos.items() if i >= 0}
        usage = self.class_usage(sim)
        self.extra["classes_with_history"] += len(usage)
        if self.prior == "pooled":
            self.extra["classes_with_prior"] = self.extra.get("classes_with_prior", 0) + self.add_prior(usage, pending + expected)
        settings = self.cache.settings
        problem = problem_from_state(self.state, self.forecasts(sim, wall), settings.u_star, settings.eps,
                                     pending=pending + expected, class_usage=usage, now=wall)
        if not problem.classes:
            return
        # lp_bound=False: the plan's LP bound and gap are reporting only (never read here; the placement is the same)
        plan = plan_cluster(problem, SolverOptions(self.plan_policy, self.time_limit_s, 1, 0.01, lp_bound=False)).plan
        self.cache.install(plan, f"sim step {sim.step}")
        summary = plan.summary()
        self.extra["solves"] += 1
        self.extra["solve_s"] += time.perf_counter() - t0
        self.extra["planned_pods"] += summary["pods_planned"]
        self.extra["unplaced"] += summary["pods_unplaced"]
        self.extra["nodes_over_bound"] += sum(1 for n in plan.nodes.values() if n.used and max(n.risk.values(), default=0.0)
                                              > settings.eps + 1e-9)

    def close(self) -> None:
        metrics = self.extender.metrics.plan_decisions
        self.extra["plan_hits"] = int(metrics.labels("hit")._value.get())
        self.extra["plan_misses"] = int(metrics.labels("miss")._value.get() + metrics.labels("none")._value.get())
        super().close()

    def place(self, pod: SimPod, sim: SimView) -> str | None:
        if pod.index not in self._seen:
            self._seen.add(pod.index)
            self._arrivals.append((sim.step, pod))
        return super().place(pod, sim)

    def released(self, pod: SimPod, node: str, sim: SimView) -> None:
        super().released(pod, node, sim)
        self._infos.pop(pod.index, None)
        self._keys.pop(pod.index, None)


class KsoPlanLoadBalancePolicy(KsoPlanPolicy):
    name = "kso-plan[load-balance]"
    plan_policy = "load-balance"


class KsoPlanReoptimizePolicy(KsoPlanPolicy):
    """kso-plan + ``kso reoptimize`` every ``reopt_steps`` (moves counted by the engine)."""

    name = "kso-plan+reopt"

    def __init__(self, seed: int = 0, reopt_steps: int = 12, max_moves: int = 10, **kw: Any) -> None:
        super().__init__(seed=seed, **kw)
        self.reopt_steps = reopt_steps
        self.max_moves = max_moves
        self.extra.update({"reopt_runs": 0, "reopt_s": 0.0, "moves_planned": 0})

    def evictions(self, sim: SimView) -> list[int]:
        if sim.step == 0 or sim.step % self.reopt_steps:
            return []
        from optimizer.reoptimize.migration import MigrationOptions, MoveLimits, plan_migration

        t0 = time.perf_counter()
        wall = time.time()
        running = {self.info(p).uid: p.index for p in sim.running.values()}
        movable = [replace(self.info(p), node_name=sim.node_names[p.node]) for p in sim.running.values()]
        options = MigrationOptions(policy=self.plan_policy, limits=MoveLimits(max_moves=self.max_moves),
                                   time_limit_s=self.time_limit_s, workers=1, seed=self.seed)
        settings = self.cache.settings
        result = plan_migration(self.state, self.forecasts(sim, wall), settings.u_star, settings.eps, movable, options,
                                class_usage=self.class_usage(sim), now=wall)
        self.extra["reopt_runs"] += 1
        self.extra["reopt_s"] += time.perf_counter() - t0
        self.extra["moves_planned"] += len(result.moves)
        # a solve that found nothing in its time limit (UNKNOWN) is not a "no move needed": count it apart
        self.extra[f"reopt_{result.status.lower()}"] = self.extra.get(f"reopt_{result.status.lower()}", 0) + 1
        if result.moves:
            self.cache.install(result.plan, f"reoptimize at sim step {sim.step}")
        return [running[m.uid] for m in result.moves if m.uid in running]

