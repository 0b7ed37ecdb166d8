"""benchmarks.e2e at scale: pods bound in advance (--bound-pods) on the real API server, each process's start-up,
RSS and peak read from /proc, and the whole benchmark on a small cluster with bound pods."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import create_bound_pods, delete_namespace_pods, main, process_memory, trivial_process
from benchmarks.e2e_summary import summary_row


def test_bound_pods_are_created_bound_round_robin_over_the_nodes(control_plane: Any) -> None:
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = f"bound-{os.urandom(3).hex()}"
    nodes = [f"{ns}-n{i}" for i in range(3)]  # no Node objects: nothing on the shared control plane schedules there
    try:
        took = create_bound_pods(api, nodes, 31, ns, threads=4)
        pods = core.list_namespaced_pod(ns).items
        assert took > 0 and len(pods) == 31
        assert Counter(p.spec.node_name for p in pods) == {nodes[0]: 11, nodes[1]: 10, nodes[2]: 10}
        assert all(p.spec.node_name == nodes[int(p.metadata.name.split("-")[1]) % 3] for p in pods)
        with pytest.raises(client.ApiException) as exc:  # into the namespace that exists: the pods' names clash
            create_bound_pods(api, nodes, 2, ns, threads=2)
        assert exc.value.status == 409 and "p-00000" in str(exc.value.body) and len(core.list_namespaced_pod(ns).items) == 31
    finally:
        delete_namespace_pods(api, ns)
        core.delete_namespace(ns)


def test_an_extender_process_reports_its_start_up_and_memory(tmp_path: Path) -> None:
    with trivial_process(tmp_path / "trivial.log") as ext:
        mem = process_memory(ext)
        assert 0 < ext.ready_s < 240 and ext.ready_cpu_s > 0
        assert 5 < mem.rss_mib <= mem.hwm_mib < 1000 and mem.children_rss_mib == 0
    gone = process_memory(ext)
    assert gone.rss_mib != gone.rss_mib  # NaN once the process has ended


def test_e2e_with_bound_pods_schedules_beside_them_and_reports_memory_and_start_up(
        tmp_path: Path, capsys: Any) -> None:
    # kube-scheduler alone: an extender's start-up and memory are the test above's (one scheduler start, not two)
    out = tmp_path / "e2e.json"
    assert main(["--nodes", "3", "--pods", "6", "--bound-pods", "30", "--rounds", "1", "--configs", "alone",
                 "--timeout", "60", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    text = capsys.readouterr().out
    assert data["setup"]["bound_pods"] == 30 and data["setup"]["bound_pods_s"] > 0 and data["setup"]["startups"] == []
    assert data["setup"]["nodes"] == 3 and data["setup"]["pods"] == 6
    [run] = data["runs"]
    assert run["config"] == "alone" and run["nodes_used"] >= 1 and run["pods_per_s"] > 0
    assert 0 < run["scheduler_first_bind_s"] < 60 and run["scheduler_first_bind_cpu_s"] > 0
    assert 10 < run["scheduler_memory"]["rss_mib"] <= run["scheduler_memory"]["hwm_mib"]
    assert math.isnan(run["extender_memory"]["rss_mib"])
    assert "kube-scheduler's start to its first bind (median, alone)" in text


def _run(config: str, cpu: float, rss: float, **extra: Any) -> dict[str, Any]:
    return {"config": config, "extender_cpu_ms": cpu, "scheduler_cpu_ms": 2.0, "ratio": extra.get("ratio", 1.0),
            "load1": 5.0, "scheduler_first_bind_s": 4.0, "verbs": extra.get("verbs", {}),
            "extender_memory": {"rss_mib": rss, "hwm_mib": rss + 10, "children_rss_mib": 0.0},
            "scheduler_memory": {"rss_mib": 300.0, "hwm_mib": 320.0, "children_rss_mib": 0.0}}


def test_the_summary_row_puts_before_and_after_side_by_side() -> None:
    before = "kso[KSO_BENCH_TREE=/b;KSO_BENCH_CONFIGS=kso,kso-bind]"
    data = {"setup": {"nodes": 5000, "bound_pods": 50000, "pods": 1000, "startups": [
                {"label": "kso", "ready_s": 6.0}, {"label": before, "ready_s": 12.0}, {"label": "trivial", "ready_s": 0.2}]},
            "runs": [_run("alone", math.nan, math.nan), _run("trivial", 0.5, 20, ratio=0.9),
                     _run("kso", 1.5, 400, verbs={"filter": {"calls": 9, "p50_ms": 0.8, "p99_ms": 9.0}}),
                     _run(before, 3.0, 900, verbs={"filter": {"calls": 9, "p50_ms": 2.0, "p99_ms": 40.0}}),
                     _run("kso-bind" + before[3:], 4.0, 950)]}
    row = summary_row(data)
    assert row.startswith("| 5,000 (50,000) | 1,000 | 0.50 / 3.00 / 1.50 | 4.00 / - | 2.00 / 40.0 -> 0.80 / 9.0 |")
    assert "| 925 (960) / 400 (410) / 300 (320) |" in row and "| 12.0 (3.0x) / 6.0 (1.5x) vs 4.0 |" in row


def test_the_summary_names_a_file_that_is_not_an_e2e_run(tmp_path: Path, capsys: Any) -> None:
    from benchmarks.e2e_summary import main as summary_main

    bad = tmp_path / "notes.json"
    bad.write_text('{"runs": "not a list"}')
    with pytest.raises(SystemExit) as exit_info:
        summary_main([str(bad)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "is not a benchmarks.e2e --json file" in err and "Traceback" not in err
