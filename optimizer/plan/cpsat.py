"""The one CP-SAT model builder both solves use (``optimizer.plan.model`` for new pods, ``optimizer.reoptimize.migration``
for moves): integer counts x[c, n] of each class on each node, and the rows every placement model has.

    x[c, n] in lb[c, n]..ub[c, n]                       only where ub > 0 (rules allow it, a pod fits); lb is 0
                                                        unless the caller fixes part of a placement
    fit     sum_c req[c, r] x[c, n] <= cap[n, r] * y[n]  every resource r (cpu, memory, pods, extended)
    safe    sum_c a[r, c, n] x[c, n] <= budget[r, n] * y[n]   r in (cpu, memory): the linearised chance
                                                        constraint of optimizer.plan.chance
    index   T_MAX * sum_c a[r, c, n] x[c, n] + const[r, n] <= cap[r, n] * t     the load index of
                                                        optimizer.plan.compiled.load_index, bounded by t
The caller adds its own rows (unplaced pods, moves) and the objective, then calls ``solve``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from optimizer.plan.compiled import Compiled, index_terms

LARGE_MODEL_PAIRS = 20_000


class PlacementModel:
    def __init__(self, comp: Compiled, ub: np.ndarray, lb: np.ndarray | None = None) -> None:
        self.comp = comp
        self.ub = ub
        self.model = cp_model.CpModel()
        self.x: dict[tuple[int, int], cp_model.IntVar] = {}
        self.by_node: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(comp.n_nodes)]
        self.by_class: list[list[cp_model.IntVar]] = [[] for _ in range(comp.n_classes)]
        for ci, ni in zip(*np.nonzero(ub), strict=True):
            low = 0 if lb is None else int(lb[ci, ni])
            v = self.model.new_int_var(low, int(ub[ci, ni]), f"x{ci}_{ni}")
            self.x[(int(ci), int(ni))] = v
            self.by_node[ni].append((int(ci), v))
            self.by_class[ci].append(v)
        self._index_cap, self._index_const = index_terms(comp)

    def weighted(self, ni: int, coeffs: np.ndarray) -> Any:
        """sum_c coeffs[c] x[c, ni] over the classes that may go on node ni."""
        terms = self.by_node[ni]
        return cp_model.LinearExpr.weighted_sum([v for _, v in terms], [int(coeffs[ci]) for ci, _ in terms])

    def add_fit(self, ni: int, cap: np.ndarray, y: Any = 1) -> None:
        """Requests on node ni within ``cap`` (one value per compiled resource) when y = 1, nothing when 0."""
        for ri in range(len(self.comp.resources)):
            if any(int(self.comp.req[ci, ri]) for ci, _ in self.by_node[ni]):
                self.model.add(self.weighted(ni, self.comp.req[:, ri]) <= int(cap[ri]) * y)

    def safe_load(self, ni: int, ri: int) -> Any:
        """sum_c a[ri, c, ni] x[c, ni]: the linearised safe-bound load the placed pods add."""
        return self.weighted(ni, self.comp.a[ri, :, ni])

    def add_safe(self, ni: int, y: Any = 1) -> None:
        """The safe bound on both load resources, at the compiled budgets (never below 0)."""
        for ri in range(2):
            self.model.add(self.safe_load(ni, ri) <= max(int(self.comp.budget[ri, ni]), 0) * y)

    def add_index_bound(self, ni: int, t: Any) -> None:
        """t >= the node's load index on both load resources."""
        for ri in range(2):
            cap_i, const = int(self._index_cap[ri, ni]), int(self._index_const[ri, ni])
            scaled = self.weighted(ni, self.comp.a[ri, :, ni] * 1000)
            self.model.add(scaled + const <= cap_i * t)

    def abs_deviations(self, values: list[Any], target: int, hi: int, prefix: str) -> list[Any]:
        """d_i = |values_i - target| as new variables in 0..hi."""
        out = []
        for i, v in enumerate(values):
            d = self.model.new_int_var(0, hi, f"{prefix}{i}")
            self.model.add_abs_equality(d, v - target)
            out.append(d)
        return out

    def solve(self, objective: Any, time_limit_s: float, workers: int, seed: int, relative_gap: float,
              callback: cp_model.CpSolverSolutionCallback | None = None) -> tuple[cp_model.CpSolver, str]:
        self.model.minimize(objective)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(time_limit_s, 0.1)
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        solver.parameters.relative_gap_limit = relative_gap
        if self.comp.n_classes * self.comp.n_nodes > LARGE_MODEL_PAIRS:
            # Large models: CP-SAT's full presolve (probing, symmetry detection) costs more than it gives
            # within a plan's time budget (at 1,500 nodes x 100 classes the presolve alone took most of it).
            solver.parameters.cp_model_probing_level = 0
            solver.parameters.symmetry_level = 0
            solver.parameters.max_presolve_iterations = 1
        status = solver.solve(self.model, callback) if callback is not None else solver.solve(self.model)
        return solver, solver.status_name(status)

    def values(self, solver: cp_model.CpSolver) -> np.ndarray:
        x = np.zeros((self.comp.n_classes, self.comp.n_nodes), dtype=np.int64)
        for (ci, ni), v in self.x.items():
            x[ci, ni] = solver.value(v)
        return x
