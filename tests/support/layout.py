"""The project's Python packages, named once for the tests that walk the source (layers, settings, docs)."""

# Every package of the installed project (pyproject's packages), lowest layer first.
PACKAGES = ("kso", "forecasting", "optimizer", "decisions", "extender", "scheduler", "benchmarks", "shadow")
# What a cluster runs (the benchmarks and the shadow are tools around it).
PRODUCT = ("kso", "forecasting", "optimizer", "decisions", "extender", "scheduler")
