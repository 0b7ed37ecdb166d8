"""Test 4: ``kso reoptimize --execute`` on the real API server with kube-controller-manager running.

A ReplicaSet's pods sit on one node annotated too hot (the test binds them there and patches their status
Running/Ready, as a kubelet would: there is none); a real PodDisruptionBudget allows 2 disruptions, which
the real disruption controller computes. The dry run proposes moves; ``--execute`` evicts through the
Eviction API within the budget (the plan asks no more than it allows), the ReplicaSet controller re-creates the evicted pods, and
the real kube-scheduler with kso (which reads the ``kso-plan`` ConfigMap the execution published) places
the replacements on the nodes the plan named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from typing import Any

from kubernetes import client

from benchmarks.e2e import BindWatch, create_nodes, delete_nodes, kso_process, node_manifest, scheduler_config
from tests.e2e.test_kube_scheduler_extender import HOT, kso_metrics, metric_sum, wait_kso_sees
from tests.support.fixtures import make_running, until

REPLICAS, MIN_AVAILABLE = 6, 5


def reoptimize(cp: Any, ns: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    run = subprocess.run([sys.executable, "-m", "kso.cli", "reoptimize", "--kubeconfig", str(cp.kubeconfig), "--json",
                          "--policy", "none", "--workers", "1", "--max-moves", "6", "--plan-namespace", ns, *extra],
                         capture_output=True, text=True, timeout=180, env=cp.env())
    try:
        doc = json.loads(run.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"reoptimize printed no JSON (rc {run.returncode}): {run.stdout[-2000:]} "
                             f"{run.stderr[-2000:]}") from None
    return run.returncode, doc, run.stderr


def test_reoptimize_execute_evicts_within_the_pdb_and_kso_places_replacements(control_plane: Any, kube_namespace: str,
                                                                              tmp_path: Any) -> None:
    control_plane.start_controller_manager()
    api = control_plane.api_client()
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    ns = kube_namespace
    hot = "t4-hot"
    nodes = [node_manifest(hot, "4", "16Gi", labels={"kso-test/group": "t4"}, annotations=HOT)]
    nodes += [node_manifest(f"t4-cool-{i}", "8", "32Gi", labels={"kso-test/group": "t4"}) for i in range(3)]
    create_nodes(api, nodes)
    try:
        labels = {"app": "web"}
        apps.create_namespaced_replica_set(ns, {"metadata": {"name": "web"}, "spec": {
            "replicas": REPLICAS, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                "schedulerName": "kso-scheduler", "nodeSelector": {"kso-test/group": "t4"},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "300m", "memory": "256Mi"}}}]}}}})
        policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": "web"}, "spec": {
            "minAvailable": MIN_AVAILABLE, "selector": {"matchLabels": labels}}})
        pods = until(lambda: (lambda p: p if len(p) == REPLICAS else None)(core.list_namespaced_pod(ns).items), 60,
                     "the ReplicaSet's pods")
        for p in pods:
            make_running(core, ns, p.metadata.name, hot)
        until(lambda: (policy.read_namespaced_pod_disruption_budget("web", ns).status.disruptions_allowed or 0)
              == REPLICAS - MIN_AVAILABLE, 60, "PDB status from the disruption controller")

        rc, dry, err = reoptimize(control_plane, ns)
        assert rc == 0 and dry["dryRun"], err
        assert 1 <= len(dry["moves"]) <= REPLICAS - MIN_AVAILABLE, dry  # planned within the budget
        assert all(m["from"] == hot and m["to"] != hot for m in dry["moves"]), dry["moves"]

        rc, done, err = reoptimize(control_plane, ns, "--execute")
        assert rc == 0, err  # every eviction accepted: the plan stayed within the budget
        assert [(m["pod"], m["to"]) for m in done["moves"]] == [(m["pod"], m["to"]) for m in dry["moves"]]
        evicted = [e for e in done["evictions"] if e["evicted"]]
        refused = [e for e in done["evictions"] if not e["evicted"]]
        assert len(evicted) == len(dry["moves"]) and not refused, done["evictions"]
        targets = Counter(m["to"] for m in done["moves"] if m["pod"] in {e["pod"] for e in evicted})
        cm = core.read_namespaced_config_map("kso-plan", ns)
        assert "plan.json" in cm.data

        # The ReplicaSet replaces the evicted pods; kso (reading kso-plan) and kube-scheduler place them.
        replacements = until(lambda: (lambda p: p if len(p) == len(evicted) else None)(
            [p for p in core.list_namespaced_pod(ns).items if not p.spec.node_name]), 60, "replacement pods")
        watch = BindWatch(api, ns)
        with kso_process(control_plane.kubeconfig, tmp_path / "kso.log", KSO_PLAN_CONFIGMAP=f"{ns}/kso-plan") as kso:
            wait_kso_sees(kso, core)
            until(lambda: metric_sum(kso_metrics(kso), "kso_plan_events_total", event="installed")
                  or metric_sum(kso_metrics(kso), "kso_plan_events_total"), 30, "kso installed the published plan")
            with control_plane.start_scheduler(scheduler_config(kso.url, bind=True)):
                names = {p.metadata.name for p in replacements}
                until(lambda: names <= set(watch.bound), 60, "replacements bound")
            hits = metric_sum(kso_metrics(kso), "kso_plan_decisions_total", result="hit")
        watch.stop()
        landed = Counter(watch.bound[n][0] for n in names)
        assert landed == targets, (landed, targets)
        assert hits >= len(names)
    finally:
        delete_nodes(api, [n["metadata"]["name"] for n in nodes])
