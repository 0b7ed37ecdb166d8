"""extender.plan_cache.PlanSolver, the extender's background re-solve: it takes class usage from its usage
source (Prometheus when KSO_PROMETHEUS_URL is set, see prometheus_usage) and solves through
optimizer.plan.pipeline.plan_cluster in the protected child."""

from __future__ import annotations


def test_background_re_solve_counts_new_pods_at_their_measured_usage() -> None:
    """The extender's re-solve (extender.plan_cache.PlanSolver) takes class usage from its usage source (Prometheus
    when KSO_PROMETHEUS_URL is set, see prometheus_usage) and solves through the protected child."""
    from benchmarks.clusters import cluster_state, generate
    from extender.plan_cache import PlanCache, PlanSolver, prometheus_usage
    from kso.core.settings import load_settings
    from optimizer.plan.problem import UsageModel, class_key
    from optimizer.settings import PlanSettings

    state = cluster_state(generate(8, 12, seed=0, best_effort_share=0.0, daemonset_pods=0))
    pending = state.pending_pods()
    measured = {class_key(p): UsageModel({"cpu": 50.0, "memory": 64.0 * 2**20}, {"cpu": 10.0, "memory": 0.0}, "history")
                for p in pending}
    asked: list[int] = []

    def usage(seen: object) -> dict[str, UsageModel]:
        asked.append(id(seen))
        return measured

    cache = PlanCache(load_settings(PlanSettings, {"KSO_SOLVER_TIME_LIMIT_S": "3"}), state)
    solver = PlanSolver(cache, usage=usage)
    try:
        plan = solver.solve()
    finally:
        solver.close()
    assert plan is not None and asked == [id(state)]
    assert all(c.detail["usage"]["source"] == "history" and c.detail["usage"]["mean"]["cpu"] == 50.0
               for c in plan.classes.values())
    assert prometheus_usage(None)(state) == {}  # Prometheus not in use: classes at their requests
