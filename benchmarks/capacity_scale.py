"""The capacity signal at scale on the real control plane: how long a placeholder outlives its pod's bind.

    python3 -m benchmarks.capacity_scale [--pods 1000] [--nodes 20] [--kso-tree DIR]

The aim: every placeholder gone within 15 s of its pod's bind at 1,000 refused pods. The run: etcd, kube-
apiserver, kube-controller-manager (garbage collector, quota), deploy/'s namespace, capacity and RBAC objects; ``kso
extender`` as deploy/ runs it (its ServiceAccount's token, the product's capacity settings), kube-scheduler with
deploy/'s configuration calling it, and a default-scheduler (the cluster's own, which must never bind a
placeholder); with ``--kso-tree``, that checkout's deploy/. Every node is hot by its annotations, so kso refuses
every pod and holds placeholders for the oldest ``KSO_CAPACITY_MAX_PLACEHOLDERS`` (200); then the nodes cool, every
pod binds, and each placeholder must go.

Measured per pod that had a placeholder alive at its bind (or made after it): the time from its bind to the
deletion of its last placeholder, both as this process's watches receive the events (one API server, one client:
the two events' delivery delays are alike); plus kso's CPU (the whole process, and the capacity rounds' own thread
CPU where kso reports it: kso_capacity_cpu_seconds_total). ``--kso-tree DIR`` runs the kso of another checkout
(e.g. ``git archive`` of the commit before a change) for a before/after in the same run style.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.e2e import (
    BindWatch,
    ExtenderProcess,
    apiserver_metrics,
    create_nodes,
    create_pods,
    node_manifest,
    pod_manifest,
    process_cpu_s,
    scheduler_config,
    tree_env,
    verb_latency,
)
from benchmarks.e2e_cluster import PodWatch
from benchmarks.machine import machine_line
from benchmarks.prometheus_text import metric_sum, parse_metrics

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DEPLOY_FILES = ("namespace.yaml", "capacity.yaml", "scheduler-rbac.yaml", "extender-rbac.yaml")
CAPACITY_NS = "kso-capacity"
PLACEHOLDERS = "app.kubernetes.io/managed-by=kso,app.kubernetes.io/component=capacity-placeholder"
PLACEHOLDER_FOR = "kso.io/placeholder-for"
# Node statistics (annotations kso reads): cpu ~97% used against U* 90% (hot), then ~2.5% (cool).
HOT = {"mean-free-cpu": "100", "std-free-cpu": "50", "forcasted-free-cpu": "100",
       "mean-free-memory": "12000", "std-free-memory": "100", "forcasted-free-memory": "12000"}
COOL = {**HOT, "mean-free-cpu": "3900", "forcasted-free-cpu": "3900"}
DEFAULT_PROFILE = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                   "profiles": [{"schedulerName": "default-scheduler"}]}
AIM_S = 15.0


def apply_deploy(api: Any, files: tuple[str, ...] = DEPLOY_FILES, deploy: Path = DEPLOY) -> None:
    """Create the objects of ``files`` (paths under ``deploy``) for real on this control plane (one already there is
    kept)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(api)
    for name in files:
        for doc in yaml.safe_load_all((deploy / name).read_text()):
            if not doc:
                continue
            resource = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            try:
                resource.create(body=doc, namespace=doc["metadata"].get("namespace"))
            except ApiException as exc:
                if exc.status != 409:
                    raise


def service_account_kubeconfig(cp: Any, path: Path, account: tuple[str, str] = ("kso-system", "kso-scheduler")) -> Path:
    """A kubeconfig of ServiceAccount ``account`` (namespace, name) by TokenRequest: deploy/'s RBAC and nothing more."""
    from kubernetes import client

    core = client.CoreV1Api(cp.api_client())
    token = core.create_namespaced_service_account_token(
        account[1], account[0], {"spec": {"expirationSeconds": 7200}}).status.token
    ca = base64.b64encode(cp._certs.ca.read_bytes()).decode()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kso",
        "clusters": [{"name": "cp", "cluster": {"server": cp.url, "certificate-authority-data": ca}}],
        "users": [{"name": account[1], "user": {"token": token}}],
        "contexts": [{"name": "kso", "context": {"cluster": "cp", "user": account[1]}}]}))
    os.chmod(path, 0o600)
    return path


