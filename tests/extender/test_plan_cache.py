"""extender.plan_cache.PlanSolver, the extender's background re-solve: it takes class usage from its usage
source (Prometheus when KSO_PROMETHEUS_URL is set, see prometheus_usage) and solves through
optimizer.plan.pipeline.plan_cluster in the protected child."""

from __future__ import annotations

from pathlib import Path


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


def test_the_solver_child_builds_the_problem_and_the_plan_the_extender_built(tmp_path: Path) -> None:
    """The plan cycle past the copy runs in the solver's child (optimizer.plan.cluster_problem.plan_from_copy) from the
    copy as the extender packs it (each node pickled once, the bound uids joined): the same problem, the same plan,
    written whole to the plan file; the extender gets it back without its per-node part and baseline pods."""
    import pickle
    from dataclasses import replace

    from optimizer.plan.cluster_problem import BuildInputs, NodePickles, plan_from_copy, problem_from_copy
    from optimizer.plan.compiled import SolverOptions, compile_problem
    from optimizer.plan.placement_plan import load_plan, plan_from_result
    from optimizer.plan.protected_solver import ffd_result
    from tests.optimizer.test_problem_copy import NOW, varied_state

    state, forecasts = varied_state()
    names = state.node_names()
    first = state.node(names[0])
    assert first is not None
    first.memo["agent"] = lambda: None  # what an agent may leave on a node: it does not pickle, and is not sent
    state.upsert_node(replace(first, images={"registry.example/app:1": 10**8}, raw_image_names=("app:1",)))
    pickles = NodePickles()
    copy = state.plan_copy()
    packed = pickles.pack(copy)
    sent = pickle.loads(pickle.dumps(packed)).unpack()
    assert sent.bound == copy.bound and sent.names == copy.names
    without_images = [None if n is None else replace(n, images={}, raw_image_names=()) for n in copy.nodes]
    assert sent.nodes == without_images and any(n is not None and n.images for n in copy.nodes)
    want = problem_from_copy(replace(copy, nodes=without_images), forecasts, 0.9, 0.3, now=NOW)
    assert problem_from_copy(sent, forecasts, 0.9, 0.3, now=NOW) == want

    options = SolverOptions(policy="binpack", time_limit_s=2)
    path = tmp_path / "plan.json"
    plan, summary = plan_from_copy(options, packed, BuildInputs(None, 0.9, 0.3, plan_file=str(path)),
                                   ffd_notes=["fallback"])
    problem = problem_from_copy(copy, None, 0.9, 0.3)
    comp = compile_problem(problem)
    ref = plan_from_result(problem, comp, ffd_result(problem, comp, ["fallback"]), options.policy)
    written = load_plan(str(path), 3600.0)
    assert written.plan_id == plan.plan_id and written.notes == ref.notes
    assert written.to_dict()["classes"] == ref.to_dict()["classes"] and plan.classes == ref.classes
    assert written.to_dict()["nodes"] == ref.to_dict()["nodes"] and written.baseline_pods == copy.bound
    assert plan.nodes == {} and plan.baseline_pods == []  # in the file; the extender has the copy's uids
    assert summary == written.summary() and summary["pods_planned"] > 0 and summary["nodes"] == len(ref.nodes)

    # The next cycle pickles only the node that changed.
    second = state.node(names[1])
    assert second is not None
    state.upsert_node(replace(second, labels={**second.labels, "changed": "yes"}))
    again = pickles.pack(state.plan_copy())
    assert [a is b for a, b in zip(again.nodes, packed.nodes, strict=True)].count(False) == 1


def test_a_dead_solver_child_falls_back_and_the_next_cycle_retries() -> None:
    """A solver child that dies (as OR-Tools' abort does: ProtectedSolver's test hook) is retried with another seed;
    when none returns, one more child gives first-fit-decreasing's plan; when that dies too the solve is an error
    (logged, kept in last_error, the current plan kept until it ages) and the next cycle solves again. No child is
    left behind."""
    import multiprocessing

    from benchmarks.clusters import cluster_state, generate
    from extender.plan_cache import PlanCache, PlanSolver
    from kso.core.settings import load_settings
    from optimizer.plan.protected_solver import FFD_STATUS
    from optimizer.settings import PlanSettings

    state = cluster_state(generate(8, 12, seed=0, best_effort_share=0.0, daemonset_pods=0))
    cache = PlanCache(load_settings(PlanSettings, {"KSO_SOLVER_TIME_LIMIT_S": "3"}), state)
    outcomes: list[str] = []
    solver = PlanSolver(cache, on_solved=lambda result, seconds: outcomes.append(result), usage=lambda seen: {})
    protected = solver.solver
    said = protected.report
    try:
        protected.abort_attempts = 2  # every child of every call dies: CP-SAT's two attempts, then FFD's
        assert solver.solve() is None
        assert outcomes == ["error"] and "died" in (cache.last_error or "") and cache.describe()["plan"] is None
        assert protected._proc is None and not multiprocessing.active_children()

        def lift(note: str) -> None:  # CP-SAT's children die, FFD's returns
            said(note)
            if note.startswith("no solver process returned a plan"):
                protected.abort_attempts = 0

        protected.report = lift
        plan = solver.solve()
        assert plan is not None and plan.status == FFD_STATUS and outcomes[-1] == "ok"
        assert sum("given up" in n or "retrying" in n for n in plan.notes) == 2
        assert sorted(plan.baseline_pods) == sorted(p.uid for p in state.bound_pods())
        assert cache.describe()["plan"]["plan_id"] == plan.plan_id and cache.last_error is None
        protected.report = said
        plan = solver.solve()  # the next cycle: CP-SAT's again
        assert plan is not None and plan.status != FFD_STATUS
        assert protected._proc is None and not multiprocessing.active_children()
    finally:
        solver.close()
