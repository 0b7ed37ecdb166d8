"""Where the time goes between filter and Binding: the real kube-scheduler with kso binding (``kso-bind``, deploy/'s
bindVerb) against kso NodeNames (``kso``, kube-scheduler binds), on the real control plane, one or more kso trees.

    python -m benchmarks.bind_path [--nodes 100] [--pods 1000] [--rounds 2] [LABEL=TREE[:KEY=VALUE;...] ...]

benchmarks.e2e's cluster (fake Nodes, pending 100m/128Mi pods, a fresh namespace per run, kube-scheduler started
per run with deploy/'s configuration) with one ``kso extender`` process per TREE (default: this checkout, label
``kso``), each serving a ``kso`` and a ``kso-bind`` run per round; rounds alternate the order (ABBA). Per run:
pods/s (first to last bind seen by a watch), the CPU per pod of each process (kso, kube-scheduler, kube-apiserver,
etcd: user + system, all threads, from kube-scheduler's start), kube-scheduler's own figures from its /metrics
(mean scheduling attempt, mean Bind extension point, binding goroutines' peak is not exported: the mean of the
``binding`` goroutines sampled while it runs), kso's per-verb mean/p99 and its bind-queue refusals, and the TCP
connections kube-scheduler opened to kso (its extender transport keeps 2 idle connections per host, Go's
default: binds in flight beyond that open new connections that it closes again; counted as the sockets to kso's
port that kube-scheduler left in TIME_WAIT). The last lines give each tree's medians and kso-bind / kso ratios.
Numbers, not assertions: compare within a run; the machine's load is printed with each run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.controlplane import Component, ControlPlane, file_name, insecure_tls_context
from benchmarks.e2e import (
    REPO,
    BindWatch,
    ExtenderProcess,
    apiserver_metrics,
    bench_nodes,
    create_nodes,
    create_pods,
    delete_namespace_pods,
    kso_process,
    pod_manifest,
    process_cpu_s,
    scheduler_config,
    verb_latency,
)
from benchmarks.prometheus_text import Scrape, histogram, metric_sum, parse_metrics

TIME_WAIT = "06"  # /proc/net/tcp's state code


@dataclass
class BindRun:
    tree: str
    config: str
    round: int
    pods_per_s: float
    cpu_ms: dict[str, float]  # process -> CPU ms per pod
    sched: dict[str, float]  # kube-scheduler's own figures
    verbs: dict[str, dict[str, float]] = field(default_factory=dict)
    refused: float = 0.0
    connections: int = 0
    load1: float = 0.0
    api_requests: dict[str, float] = field(default_factory=dict)  # "VERB resource[/sub]" -> requests per pod
    api_connections: int = 0  # kso's connections to the API server at the end of the run


def time_wait_to(port: int) -> int:
    """Sockets in TIME_WAIT whose remote end is 127.0.0.1:``port`` (closed by this machine's client side)."""
    want = f"0100007F:{port:04X}"
    n = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[2] == want and cols[3] == TIME_WAIT:
            n += 1
    return n


def api_requests(before: Scrape, after: Scrape, pods: int) -> dict[str, float]:
    """kube-apiserver's requests between two scrapes per pod, by verb and resource (those at 0.01 per pod or more)."""
    out: dict[str, float] = {}
    for (name, labels), v in after.samples.items():
        if name != "apiserver_request_total":
            continue
        lab = dict(labels)
        key = f"{lab.get('verb')} {lab.get('resource')}{'/' + lab['subresource'] if lab.get('subresource') else ''}"
        out[key] = out.get(key, 0.0) + (v - before.samples.get((name, labels), 0.0)) / pods
    return {k: v for k, v in sorted(out.items()) if v >= 0.01}  # noqa: PLR2004


def connections_to(pid: int, port: int) -> int:
    """The process's TCP connections to 127.0.0.1:``port``."""
    import psutil

    try:
        return sum(1 for c in psutil.Process(pid).net_connections("tcp") if c.raddr and c.raddr.port == port)
    except psutil.Error:
        return -1


def scheduler_metrics(comp: Component) -> Scrape:
    import urllib.request

    with urllib.request.urlopen(f"https://127.0.0.1:{comp.port}/metrics", context=insecure_tls_context(),
                                timeout=10) as resp:
        return parse_metrics(resp.read().decode())


def _mean_ms(after: Scrape, before: Scrape, name: str, **labels: str) -> float:
    h = histogram(after, name, before, **labels)
    return 1e3 * h.sum / h.count if h.count else float("nan")


class GoroutineSampler:
    """kube-scheduler's ``scheduler_goroutines{operation="binding"}`` sampled every ``every_s`` while it runs."""

    def __init__(self, comp: Component, every_s: float = 0.25) -> None:
        self.comp, self.every_s = comp, every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.samples.append(metric_sum(scheduler_metrics(self.comp), "scheduler_goroutines", operation="binding"))
            except Exception:  # noqa: BLE001 - a scrape during stop
                pass

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return statistics.mean(self.samples) if self.samples else float("nan")


def run_once(cp: ControlPlane, api: Any, tree: str, ext: ExtenderProcess, bind: bool, pods: int, rnd: int,
             timeout: float) -> BindRun:
    from kubernetes import client

    config = "kso-bind" if bind else "kso"
    core = client.CoreV1Api(api)
    ns = f"bp-r{rnd}-{config}-{re.sub(r'[^a-z0-9-]+', '-', tree.lower())[:20].strip('-')}-{os.urandom(3).hex()}"
    core.create_namespace({"metadata": {"name": ns}})
    procs = {c.name.split("-")[0] if c.name.startswith("etcd") else c.name: c for c in cp.components}
    try:
        watch = BindWatch(api, ns)
        create_pods(api, ns, [pod_manifest(f"p{i:05d}") for i in range(pods)])
        kso_before = parse_metrics(ext.get("/metrics"))
        api_before = apiserver_metrics(api)
        cfg = scheduler_config(ext.url, bind=bind)
        tw0 = time_wait_to(ext.port)
        sched = cp.start_scheduler(cfg, name=f"sched-{file_name(tree)}-{config}",
                                   extra_args=("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",))
        watched = {"kso": ext, "kube-scheduler": sched, **{k: v for k, v in procs.items() if k in ("etcd", "kube-apiserver")}}
        try:
            cpu0 = {k: process_cpu_s(v) for k, v in watched.items()}
            sched_before = scheduler_metrics(sched)
            sampler = GoroutineSampler(sched)
            done = watch.wait(pods, timeout)
            binding_goroutines = sampler.stop()
            cpu = {k: (process_cpu_s(v) - cpu0[k]) * 1e3 / pods for k, v in watched.items()}
            sched_after = scheduler_metrics(sched)
        finally:
            cp.stop_component(sched)
            watch.stop()
        connections = time_wait_to(ext.port) - tw0
        requests = api_requests(api_before, apiserver_metrics(api), pods)
        api_port = int(cp.url.rsplit(":", 1)[1])
        api_conns = connections_to(ext.proc.pid, api_port) if ext.proc else -1
        if not done:
            raise RuntimeError(f"{tree} {config}: {len(watch.bound)} of {pods} pods bound in {timeout:.0f} s")
        times = sorted(t for _, t in watch.bound.values())
        kso_after = parse_metrics(ext.get("/metrics"))
        verbs = {v: verb_latency(kso_before, kso_after, v) for v in ("filter", "prioritize", "bind")}
        verbs["bind-api"] = verb_latency(kso_before, kso_after, "", "kso_extender_bind_api_seconds")
        refused = sum(metric_sum(kso_after, "kso_extender_bindings_total", result=r)
                      - metric_sum(kso_before, "kso_extender_bindings_total", result=r) for r in ("expired", "full"))
        s = {
            "attempt_ms": _mean_ms(sched_after, sched_before, "scheduler_scheduling_attempt_duration_seconds"),
            "algorithm_ms": _mean_ms(sched_after, sched_before, "scheduler_scheduling_algorithm_duration_seconds"),
            "bind_point_ms": _mean_ms(sched_after, sched_before, "scheduler_framework_extension_point_duration_seconds",
                                      extension_point="Bind"),
            "binding_goroutines": binding_goroutines,
        }
        return BindRun(tree, config, rnd, (len(times) - 1) / max(times[-1] - times[0], 1e-9), cpu, s, verbs,
                       refused, connections, os.getloadavg()[0], requests, api_conns)
    finally:
        delete_namespace_pods(api, ns)
        core.delete_namespace(ns)


def _spec(text: str) -> tuple[str, dict[str, str]]:
    label, _, rest = text.partition("=") if "=" in text.split(":")[0] else ("kso", "", text)
    tree, _, settings = rest.partition(":")
    env = dict(kv.split("=", 1) for kv in settings.split(";") if "=" in kv)
    return label, {**env, "KSO_BENCH_TREE": str(Path(tree or REPO).resolve())}


def line(r: BindRun) -> str:
    cpu = " ".join(f"{k} {v:.2f}" for k, v in r.cpu_ms.items())
    v = r.verbs
    return (f"  round {r.round} {r.tree:<8} {r.config:<9} {r.pods_per_s:6.1f} pods/s  CPU ms/pod: {cpu}  "
            f"sched attempt {r.sched['attempt_ms']:.2f} ms, Bind point {r.sched['bind_point_ms']:.2f} ms, binding "
            f"goroutines {r.sched['binding_goroutines']:.1f}  kso filter {v['filter'].get('mean_ms', float('nan')):.2f}/"
            f"{v['filter'].get('p99_ms', float('nan')):.1f} prioritize {v['prioritize'].get('mean_ms', float('nan')):.2f}/"
            f"{v['prioritize'].get('p99_ms', float('nan')):.1f} bind {v['bind'].get('mean_ms', float('nan')):.2f}/"
            f"{v['bind'].get('p99_ms', float('nan')):.1f} (API {v['bind-api'].get('mean_ms', float('nan')):.2f}) ms "
            f"mean/p99  refused {r.refused:.0f}  new connections {r.connections}  kso->API connections "
            f"{r.api_connections}  load {r.load1:.1f}\n      API requests per pod: "
            + ", ".join(f"{k} {v:.2f}" for k, v in r.api_requests.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bind_path", description=__doc__.split("\n")[0])
    ap.add_argument("trees", nargs="*", default=["kso=."], help="LABEL=TREE[:KEY=VALUE;...] (default kso=.)")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--configs", default="kso,kso-bind", help="comma-separated: kso, kso-bind")
    args = ap.parse_args(argv)
    specs = dict(_spec(t) for t in args.trees)
    print(f"bind path: {args.nodes} nodes x {args.pods} pods, {args.rounds} rounds, trees "
          f"{', '.join(k + '=' + v['KSO_BENCH_TREE'] for k, v in specs.items())}, cpu count {os.cpu_count()}, "
          f"load at start {os.getloadavg()[0]:.1f}", flush=True)
    runs: list[BindRun] = []
    configs = [c.strip() for c in args.configs.split(",")]
    order = [(t, b) for t in specs for b in (False, True) if ("kso-bind" if b else "kso") in configs]
    with ControlPlane() as cp:
        api = cp.api_client()
        create_nodes(api, bench_nodes(args.nodes))
        assert cp.workdir is not None
        exts = {t: kso_process(cp.kubeconfig, cp.workdir / f"kso-{file_name(t)}.log", **env).start()
                for t, env in specs.items()}
        try:
            for rnd in range(args.rounds):
                for tree, bind in order if rnd % 2 == 0 else order[::-1]:
                    r = run_once(cp, api, tree, exts[tree], bind, args.pods, rnd, args.timeout)
                    runs.append(r)
                    print(line(r), flush=True)
        finally:
            for ext in exts.values():
                ext.stop()
    for tree in specs:
        med = {}
        for config in configs:
            rs = [r for r in runs if r.tree == tree and r.config == config]
            med[config] = (statistics.median(r.pods_per_s for r in rs), statistics.median(r.cpu_ms["kso"] for r in rs))
            print(f"median {tree} {config}: {med[config][0]:.1f} pods/s, kso CPU {med[config][1]:.2f} ms/pod")
        if len(configs) < 2:  # noqa: PLR2004
            continue
        ratios = [b.pods_per_s / a.pods_per_s for a in runs for b in runs
                  if a.tree == b.tree == tree and a.round == b.round and a.config == "kso" and b.config == "kso-bind"]
        cpu = [b.cpu_ms["kso"] / a.cpu_ms["kso"] for a in runs for b in runs
               if a.tree == b.tree == tree and a.round == b.round and a.config == "kso" and b.config == "kso-bind"]
        print(f"{tree}: kso-bind / kso pods/s per round {', '.join(f'{x:.2f}' for x in ratios)} (median "
              f"{statistics.median(ratios):.2f}); kso CPU per pod kso-bind / kso {', '.join(f'{x:.2f}' for x in cpu)} "
              f"(median {statistics.median(cpu):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
