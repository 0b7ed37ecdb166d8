"""Test 4: ``kso reoptimize --execute`` on the real API server with kube-controller-manager running.

A ReplicaSet's pods sit on one node annotated too hot (the test binds them there and patches their status
Running/Ready, as a kubelet would: there is none); a real PodDisruptionBudget allows 2 disruptions, which
the real disruption controller computes. The dry run proposes moves; ``--execute`` evicts through the
Eviction API within the budget (the plan asks no more than it allows), the ReplicaSet controller re-creates the evicted pods, and
the real kube-scheduler with kso (which reads the ``kso-plan`` ConfigMap the execution published) places
the replacements on the nodes the plan named.

Test 4b: the same with the node hot by kso's forecast only. A real Prometheus serves node-exporter history (a node
busy at 95 % for six hours, the others at 10 %); the node has no load annotations, so without ``--prometheus`` it
is judged on its pods' requests (45 %) and nothing moves, while with it the forecast puts it over its safe bound
(P(u > U*) > eps) and ``--execute`` evicts pods from it within the PodDisruptionBudget, although no pod is pending.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from benchmarks.e2e import BindWatch, create_nodes, delete_nodes, kso_process, node_manifest, scheduler_config
from kso.core.net import free_port
from tests.e2e.test_kube_scheduler_extender import HOT, kso_metrics, metric_sum, wait_kso_sees
from tests.support import prom_server
from tests.support.fixtures import make_running, until

REPLICAS, MIN_AVAILABLE = 6, 5


def reoptimize(cp: Any, ns: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    run = subprocess.run([sys.executable, "-m", "kso.cli", "reoptimize", "--kubeconfig", str(cp.kubeconfig), "--json",
                          "--policy", "none", "--workers", "1", "--max-moves", "6", "--plan-namespace", ns, *extra],
                         capture_output=True, text=True, timeout=180, env={**cp.env(), **(env or {})})
    try:
        doc = json.loads(run.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"reoptimize printed no JSON (rc {run.returncode}): {run.stdout[-2000:]} "
                             f"{run.stderr[-2000:]}") from None
    return run.returncode, doc, run.stderr


def replicas_on(api: Any, ns: str, name: str, node: str, group: str, replicas: int, min_available: int) -> None:
    """ReplicaSet ``name`` (``replicas`` pods of 300m / 256Mi, node selector kso-test/group=``group``) with every
    pod bound to ``node`` and Running and Ready (as a kubelet would report), and a PodDisruptionBudget of
    ``min_available`` whose status the real disruption controller has computed."""
    core, apps, policy = client.CoreV1Api(api), client.AppsV1Api(api), client.PolicyV1Api(api)
    labels = {"app": name}
    apps.create_namespaced_replica_set(ns, {"metadata": {"name": name}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {
            "schedulerName": "kso-scheduler", "nodeSelector": {"kso-test/group": group},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "300m", "memory": "256Mi"}}}]}}}})
    policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": name}, "spec": {
        "minAvailable": min_available, "selector": {"matchLabels": labels}}})
    pods = until(lambda: (lambda p: p if len(p) == replicas else None)(core.list_namespaced_pod(ns).items), 60,
                 "the ReplicaSet's pods")
    for p in pods:
        make_running(core, ns, p.metadata.name, node)
    until(lambda: (policy.read_namespaced_pod_disruption_budget(name, ns).status.disruptions_allowed or 0)
          == replicas - min_available, 60, "PDB status from the disruption controller")


def test_reoptimize_execute_evicts_within_the_pdb_and_kso_places_replacements(control_plane: Any, kube_namespace: str,
                                                                              tmp_path: Any) -> None:
    control_plane.start_controller_manager()
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = kube_namespace
    hot = "t4-hot"
    nodes = [node_manifest(hot, "4", "16Gi", labels={"kso-test/group": "t4"}, annotations=HOT)]
    # the cool nodes measured at 10% (kso's plans pull only onto nodes whose load it sees: decisions/sight.py)
    cool = {"mean-free-cpu": "7200", "std-free-cpu": "100", "mean-free-memory": "29491", "std-free-memory": "100"}
    nodes += [node_manifest(f"t4-cool-{i}", "8", "32Gi", labels={"kso-test/group": "t4"}, annotations=cool)
              for i in range(3)]
    create_nodes(api, nodes)
    try:
        replicas_on(api, ns, "web", hot, "t4", REPLICAS, MIN_AVAILABLE)

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


# ---- 4b: hot by forecast -------------------------------------------------------------------------------
FORECAST_NODES = {"t4f-hot": 0.95, "t4f-cool-0": 0.10, "t4f-cool-1": 0.10}  # node -> cpu busy, all history long
CPUS, MEM_TOTAL, MEM_USED = 4, 16 * 2**30, 0.30


def write_node_exporter_history(path: Path, end: float, hours: float = 6.0, step: int = 60) -> None:
    """node-exporter series of FORECAST_NODES (constant utilisation), one scrape a ``step`` up to ``end``, in
    OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``: the cpu counters of each core (idle, user),
    memory available and total, and node_uname_info naming the node (kso's default UNAME mapping)."""
    scrapes = [end - step * k for k in range(int(hours * 3600 // step), -1, -1)]
    families: dict[str, list[str]] = {"node_cpu_seconds": [], "node_memory_MemAvailable_bytes": [],
                                      "node_memory_MemTotal_bytes": [], "node_uname_info": []}
    for i, (node, busy) in enumerate(FORECAST_NODES.items()):
        instance = f"10.2.0.{i + 1}:9100"
        for k, ts in enumerate(scrapes):
            for cpu in range(CPUS):
                for mode, share in (("idle", 1 - busy), ("user", busy)):
                    value = 100_000.0 + share * step * k
                    families["node_cpu_seconds"].append(
                        f'node_cpu_seconds_total{{cpu="{cpu}",instance="{instance}",mode="{mode}"}} {value} {ts:.0f}')
            families["node_memory_MemAvailable_bytes"].append(
                f'node_memory_MemAvailable_bytes{{instance="{instance}"}} {MEM_TOTAL * (1 - MEM_USED):.0f} {ts:.0f}')
            families["node_memory_MemTotal_bytes"].append(
                f'node_memory_MemTotal_bytes{{instance="{instance}"}} {MEM_TOTAL} {ts:.0f}')
            families["node_uname_info"].append(
                f'node_uname_info{{instance="{instance}",nodename="{node}",sysname="Linux"}} 1 {ts:.0f}')
    with path.open("w") as f:
        for fam, lines in families.items():
            f.write(f"# TYPE {fam} {'counter' if fam == 'node_cpu_seconds' else 'gauge'}\n")
            f.write("\n".join(lines) + "\n")
        f.write("# EOF\n")


@pytest.fixture
def forecast_prometheus(tmp_path: Path) -> Iterator[str]:
    """A real Prometheus over the history of write_node_exporter_history, ending a minute ago; its URL."""
    bins = prom_server.prometheus_binaries()
    if bins is None:
        pytest.skip("prometheus/promtool not installed (apt-get install -y prometheus)")
    prometheus, promtool = bins
    om = tmp_path / "nodes.om"
    write_node_exporter_history(om, (math.floor(time.time() / 60) - 1) * 60)
    backfill = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om),
                               str(tmp_path / "tsdb")], capture_output=True, text=True, timeout=120)
    assert backfill.returncode == 0, backfill.stderr[-2000:]
    port = free_port()
    proc = prom_server.launch(prometheus, tmp_path, port, "global:\n  scrape_interval: 1h\nscrape_configs: []\n",
                              "--storage.tsdb.retention.time=3650d", "--query.lookback-delta=5m")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_reoptimize_moves_pods_off_a_node_hot_by_forecast_within_the_pdb(control_plane: Any, kube_namespace: str,
                                                                         forecast_prometheus: str) -> None:
    control_plane.start_controller_manager()
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    ns = kube_namespace
    hot = "t4f-hot"
    create_nodes(api, [node_manifest(n, str(CPUS), "16Gi", labels={"kso-test/group": "t4f"}) for n in FORECAST_NODES])
    replicas, min_available = 6, 4
    allowed = replicas - min_available
    try:
        replicas_on(api, ns, "api", hot, "t4f", replicas, min_available)
        assert not [p for p in core.list_namespaced_pod(ns).items if not p.spec.node_name], "nothing is pending"

        def ours(doc: dict[str, Any]) -> list[dict[str, Any]]:
            return [m for m in doc["moves"] if m["namespace"] == ns]

        rc, by_requests, err = reoptimize(control_plane, ns, env={"KSO_FORECAST_SOURCE": "NONE"})
        assert rc == 0, err
        assert not ours(by_requests), "without the forecast the node is judged on its requests (45 %): not hot"

        rc, dry, err = reoptimize(control_plane, ns, "--prometheus", forecast_prometheus)
        assert rc == 0 and dry["dryRun"], err
        assert forecast_prometheus in dry["loadFrom"]
        [row] = [n for n in dry["nodes"] if n["name"] == hot]
        assert row["meanBefore"]["cpu"] > 0.9, row  # the forecast's, not the requests' 45 %
        assert 1 <= len(ours(dry)) <= allowed, dry["moves"]
        assert all(m["from"] == hot and m["to"] != hot for m in ours(dry)), dry["moves"]
        # KSO_PROMETHEUS_URL (what the CronJob reads from kso-settings) is the same source without the flag
        rc, by_settings, err = reoptimize(control_plane, ns, env={"KSO_PROMETHEUS_URL": forecast_prometheus})
        assert rc == 0 and forecast_prometheus in by_settings["loadFrom"], err
        assert [(m["pod"], m["to"]) for m in ours(by_settings)] == [(m["pod"], m["to"]) for m in ours(dry)]

        rc, done, err = reoptimize(control_plane, ns, "--prometheus", forecast_prometheus, "--execute")
        assert rc == 0, err  # every eviction accepted: the plan stayed within the budget
        evicted = [e for e in done["evictions"] if e["evicted"] and e["namespace"] == ns]
        assert 1 <= len(evicted) <= allowed and not [e for e in done["evictions"] if not e["evicted"]], done["evictions"]
        on_hot = until(lambda: (lambda n: n if n == replicas - len(evicted) else None)(
            sum(p.spec.node_name == hot for p in core.list_namespaced_pod(ns).items)), 30, "the evicted pods gone")
        print(f"\nhot by forecast: {len(evicted)} of {replicas} pods evicted from {hot} (PDB allows {allowed}), "
              f"{on_hot} left there")
    finally:
        delete_nodes(api, list(FORECAST_NODES))
