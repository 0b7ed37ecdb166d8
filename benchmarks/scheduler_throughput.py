"""Throughput of ``kso scheduler`` against the real default kube-scheduler, on the same real control plane,
nodes and pods (benchmarks.controlplane: etcd + kube-apiserver on loopback, no kubelet).

    python -m benchmarks.scheduler_throughput                       # 100 nodes x 1,000 pods, 2 rounds each
    python -m benchmarks.scheduler_throughput --nodes 100 --pods 1000 --rounds 3 --kso-args=--seed-compatible

Each round creates the pods first (pending, ``spec.schedulerName`` naming the scheduler under test), then
starts that scheduler in its own process and watches the pods: pods/s = (pods - 1) / (last bind - first bind),
so process start and cache sync are left out. Rounds alternate kube-scheduler and kso (the machine's load
drifts; compare the two only side by side). Per-cycle latency is each scheduler's own histogram of one
scheduling cycle (decide: filters and scores, without the bind): kube-scheduler's
scheduler_scheduling_algorithm_duration_seconds, kso's kso_scheduler_scheduling_cycle_seconds; beside it
kube-scheduler's whole attempt (scheduler_scheduling_attempt_duration_seconds) and kso's decision-to-bound
time (kso_scheduler_binding_seconds, waiting for a bind worker included). p50/p99 are interpolated inside the buckets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from benchmarks.controlplane import ControlPlane, insecure_tls_context
from benchmarks.machine import machine_facts, machine_line
from benchmarks.prometheus_text import histogram, parse_metrics
from kso.core.net import free_port
from kso.core.watcher import RawWatch  # events as parsed JSON: a model per event would make the watch lag

KUBE_SCHEDULER_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
    # The launcher's README: the default client rate limit (qps 50) would measure the limiter, not the scheduler.
    "clientConnection": {"qps": 5000, "burst": 5000},
    "profiles": [{"schedulerName": "bench-default"}],
}


def _nodes(core: client.CoreV1Api, n: int) -> list[str]:
    names = [f"bench-{i:04d}" for i in range(n)]
    alloc = {"cpu": "32", "memory": "128Gi", "pods": "110"}

    def make(name: str) -> None:
        core.create_node({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                                       "annotations": {"hightower.com/cost": str(1 + hash(name) % 7)}},
                          "status": {"capacity": alloc, "allocatable": alloc,
                                     "conditions": [{"type": "Ready", "status": "True"}]}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, names))
    return names


def _create_pods(core: client.CoreV1Api, namespace: str, scheduler: str, n: int) -> None:
    def make(i: int) -> None:
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": f"p-{i:05d}", "annotations": {"controller": f"ctl-{i % 3}", "slo": "0.8"}},
            "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                                 "resources": {"requests": {"cpu": "100m",
                                                                                            "memory": "64Mi"}}}]}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(n)))


class BindTimes:
    """Watches a namespace and records when each pod was first seen bound (the watch's arrival time)."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.times: dict[str, float] = {}
        self.error = ""
        self.done = threading.Event()
        self._w = RawWatch()
        rv = core.list_namespaced_pod(namespace, limit=1).metadata.resource_version
        threading.Thread(target=self._run, args=(core, namespace, rv), daemon=True).start()

    def _run(self, core: client.CoreV1Api, namespace: str, rv: str) -> None:
        try:
            # No timeout_seconds: the client then resumes from the last resourceVersion when the server closes
            # the stream (it does so to a watcher that falls behind a burst of bindings).
            for ev in self._w.stream(core.list_namespaced_pod, namespace, resource_version=rv):
                obj = ev.get("raw_object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if (obj.get("spec") or {}).get("nodeName") and name not in self.times:
                    self.times[name] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - stop() closes the stream under it
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def stop(self) -> None:
        self._w.stop()


def latency_summary(text: str, name: str) -> dict[str, float]:
    """count, mean_ms, p50_ms and p99_ms of histogram ``name`` (seconds; every label set summed) in one scrape's
    text (benchmarks.prometheus_text's quantile rule); {"count": 0} when it recorded nothing."""
    got = histogram(parse_metrics(text), name)
    if not got.count:
        return {"count": 0}
    summary = got.summary_ms()
    return {"count": got.count, "mean_ms": summary["mean_ms"], "p50_ms": summary["p50_ms"], "p99_ms": summary["p99_ms"]}


def _round(cp: ControlPlane, core: client.CoreV1Api, which: str, pods: int, index: int, kso_args: list[str],
           timeout: float) -> dict[str, Any]:
    ns = f"bench-{which}-{index}"
    core.create_namespace({"metadata": {"name": ns}})
    scheduler = "bench-default" if which == "kube-scheduler" else f"bench-kso-{index}"
    _create_pods(core, ns, scheduler, pods)
    times = BindTimes(core, ns)
    proc: Any = None
    metrics_url, ctx = "", None
    if which == "kube-scheduler":
        comp = cp.start_scheduler(KUBE_SCHEDULER_CONFIG, name=f"kube-scheduler-{index}",
                                  extra_args=("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",))
        metrics_url, ctx = f"https://127.0.0.1:{comp.port}/metrics", insecure_tls_context()
        stop = lambda: cp.stop_component(comp)  # noqa: E731
    else:
        port = free_port()
        env = {**cp.env(), "KSO_PLAN_POLICY": "NONE", "KSO_FORECAST_SOURCE": "NONE", "LOG_LEVEL": "WARNING",
               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        log = open(cp._dir / f"kso-scheduler-{index}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "kso.cli", "scheduler", "--name", scheduler, "--no-leader-elect",
                                 "--debug-address", f"127.0.0.1:{port}", "--kubeconfig", str(cp.kubeconfig), *kso_args],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        metrics_url = f"http://127.0.0.1:{port}/metrics"

        def stop() -> None:
            proc.terminate()
            proc.wait(20)
            log.close()
    try:
        deadline = time.monotonic() + timeout
        while len(times.times) < pods and time.monotonic() < deadline and not times.done.is_set():
            time.sleep(0.1)
        if times.done.is_set() and len(times.times) < pods:
            raise RuntimeError(f"the watch of {ns} ended early ({times.error or 'server closed it'})")
        with urllib.request.urlopen(metrics_url, timeout=10, context=ctx) as resp:
            text = resp.read().decode()
    finally:
        stop()
        times.stop()
    bound = sorted(times.times.values())
    span = bound[-1] - bound[0] if len(bound) > 1 else float("nan")
    decide, attempt = (("scheduler_scheduling_algorithm_duration_seconds", "scheduler_scheduling_attempt_duration_seconds")
                       if which == "kube-scheduler" else
                       ("kso_scheduler_scheduling_cycle_seconds", "kso_scheduler_binding_seconds"))
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    return {"scheduler": which, "round": index, "bound": len(bound), "seconds": round(span, 3),
            "pods_per_s": round((len(bound) - 1) / span, 1) if len(bound) > 1 else 0.0, "cycle": latency_summary(text, decide),
            "attempt_or_bind": latency_summary(text, attempt)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scheduler_throughput", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2, help="rounds per scheduler, alternating")
    p.add_argument("--kso-args", default="", help="extra arguments for kso scheduler, e.g. --seed-compatible")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a round may take")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    results = []
    with ControlPlane() as cp:
        core = client.CoreV1Api(cp.api_client())
        _nodes(core, args.nodes)
        for i in range(args.rounds):
            for which in ("kube-scheduler", "kso"):
                r = _round(cp, core, which, args.pods, i, args.kso_args.split(), args.timeout)
                results.append(r)
                if not args.json:
                    c, a = r["cycle"], r["attempt_or_bind"]
                    nan = float("nan")
                    print(f"{which:15s} round {i}: {r['bound']}/{args.pods} bound in {r['seconds']:.2f} s = "
                          f"{r['pods_per_s']:7.1f} pods/s; cycle (decide) mean {c.get('mean_ms', nan):.2f} ms "
                          f"p50 {c.get('p50_ms', nan):.2f} p99 {c.get('p99_ms', nan):.2f}; "
                          f"{'attempt' if which == 'kube-scheduler' else 'bind'} p50 {a.get('p50_ms', nan):.1f} ms "
                          f"p99 {a.get('p99_ms', nan):.1f}", flush=True)
    med = {w: statistics.median(r["pods_per_s"] for r in results if r["scheduler"] == w) for w in ("kube-scheduler", "kso")}
    summary = {"nodes": args.nodes, "pods": args.pods, "rounds": results, "median_pods_per_s": med,
               "kso_over_kube": round(med["kso"] / med["kube-scheduler"], 3) if med["kube-scheduler"] else None,
               "machine": dataclasses.asdict(machine_facts())}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"median pods/s: kube-scheduler {med['kube-scheduler']:.1f}, kso {med['kso']:.1f} "
              f"(kso / kube-scheduler = {summary['kso_over_kube']}); machine: {machine_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
