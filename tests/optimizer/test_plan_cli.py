"""``kso plan`` (optimizer.plan.cli) end to end on the embedded demo cluster and on the real API server, and what
it prints when its protected solve's child dies (for real: the ``abort_attempts`` test parameter makes the first N
children call os.abort(), as google/or-tools#5288 does): a retry with another seed, and when no attempt returns,
first-fit-decreasing's plan held to the exact bound."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from kso.cli import main
from kso.core.net import free_port
from optimizer.plan.cli import cmd_plan, parse_plan_args
from optimizer.plan.placement_plan import PlacementPlan, load_plan
from optimizer.plan.protected_solver import FFD_STATUS, ORTOOLS_ABORT

ROOT = Path(__file__).resolve().parents[2]  # the checkout under test, also for a child in another folder
ARGS = ["--demo", "--time-limit", "5", "--workers", "1"]


def assert_within_safe_bounds(plan: PlacementPlan) -> None:
    """Every node the plan puts pods on stays within its safe bound (nodes over it already get none)."""
    targets = {node for c in plan.classes.values() for node, k in c.slots.items() if k > 0}
    assert targets
    assert all(risk <= plan.eps + 1e-9 for node in targets for risk in plan.nodes[node].risk.values())


def test_plan_demo_writes_a_valid_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", *ARGS, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    plan = load_plan(out)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert plan.policy == "binpack"
    assert sum(c.count for c in plan.classes.values()) == 36  # the demo's pending pods
    assert sum(sum(c.slots.values()) for c in plan.classes.values()) > 0
    assert_within_safe_bounds(plan)
    assert "kso plan: binpack, 16 nodes" in printed.out
    assert f"plan {plan.plan_id} written to {out}" in printed.out
    assert "died" not in printed.err and ORTOOLS_ABORT not in printed.err


def test_a_dead_solver_process_is_retried_with_another_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    # the first child aborts, the retry solves
    assert cmd_plan(parse_plan_args([*ARGS, "--out", str(out)]), abort_attempts=1) == 0
    printed = capsys.readouterr()
    crash = ("kso plan: attempt 1 (seed 0): the solver process died (killed by SIGABRT); an OR-Tools abort, "
             f"see {ORTOOLS_ABORT}; retrying with seed 1")
    assert crash in printed.err.splitlines()
    assert "attempt 2" not in printed.err and "first-fit-decreasing" not in printed.err
    assert "Traceback" not in printed.err
    plan = load_plan(out)
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert any(n.startswith("attempt 1 (seed 0): the solver process died") for n in plan.notes)
    assert f"plan {plan.plan_id} written to {out}" in printed.out


def test_every_attempt_dead_falls_back_to_ffd(tmp_path: Path) -> None:
    # A separate process, so that the terminal's stderr (fd 2, the children's included) is what is checked.
    out = tmp_path / "plan.json"
    script = ("import sys; from optimizer.plan.cli import cmd_plan, parse_plan_args; "
              "sys.exit(cmd_plan(parse_plan_args(sys.argv[1:]), abort_attempts=2))")
    proc = subprocess.run([sys.executable, "-c", script, *ARGS, "--out", str(out), "--json"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert err == [
        f"kso plan: attempt 1 (seed 0): the solver process died (killed by SIGABRT); an OR-Tools abort, see {ORTOOLS_ABORT}; "
        "retrying with seed 1",
        f"kso plan: attempt 2 (seed 1): the solver process died (killed by SIGABRT); an OR-Tools abort, see {ORTOOLS_ABORT}; "
        "given up",
        "kso plan: no solver process returned a plan; the plan is first-fit-decreasing's (no CP-SAT)",
    ]
    summary = orjson.loads(proc.stdout)
    assert summary["status"] == FFD_STATUS
    assert summary["nodes_over_safe_bound"] == 0
    plan = load_plan(out)
    assert plan.status == FFD_STATUS
    assert err[-1].removeprefix("kso plan: ") in plan.notes
    assert math.isfinite(plan.bound) and math.isfinite(plan.gap)  # the LP bound of a plan CP-SAT did not bound
    assert sum(sum(c.slots.values()) for c in plan.classes.values()) > 0
    assert_within_safe_bounds(plan)
    assert not list(tmp_path.glob("core*"))


def test_kso_plan_reads_the_real_api_server(control_plane: Any, kube_namespace: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """kso plan's cluster comes from kso.core.cluster_source.load_cluster (one raw list): a pending pod of our
    namespace is planned onto one of our nodes."""
    from kubernetes import client

    from benchmarks.e2e import create_nodes, delete_nodes, node_manifest

    api = control_plane.api_client()
    names = [f"inputs-{kube_namespace[-6:]}-{i}" for i in range(2)]
    create_nodes(api, [node_manifest(n, "4", "16Gi", labels={"kso-test/group": kube_namespace}) for n in names])
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": kube_namespace},
           "spec": {"nodeSelector": {"kso-test/group": kube_namespace}, "containers": [container]}}
    client.CoreV1Api(api).create_namespaced_pod(kube_namespace, pod)
    out = tmp_path / "plan.json"
    try:
        assert main(["plan", "--kubeconfig", str(control_plane.kubeconfig), "--time-limit", "5",
                         "--out", str(out), "--json"]) == 0
    finally:
        delete_nodes(api, names)
    capsys.readouterr()
    ours = [c for c in load_plan(str(out)).classes.values() if any(kube_namespace in p for p in c.detail.get("pods", []))]
    assert len(ours) == 1 and sum(ours[0].slots.values()) == 1 and set(ours[0].slots) <= set(names), ours


def kso(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m kso.cli ARGV`` of this checkout in its own process: what a terminal or a CronJob sees."""
    return subprocess.run([sys.executable, "-m", "kso.cli", *argv], cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)


