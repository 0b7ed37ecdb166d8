"""Helpers shared by the engine's and the extender's tests: an extender with chosen priorities over a small cluster."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

MANY_EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
