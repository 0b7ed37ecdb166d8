"""``kso-plan``: kube-scheduler's default profile + the kso extender over HTTP, following a PlacementPlan.

Every ``replan_steps`` steps (15 minutes by default) the optimizer solves a plan from what kso would know:
the extender's node cache (requests of bound pods), the kso forecaster's node load (the same forecasts
the heuristic policy turns into annotations) and the pods to place: the pending queue plus, per class,
as many pods as arrived in the last planning window (kso's guess at the next arrivals; no oracle, the
trace's future is never read). The plan is installed into the extender's PlanCache, so the prioritize
calls that decide are the real HTTP path with plan slots; binds take slots as in production.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from benchmarks.sim.engine import SimPod, SimView
from benchmarks.sim.policies.kso_extender import KsoExtenderPolicy, pod_object


class KsoPlanPolicy(KsoExtenderPolicy):
    name = "kso-plan"
    mode = "HTTP: real kso extender + CP-SAT plan (optimizer in-process, re-solved every replan_steps)"
    plan_policy = "binpack"

    def __init__(self, seed: int = 0, replan_steps: int = 3, time_limit_s: float = 5.0, **kw: Any) -> None:
        env = dict(kw.pop("env", None) or {})
        super().__init__(seed=seed, env=env, **kw)
        if env.get("KSO_PLAN_POLICY"):
            self.plan_policy = env["KSO_PLAN_POLICY"].lower()
        elif self.plan_policy != "binpack":
            self.name = f"kso-plan[{self.plan_policy}]"
        self.replan_steps = replan_steps
        self.time_limit_s = time_limit_s
        self._arrivals: deque[tuple[int, Any]] = deque()  # (step, PodInfo) first seen
        self._seen: set[int] = set()
        self.extra.update({"solves": 0, "solve_s": 0.0, "planned_pods": 0, "unplaced": 0, "nodes_over_bound": 0})

    def setup(self, sim: SimView) -> None:
        super().setup(sim)
        from extender.plan import PlanCache
        from kso.settings import load_settings
        from optimizer.settings import PlanSettings

        settings = load_settings(PlanSettings, {**self.env, "KSO_PLAN_POLICY": self.plan_policy.upper(),
                                                "KSO_PLAN_MAX_AGE_S": "86400"})
        self.cache = PlanCache(settings, self.state)
        self.extender.plan = self.cache

    def observe(self, sim: SimView) -> None:
        super().observe(sim)
        if sim.step % self.replan_steps:
            return
        from forecasting.types import NodeForecast
        from kso.objects import pod_from_k8s
        from optimizer.inputs import problem_from_state
        from optimizer.model import SolverOptions
        from optimizer.planner import make_plan

        t0 = time.perf_counter()
        wall = time.time()
        forecasts: dict[str, dict[str, NodeForecast]] | None = None
        fc = sim.node_forecasts(self.forecaster, 900.0)
        if fc is not None:
            forecasts = {}
            for i, name in enumerate(sim.node_names):
                forecasts[name] = {res: NodeForecast(name, res, float(fc["mean"][i, r]), float(fc["std"][i, r]),
                                                     float(fc["mean"][i, r]), float(fc["p95"][i, r]),
                                                     float(fc["p95"][i, r]), float(fc["p95"][i, r]), 900.0, "sim",
                                                     wall, 0.0)
                                   for r, res in enumerate(("cpu", "memory"))}
        while self._arrivals and self._arrivals[0][0] < sim.step - self.replan_steps:
            self._arrivals.popleft()
        pending = [pod_from_k8s(pod_object(p)) for p in sim.pending]
        expected = []
        for k, (_, info) in enumerate(self._arrivals):
            clone = pod_from_k8s(pod_object(SimPod(-1, f"expected-{k}", f"expected-{sim.step}-{k}", info.requests["cpu"],
                                                   info.requests["memory"], 0, 0)))
            expected.append(clone)
        settings = self.cache.settings
        problem = problem_from_state(self.state, forecasts, settings.u_star, settings.eps, pending=pending + expected,
                                     now=wall)
        if not problem.classes:
            return
        options = SolverOptions(self.plan_policy, self.time_limit_s, 1, 0.01)
        plan = make_plan(problem, options)
        self.cache.install(plan, f"sim step {sim.step}")
        if self._conn is not None:  # uvicorn drops keep-alive connections idle for 5 s; a solve can take that long
            import http.client

            self._conn.close()
            self._conn = http.client.HTTPConnection("127.0.0.1", self._server.port, timeout=30)
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
            from kso.objects import pod_from_k8s

            self._seen.add(pod.index)
            self._arrivals.append((sim.step, pod_from_k8s(pod_object(pod))))
        return super().place(pod, sim)


class KsoPlanLoadBalancePolicy(KsoPlanPolicy):
    name = "kso-plan[load-balance]"
    plan_policy = "load-balance"