def test_a_prometheus_that_fails_is_an_error_in_one_line_not_a_fall_back(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # a real closed port: nothing listens there
    out = tmp_path / "plan.json"
    proc = kso("plan", *ARGS, "--prometheus", url, "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("kso plan: ") and f"Prometheus {url}: cannot connect (Connection refused)" in proc.stderr
    assert not out.exists()


def test_a_url_without_its_scheme_gets_a_hint(tmp_path: Path) -> None:
    proc = kso("plan", *ARGS, "--prometheus", "localhost:9090", "--out", str(tmp_path / "plan.json"), cwd=tmp_path)
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "did you mean http://localhost:9090?" in proc.stderr


def test_plan_with_the_real_prometheus(prom: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same flag with a Prometheus that answers plans (the demo's nodes have no series there: their annotations
    count, as for any node without a fresh forecast)."""
    out = tmp_path / "plan.json"
    assert main(["plan", *ARGS, "--prometheus", prom.url, "--out", str(out)]) == 0
    printed = capsys.readouterr()
    load_from = next(line for line in printed.out.splitlines() if line.startswith("load from: "))
    assert load_from.startswith(f"load from: prometheus {prom.url} ("), load_from
    assert "classes at their pods' measured usage" in load_from, load_from  # the pods' series were read too
    assert load_plan(out).status in ("OPTIMAL", "FEASIBLE")


def test_a_live_cluster_is_planned_on_the_settings_prometheus_and_its_failure_is_an_error(
        control_plane: Any, prom: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --prometheus / --trace, kso plan reads a live cluster's load as kso extender does: from
    KSO_PROMETHEUS_URL where set (a Prometheus that does not answer is an error, one line: KSO_FORECAST_SOURCE=NONE
    plans on the annotations); a snapshot or the demo, which no Prometheus watches, stays on its annotations."""
    monkeypatch.delenv("KSO_FORECAST_SOURCE", raising=False)
    monkeypatch.setenv("KSO_PROMETHEUS_RETRIES", "0")
    live = ["plan", "--kubeconfig", str(control_plane.kubeconfig), "--time-limit", "5", "--workers", "1"]

    def load_from(argv: list[str]) -> tuple[str, str]:
        assert main([*argv, "--out", str(tmp_path / "plan.json")]) == 0
        printed = capsys.readouterr()
        return next(line for line in printed.out.splitlines() if line.startswith("load from: ")), printed.err

    monkeypatch.setenv("KSO_PROMETHEUS_URL", prom.url)
    line, _ = load_from(live)
    assert line.startswith(f"load from: prometheus {prom.url} ("), line
    line, _ = load_from(["plan", *ARGS])
    assert line.startswith("load from: node annotations"), line
    # KSO_PROMETHEUS_URL naming a Prometheus that does not answer is an error, one line, not a plan on the annotations
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("KSO_PROMETHEUS_URL", closed)
    assert main([*live, "--out", str(tmp_path / "plan.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kso plan: forecasts failed") and closed in err and "KSO_PROMETHEUS_URL" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    monkeypatch.setenv("KSO_FORECAST_SOURCE", "NONE")  # how to plan without it
    line, _ = load_from(live)
    assert line.startswith("load from: node annotations"), line