class PlaceholderLives(PodWatch):
    """Every placeholder's life as a watch of kso-capacity receives it: name -> [pod it stands for, first seen,
    deleted (or None)], and the placeholders ever seen bound to a node."""

    def __init__(self, api: Any) -> None:
        self.lives: dict[str, list[Any]] = {}
        self.bound: set[str] = set()
        self.lock = threading.Lock()
        super().__init__(api, CAPACITY_NS, label_selector=PLACEHOLDERS, timeout_seconds=600, name="placeholder-lives")

    def _event(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if event.get("type") == "ERROR" or not name:
            return
        with self.lock:
            life = self.lives.setdefault(name, [(meta.get("annotations") or {}).get(PLACEHOLDER_FOR, ""), now, None])
            if (obj.get("spec") or {}).get("nodeName"):
                self.bound.add(name)
            if (event.get("type") == "DELETED" or meta.get("deletionTimestamp")) and life[2] is None:
                life[2] = now

    def alive(self) -> int:
        with self.lock:
            return sum(1 for life in self.lives.values() if life[2] is None)

def outlived(lives: dict[str, list[Any]], bound: dict[str, float], namespace: str) -> dict[str, float]:
    """Per pod (name) that had a placeholder alive at its bind or made after it: seconds from its bind to the
    deletion of its last such placeholder (inf: still there)."""
    out: dict[str, float] = {}
    for key, _, deleted in lives.values():
        ns, _, pod = key.partition("/")
        if ns != namespace or pod not in bound:
            continue
        t_bind = bound[pod]
        end = float("inf") if deleted is None else deleted
        if end > t_bind:
            out[pod] = max(out.get(pod, 0.0), end - t_bind)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))] if ordered else float("nan")


def scrape(kso: ExtenderProcess) -> dict[str, float]:
    metrics = parse_metrics(kso.get("/metrics"))
    writes = {action: metric_sum(metrics, "kso_capacity_placeholder_writes_total", action=action)
              for action in ("created", "deleted", "released", "failed")}
    return writes | {name: metric_sum(metrics, name) for name in (
        "kso_capacity_refused_pods", "kso_capacity_placeholders", "kso_capacity_cpu_seconds_total",
        "kso_capacity_rounds_total", "kso_capacity_placeholders_bound_total")}


def wait_for(cond: Any, timeout: float, what: str, every: float = 0.5) -> float:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - t0


