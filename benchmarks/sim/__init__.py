"""Trace-replay simulator: real openb nodes and pods, Bitbrains usage (synthetic join), the default
scheduler, the peers and kso compared on the same trace. ``kso bench`` / ``python -m benchmarks.sim``."""
