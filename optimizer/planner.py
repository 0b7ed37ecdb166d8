"""One call from problem to plan, in this process or in a separate one (so a solve never holds the
extender's GIL or its request path)."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

from optimizer.model import SolverOptions, compile_problem, solve
from optimizer.plan import PlacementPlan, plan_from_result
from optimizer.problem import PlacementProblem


def make_plan(problem: PlacementProblem, options: SolverOptions) -> PlacementPlan:
    comp = compile_problem(problem)
    result = solve(problem, options, comp)
    return plan_from_result(problem, comp, result, options.policy)


class PlanWorker:
    """A one-process pool (spawned, not forked: the extender has threads) that solves plans."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, problem: PlacementProblem, options: SolverOptions) -> Future[PlacementPlan]:
        return self._pool.submit(make_plan, problem, options)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
