"""optimizer.plan.cpsat.PlacementModel, the model builder both solves share: its fit and safe rows alone hold
a placement within each node's free requests and linearised safe budget, and its values are the counts."""

from __future__ import annotations

import numpy as np

from optimizer.plan.compiled import compile_problem
from optimizer.plan.cpsat import PlacementModel
from optimizer.plan.openb import openb_problem


def test_fit_and_safe_rows_bound_the_most_pods_a_model_places() -> None:
    comp = compile_problem(openb_problem(6, 40, seed=2))
    pm = PlacementModel(comp, comp.ub())
    for ni in range(comp.n_nodes):
        pm.add_fit(ni, comp.free[ni])
        pm.add_safe(ni)
    for ci in range(comp.n_classes):
        pm.model.add(sum(pm.by_class[ci]) <= int(comp.counts[ci]))
    placed = sum(v for vs in pm.by_class for v in vs)
    solver, status = pm.solve(-placed, time_limit_s=10, workers=1, seed=0, relative_gap=0.0)
    assert status == "OPTIMAL"
    x = pm.values(solver)
    assert x.shape == (comp.n_classes, comp.n_nodes) and int(x.sum()) == -int(solver.objective_value) > 0
    assert (x <= comp.ub()).all() and (x.sum(axis=1) <= comp.counts).all()
    assert (x.T @ comp.req <= comp.free).all()  # every node's requests within its free allocatable
    for ri in range(2):  # the linearised safe bound of every node
        assert (np.einsum("cn,cn->n", comp.a[ri], x) <= np.maximum(comp.budget[ri], 0)).all()
