"""``kso shadow``: kso beside the cluster's own scheduler, off its path. For each pod any scheduler binds it records
what kso would have decided then, and, once the forecast horizon has passed, what Prometheus saw on both nodes."""
