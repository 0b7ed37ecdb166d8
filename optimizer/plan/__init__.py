"""Planning: where the pending pods should go. The problem (problem, cluster_problem), its compiled arrays
and safe bound (compiled, chance, exact), the solvers (model, cpsat, heuristics), the protected child
process (protected_solver), the one pipeline (pipeline.plan_cluster), the plan file (placement_plan) and
``kso plan`` (cli)."""
