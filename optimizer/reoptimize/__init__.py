"""Re-optimisation of the running placement (``kso reoptimize``): which pods may move (eligibility), the
move-budgeted solve (migration, migration_result), acting on it through the Eviction API (eviction) and
the command (cli). Built on the plan part (optimizer.plan)."""