def run(pods: int, nodes: int, tree: Path, hold_s: float, workdir: Path, log: Path | None = None) -> int:
    from kubernetes import client

    from benchmarks.controlplane import CONTROLLERS, ControlPlane

    print(f"capacity at scale: {pods} refused pods on {nodes} hot nodes, kso from {tree}; {machine_line()}",
          flush=True)
    with ControlPlane() as cp:
        cp.start_controller_manager(f"{CONTROLLERS},resourcequota")
        api = cp.api_client()
        core = client.CoreV1Api(api)
        apply_deploy(api, deploy=tree / "deploy")  # the checkout's own deploy/, as its kso was shipped with
        kubeconfig = service_account_kubeconfig(cp, workdir / "kubeconfig")
        names = [f"cs-{i:03d}" for i in range(nodes)]
        create_nodes(api, [node_manifest(n, "4", "16Gi", annotations=HOT) for n in names])
        env = tree_env(tree, KUBECONFIG=str(kubeconfig), LOG_LEVEL="INFO", KSO_HOST="127.0.0.1",
                       KSO_CAPACITY_SIGNAL="true", KSO_SAFE_MAX_HOLD_S="inf", KSO_CAPACITY_IDENTITY="kso-scale")
        env.pop("KSO_CLUSTER_SOURCE", None)
        kso = ExtenderProcess([sys.executable, "-m", "kso.cli", "extender", "--port"], env, log or workdir / "kso.log",
                              cwd=tree).start()
        try:
            cp.start_scheduler(scheduler_config(kso.url, bind=True), name="kso-scheduler")
            cp.start_scheduler(DEFAULT_PROFILE, name="default-scheduler")
            ns = "scale"
            core.create_namespace({"metadata": {"name": ns}})
            lives = PlaceholderLives(api)
            binds = BindWatch(api, ns)
            t0 = time.monotonic()
            create_pods(api, ns, [pod_manifest(f"p{i:04d}", cpu="10m", memory="16Mi") for i in range(pods)])
            cap = min(pods, 200)
            refused_s = wait_for(lambda: scrape(kso)["kso_capacity_refused_pods"] >= pods, 900,
                                 "every pod refused", every=2)
            held_s = wait_for(lambda: lives.alive() >= cap, 900, f"{cap} placeholders", every=1)
            print(f"{pods} pods created; all refused by kso after {refused_s:.0f} s, {cap} placeholders held "
                  f"{held_s:.0f} s later ({time.monotonic() - t0:.0f} s in all); bound so far: {len(binds.bound)}",
                  flush=True)
            before, cpu0, w0 = scrape(kso), process_cpu_s(kso), time.monotonic()
            time.sleep(hold_s)
            after, cpu1, w1 = scrape(kso), process_cpu_s(kso), time.monotonic()
            rounds = after["kso_capacity_rounds_total"] - before["kso_capacity_rounds_total"]
            round_cpu = after["kso_capacity_cpu_seconds_total"] - before["kso_capacity_cpu_seconds_total"]
            print(f"holding {pods} refused pods, {lives.alive()} placeholders, {w1 - w0:.0f} s: kso process "
                  f"{100 * (cpu1 - cpu0) / (w1 - w0):.1f}% of a core (its filter answers to kube-scheduler's retries "
                  f"included); capacity rounds {rounds:.0f}, the signal's own threads "
                  f"{100 * round_cpu / (w1 - w0):.1f}% of a core ({1000 * round_cpu / max(rounds, 1):.0f} ms a round)"
                  f"; load {os.getloadavg()[0]:.1f}", flush=True)
            cpu2, w2, m2, api2 = process_cpu_s(kso), time.monotonic(), scrape(kso), apiserver_metrics(api)
            for name in names:
                core.patch_node(name, {"metadata": {"annotations": COOL}})
            all_bound_s = wait_for(lambda: len(binds.bound) >= pods, 900, "every pod bound", every=1)
            gone_s = wait_for(lambda: lives.alive() == 0, 900, "every placeholder deleted", every=0.5)
            cpu3, w3, m3, api3 = process_cpu_s(kso), time.monotonic(), scrape(kso), apiserver_metrics(api)
            bound = {pod: t for pod, (_, t) in binds.bound.items()}
            with lives.lock:
                lags = outlived(dict(lives.lives), bound, ns)
                made = len(lives.lives)
            values = sorted(lags.values())
            late = sum(1 for v in values if v > AIM_S)
            round_cpu = m3["kso_capacity_cpu_seconds_total"] - m2["kso_capacity_cpu_seconds_total"]
            print(f"nodes cooled: every pod bound in {all_bound_s:.0f} s, the last placeholder gone {gone_s:.0f} s "
                  f"after that; placeholders made in all {made}, ever bound to a node {len(lives.bound)}", flush=True)
            print(f"bind -> its placeholder deleted, {len(values)} pods with a placeholder at or after their bind: "
                  f"median {statistics.median(values):.1f} s, p99 {percentile(values, 0.99):.1f} s, max "
                  f"{values[-1]:.1f} s; over {AIM_S:g} s: {late}", flush=True)
            writes = ", ".join(f"{action} {m3[action] - m2[action]:.0f}" for action in ("created", "deleted",
                                                                                       "released", "failed"))
            print(f"while binding ({w3 - w2:.0f} s): kso process {100 * (cpu3 - cpu2) / (w3 - w2):.1f}% of a core, "
                  f"the capacity signal's threads {100 * round_cpu / (w3 - w2):.1f}% of a core; placeholders {writes}"
                  f" (released: deleted between rounds as kso's watch saw the pod bound); load "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            served = []
            for what, verb, labels in (("DELETE pods", "DELETE", {"resource": "pods", "subresource": ""}),
                                       ("POST pods", "POST", {"resource": "pods", "subresource": ""}),
                                       ("POST pods/binding", "POST", {"resource": "pods", "subresource": "binding"}),
                                       ("PATCH pods/status", "PATCH", {"resource": "pods", "subresource": "status"})):
                lat = verb_latency(api2, api3, verb, "apiserver_request_duration_seconds", **labels)
                served.append(f"{what} {lat['calls']:.0f} calls p50 {lat['p50_ms']:.0f} ms p99 {lat['p99_ms']:.0f} ms")
            print(f"the API server's own time while binding: {'; '.join(served)}", flush=True)
            waits = []
            for level in ("exempt", "workload-high", "workload-low", "global-default"):
                wait = verb_latency(api2, api3, "", "apiserver_flowcontrol_request_wait_duration_seconds",
                                    priority_level=level, execute="true")
                if wait["calls"]:
                    waits.append(f"{level} {wait['calls']:.0f} requests p50 {wait['p50_ms']:.0f} ms p99 "
                                 f"{wait['p99_ms']:.0f} ms")
            print(f"of which queued by API Priority and Fairness: {'; '.join(waits) or 'none'}", flush=True)
            lives.stop()
            binds.stop()
            return 0 if late == 0 and not lives.bound else 1
        finally:
            kso.stop()


def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--hold-s", type=float, default=60.0, help="seconds to measure kso's CPU while every pod waits")
    p.add_argument("--kso-tree", type=Path, default=REPO, help="the checkout whose kso runs (default: this one)")
    p.add_argument("--log", type=Path, help="keep kso's log (INFO) in this file")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kso-capacity-scale-") as tmp:
        return run(args.pods, args.nodes, args.kso_tree.resolve(), args.hold_s, Path(tmp), args.log)


if __name__ == "__main__":
    raise SystemExit(main())
