"""``kso scheduler``: a standalone scheduler for pods that name it (spec.schedulerName), with a QoS-driven
queue and cost-aware placement. It sits above the extender: it reuses the extender's agents, the plan
cache and kso's cache and rules; nothing below imports it."""
