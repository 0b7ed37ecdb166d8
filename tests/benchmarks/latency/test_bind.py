"""benchmarks.latency.bind: /bind posted for pending pods from keep-alive clients in parallel, against kso on the
real control plane; bind_round raises unless every reply is 200 with no error (kso posted each Binding)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from benchmarks.e2e import create_nodes, delete_nodes, kso_process, node_manifest
from benchmarks.latency.bind import bind_round


def test_a_round_binds_every_pod_and_measures_it(control_plane: Any, tmp_path: Path) -> None:
    api = control_plane.api_client()
    tag = os.urandom(3).hex()
    nodes = [f"bind-{tag}-{i}" for i in range(2)]
    create_nodes(api, [node_manifest(n, "8", "32Gi") for n in nodes])
    try:
        with kso_process(control_plane.kubeconfig, tmp_path / "kso.log") as ext:
            cpu_ms, rate, p50, p99 = bind_round(ext, api, f"bind-{tag}", nodes, binds=6, in_flight=3)
        # The process's CPU time comes in clock ticks (10 ms), so six binds may read as none: measured means a
        # finite, non-negative number, not a positive one.
        assert math.isfinite(cpu_ms) and cpu_ms >= 0
        assert rate > 0 and 0 < p50 <= p99 and math.isfinite(p99)
    finally:
        delete_nodes(api, nodes)
