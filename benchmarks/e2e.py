"""End to end: the real kube-scheduler schedules pods on fake nodes, alone and through extenders.

    python -m benchmarks.e2e [--nodes 100] [--pods 1000] [--rounds 2] [--configs alone,kso,...]
                             [--kso-env KEY=VALUE ...]

A real control plane (benchmarks.controlplane: etcd + kube-apiserver) holds N Node objects of mixed
shapes (4/8/16/32 cores, 110 pods each; no kubelet); each run creates P pending pods (100m cpu, 128Mi,
``schedulerName: kso-scheduler``) in a fresh namespace, then starts kube-scheduler with one
configuration and measures until every pod is bound:

- ``alone``: the profile with no extender (kube-scheduler's own plugins);
- ``kso``: kso as deploy/scheduler-config.yaml configures it, without ``bindVerb`` (NodeNames, the
  scheduler binds); ``kso-bind``: the same with kso binding (deploy/ as shipped); ``kso-full``:
  ``nodeCacheCapable: false`` (full Node objects in every call), no bind;
- ``trivial``: a stdlib extender (benchmarks.trivial_extender) that passes every
  node and scores 0, NodeNames: the cost of the extender protocol itself; ``trivial-full``: the same extender
  with ``nodeCacheCapable: false``: filter answers with the Nodes it was sent, their bytes cut from the body
  without decoding them (kube-scheduler's layout; any other body is decoded): the protocol's own cost when every
  call carries every Node.

kso runs as README says (``python -m kso.cli extender --port P`` with KUBECONFIG pointing at the
cluster, no KSO_CLUSTER_SOURCE), one process for the whole benchmark, plus one for each extra
``--kso-env`` variant (``kso[KEY=VALUE]``; with KSO_BENCH_CONFIGS=kso,kso-bind,kso-full it serves those
runs too, e.g. a before/after of kso binding with KSO_BENCH_TREE). Throughput is (P - 1) / (last bind - first bind), bind times
seen by a watch on the namespace, so the scheduler's start-up is not counted. Rounds run the
configurations in ABBA order (forward, then reversed) so the machine's drift falls on all alike; the table
gives medians over rounds. Per run: pods/s and its ratio to ``alone`` of the same round; kso's per-verb
mean and p99 (from its /metrics histogram, differenced over the run); pods per node (max, p95); the CPU per pod
of the extender's process and of kube-scheduler's (from its first bind on); the 1-minute load average. Between
runs the pods are force-deleted and the nodes are empty again.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from benchmarks.controlplane import Component, ControlPlane, file_name, free_port, wait_ready
from benchmarks.prometheus_text import EMPTY, Scrape, histogram, metric_sum, parse_metrics
from extender.client import ExtenderClient

REPO = Path(__file__).resolve().parents[1]
DEPLOY_SCHEDULER_CONFIG = REPO / "deploy" / "scheduler-config.yaml"
SCHEDULER_NAME = "kso-scheduler"
NODE_SHAPES = (("4", "16Gi"), ("8", "32Gi"), ("16", "64Gi"), ("32", "128Gi"))


# ------------------------------------------------------------------------------------------- objects


def node_manifest(name: str, cpu: str, memory: str, *, pods: str = "110", labels: dict[str, str] | None = None,
                  taints: list[dict[str, str]] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                              **(labels or {})}, "annotations": annotations or {}},
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": alloc, "allocatable": alloc,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def pod_manifest(name: str, *, cpu: str = "100m", memory: str = "128Mi", scheduler: str = SCHEDULER_NAME,
                 node_selector: dict[str, str] | None = None, tolerations: list[dict[str, str]] | None = None,
                 labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def bench_nodes(n: int, prefix: str = "e2e-node") -> list[dict[str, Any]]:
    return [node_manifest(f"{prefix}-{i:04d}", *NODE_SHAPES[i % len(NODE_SHAPES)]) for i in range(n)]


def in_parallel(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = 8) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def create_nodes(api_client: Any, nodes: list[dict[str, Any]]) -> None:
    """Creates the Nodes, then writes their status (a create ignores status; there is no kubelet)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def one(node: dict[str, Any]) -> None:
        core.create_node(node)
        core.patch_node_status(node["metadata"]["name"], {"status": node["status"]})

    in_parallel(one, nodes)


def delete_nodes(api_client: Any, names: Iterable[str]) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    in_parallel(lambda n: core.delete_node(n), list(names))


def create_pods(api_client: Any, namespace: str, pods: list[dict[str, Any]]) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    in_parallel(lambda p: core.create_namespaced_pod(namespace, p), pods)


class BindWatch:
    """Watches a namespace's pods and records when each one got its node (first sighting of spec.nodeName).

    Watches from resourceVersion "0" (whatever the watch cache has, then every change) and starts again
    the same way when the stream ends or reports an error: a bind seen twice keeps its first time."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.bound: dict[str, tuple[str, float]] = {}
        self.cond = threading.Condition()
        self._stopped = threading.Event()
        self._resp: Any = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"bind-watch-{namespace}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._resp = self.core.list_namespaced_pod(self.namespace, watch=True, resource_version="0",
                                                           _preload_content=False, timeout_seconds=300)
                if self._stopped.is_set():
                    break
                for line in self._resp:
                    if line.strip():
                        self._event(orjson.loads(line))
            except Exception:  # noqa: BLE001 - closed by stop(), or a dropped stream: watch again
                time.sleep(0.1)

    def _event(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        node = (obj.get("spec") or {}).get("nodeName")
        name = (obj.get("metadata") or {}).get("name")
        if event.get("type") != "ERROR" and node and name and name not in self.bound:
            with self.cond:
                self.bound[name] = (node, time.monotonic())
                self.cond.notify_all()

    def wait(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.bound) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 1.0))
        return True

    def stop(self) -> None:
        self._stopped.set()
        # shutdown(), not close(): close() waits for the reader thread's lock on the TLS socket.
        try:
            if self._resp is not None:
                self._resp.shutdown()
        except Exception:  # noqa: BLE001
            pass
        self._thread.join(5)


def delete_namespace_pods(api_client: Any, namespace: str, timeout: float = 60.0) -> None:
    """Force-deletes every pod (no kubelet would ever confirm a graceful delete) and waits until none is left."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, limit=1).items and time.monotonic() < deadline:
        time.sleep(0.2)


# ---------------------------------------------------------------------------------------- extenders


def deploy_scheduler_config() -> dict[str, Any]:
    """The KubeSchedulerConfiguration embedded in deploy/scheduler-config.yaml (its ConfigMap's config.yaml)."""
    cm = yaml.safe_load(DEPLOY_SCHEDULER_CONFIG.read_text())
    return yaml.safe_load(cm["data"]["config.yaml"])


def scheduler_config(extender_url: str | None, *, bind: bool = False, node_cache: bool = True,
                     qps: int = 5000) -> dict[str, Any]:
    """deploy/'s configuration with kso at ``extender_url`` (None = no extender: kube-scheduler alone);
    ``bind`` keeps deploy/'s bindVerb, ``node_cache`` its nodeCacheCapable. qps/burst high so the client
    side of kube-scheduler is not what is measured."""
    cfg = copy.deepcopy(deploy_scheduler_config())
    cfg["clientConnection"] = {"qps": qps, "burst": qps}
    extenders = cfg.pop("extenders", [])
    if extender_url is not None:
        ext = dict(extenders[0])
        ext["urlPrefix"] = extender_url
        if not bind:
            ext.pop("bindVerb", None)
        ext["nodeCacheCapable"] = node_cache
        cfg["extenders"] = [ext]
    return cfg


def tree_env(tree: Path = REPO, **extra: str) -> dict[str, str]:
    """The environment of a process that must import kso from ``tree`` (run with cwd=tree)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


@dataclass
class ExtenderProcess:
    """An HTTP extender in its own process on 127.0.0.1; ``url`` is its urlPrefix."""

    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_path: str = "/readyz"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    cwd: Path = REPO  # the checkout whose kso runs

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 240.0) -> ExtenderProcess:
        # A ceiling, not a wait: ready returns at once. kso's start (imports, list of nodes and pods) took
        # over 60 s once at load 12 on the 2-core box, which failed a test module's fixture.
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([*self.argv, str(self.port)], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.cwd)
        comp = Component(self.log.stem, self.proc, self.log, self.port)
        wait_ready(comp, self.url + self.ready_path, timeout)
        return self

    def get(self, path: str) -> str:
        with ExtenderClient(self.port) as client:
            status, body = client.get(path)
        if status != 200:
            raise RuntimeError(f"GET {self.url}{path}: HTTP {status}")
        return body.decode()

    def stop(self) -> None:
        if self.proc is not None:
            Component(self.log.stem, self.proc, self.log).stop()

    def __enter__(self) -> ExtenderProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


KSO_CONFIGS = ("kso", "kso-bind", "kso-full")
TRIVIAL_CONFIGS = ("trivial", "trivial-full")


def variant_configs(label: str, env: dict[str, str]) -> list[str]:
    """The runs of a ``--kso-env`` variant ``kso[TEXT]``: ``kso[TEXT]`` (NodeNames) unless its
    KSO_BENCH_CONFIGS lists others of KSO_CONFIGS, e.g. ``kso,kso-bind`` -> ``kso[TEXT]``, ``kso-bind[TEXT]``."""
    names = [c.strip() for c in env.get("KSO_BENCH_CONFIGS", "kso").split(",") if c.strip()]
    if not names or set(names) - set(KSO_CONFIGS):
        raise ValueError(f"KSO_BENCH_CONFIGS wants some of {', '.join(KSO_CONFIGS)}: {env['KSO_BENCH_CONFIGS']!r}")
    return [f"{c}{label[len('kso'):]}" for c in names]


def scheduler_http_timeout_s() -> str:
    """deploy/'s extender httpTimeout in seconds ("2s" -> "2"): what kso's KSO_HTTP_TIMEOUT_S must say (deploy/settings
    does), so that its Bindings end while kube-scheduler still waits."""
    text = str(deploy_scheduler_config()["extenders"][0].get("httpTimeout", "5s"))
    return str(float(text[:-1]) if text.endswith("s") and not text.endswith("ms") else float(text[:-2]) / 1e3)


def kso_process(kubeconfig: Path, log: Path, **env: str) -> ExtenderProcess:
    """``kso extender --port P`` as README says: a kubeconfig and, as deploy/settings.yaml, the scheduler's httpTimeout
    (KSO_HTTP_TIMEOUT_S, unless the variant sets it); KSO_CLUSTER_SOURCE unset. Bound to 127.0.0.1 so a test never
    opens a port beyond the machine."""
    env.setdefault("KSO_HTTP_TIMEOUT_S", scheduler_http_timeout_s())
    # KSO_BENCH_TREE=DIR (a --kso-env variant): run the kso of another checkout, e.g. the commit before a change;
    # DIR relative to the working directory (the variant's label names files, so it cannot hold a "/").
    tree = Path(env.pop("KSO_BENCH_TREE", str(REPO))).resolve()
    env.pop("KSO_BENCH_CONFIGS", None)  # which runs the variant serves (variant_configs), not a kso setting
    e = tree_env(tree, KUBECONFIG=str(kubeconfig), LOG_LEVEL="WARNING", KSO_HOST="127.0.0.1", **env)
    e.pop("KSO_CLUSTER_SOURCE", None)
    return ExtenderProcess([sys.executable, "-m", "kso.cli", "extender", "--port"], e, log, cwd=tree)


def trivial_process(log: Path) -> ExtenderProcess:
    return ExtenderProcess([sys.executable, "-m", "benchmarks.trivial_extender"], tree_env(), log, ready_path="/healthz")


# ------------------------------------------------------------------------------------------ metrics


def verb_latency(before: Scrape, after: Scrape, verb: str, name: str = "kso_extender_request_duration_seconds",
                 **labels: str) -> dict[str, float]:
    """Calls, mean and p50/p99 of one verb (of histogram ``name``, its series with ``labels`` too; a histogram
    without a verb label: verb "") over the interval between two scrapes (benchmarks.prometheus_text's quantile
    rule)."""
    labels = {"verb": verb, **labels} if verb else labels
    return histogram(after, name, before, **labels).summary_ms()


def apiserver_metrics(api_client: Any) -> Scrape:
    """kube-apiserver's own /metrics (the cluster-admin client), parsed."""
    resp = api_client.call_api("GET", api_client.configuration.host + "/metrics", header_params={"Accept": "text/plain"},
                               _request_timeout=30)
    resp.read()
    return parse_metrics(resp.data.decode())


def api_binding_latency(before: Scrape, after: Scrape) -> dict[str, float]:
    """The API server's time for the Bindings posted between two scrapes (whoever posted them: kube-scheduler's
    DefaultBinder or kso), from its apiserver_request_duration_seconds: what no binder can answer faster than."""
    return verb_latency(before, after, "POST", "apiserver_request_duration_seconds", resource="pods",
                        subresource="binding")


def pods_per_node(bound: dict[str, tuple[str, float]]) -> tuple[int, float]:
    """(max, p95) of pods per node, over the nodes that got at least one pod."""
    counts = sorted(Counter(node for node, _ in bound.values()).values())
    if not counts:
        return 0, math.nan
    return counts[-1], counts[min(len(counts) - 1, math.ceil(0.95 * len(counts)) - 1)]


# --------------------------------------------------------------------------------------------- runs


@dataclass
class RunResult:
    config: str
    round: int
    pods_per_s: float
    wall_s: float
    max_per_node: int
    p95_per_node: float
    nodes_used: int
    load1: float
    verbs: dict[str, dict[str, float]] = field(default_factory=dict)
    filtered: float = 0.0  # nodes kso's filter rejected during the run (all predicates)
    ratio: float = math.nan
    # CPU the extender's process (all its threads; not the plan solver's child) used per pod during the run,
    # ms: the extender's cost where a busy machine makes pods/s swing
    extender_cpu_ms: float = math.nan
    # binds kso answered with an error without posting them (waited past KSO_BIND_MAX_WAIT_S, or the queue was
    # full): kube-scheduler's own binder bound those pods (ignorable extender)
    binds_refused: float = 0.0
    bind_errors: float = 0.0  # binds kso posted that failed (a deadline passed, the API server refused): kube-scheduler retries
    # CPU kube-scheduler's process used per pod from its first bind to its last, ms (its start-up and informer
    # sync not counted): what the extender protocol costs the scheduler itself
    scheduler_cpu_ms: float = math.nan
    extender_system_ms: float = math.nan  # the kernel's part of extender_cpu_ms (system time)


def process_cpu_s(ext: ExtenderProcess | Component | None) -> float:
    """CPU seconds (user + system, all threads) the process of an extender (or of a control-plane component) has
    used so far; NaN without one."""
    return sum(process_cpu_times(ext))


def process_cpu_times(ext: ExtenderProcess | Component | None) -> tuple[float, float]:
    """(user, system) CPU seconds of that process so far, NaN without one. System time includes what the kernel
    spends delivering the process's loopback writes to their reader (the receiver's TCP stack runs in the send)."""
    if ext is None or ext.proc is None:
        return math.nan, math.nan
    import psutil

    try:
        t = psutil.Process(ext.proc.pid).cpu_times()
    except psutil.Error:
        return math.nan, math.nan
    return float(t.user), float(t.system)


def run_once(cp: ControlPlane, api: Any, config_name: str, sched_cfg: dict[str, Any], pods: int, rnd: int,
             kso: ExtenderProcess | None, timeout: float, ext: ExtenderProcess | None = None) -> RunResult:
    from kubernetes import client

    core = client.CoreV1Api(api)
    # Namespaces stay Terminating without a namespace controller: a fresh name per run.
    ns = f"e2e-r{rnd}-{re.sub(r'[^a-z0-9-]+', '-', config_name.lower())[:40].strip('-')}-{os.urandom(3).hex()}"
    core.create_namespace({"metadata": {"name": ns, "annotations": {"kso.io/e2e-config": config_name}}})
    try:
        watch = BindWatch(api, ns)
        create_pods(api, ns, [pod_manifest(f"p{i:05d}") for i in range(pods)])
        before = parse_metrics(kso.get("/metrics")) if kso else EMPTY
        api_before = apiserver_metrics(api)
        user0, system0 = process_cpu_times(ext)
        t0 = time.monotonic()
        sched = cp.start_scheduler(sched_cfg, name=f"sched-{config_name}")
        try:
            # kube-scheduler's CPU from its first bind on (the watch's first sighting): its start-up is not the
            # extender's doing; the pods bound meanwhile are left out of its per-pod figure.
            first = watch.wait(1, timeout)
            sched_cpu0, bound0 = process_cpu_s(sched), len(watch.bound)
            done = first and watch.wait(pods, timeout)
            sched_cpu = process_cpu_s(sched) - sched_cpu0
        finally:
            cp.stop_component(sched)
            watch.stop()
        if not done:
            raise RuntimeError(f"{config_name}: {len(watch.bound)} of {pods} pods bound in {timeout:.0f} s "
                               f"(scheduler log {sched.log})")
        times = sorted(t for _, t in watch.bound.values())
        user1, system1 = process_cpu_times(ext)
        cpu_ms = (user1 + system1 - user0 - system0) * 1e3 / pods
        after = parse_metrics(kso.get("/metrics")) if kso else EMPTY
        mx, p95 = pods_per_node(watch.bound)
        verbs = {v: verb_latency(before, after, v) for v in ("filter", "prioritize", "bind")} if kso else {}
        verbs["api-binding"] = api_binding_latency(api_before, apiserver_metrics(api))
        if kso and any(n == "kso_extender_bind_api_seconds_count" for n, _ in after.samples):  # older trees lack it
            verbs["bind-api"] = verb_latency(before, after, "", "kso_extender_bind_api_seconds")
        filtered = (metric_sum(after, "kso_extender_nodes_filtered_total")
                    - metric_sum(before, "kso_extender_nodes_filtered_total")) if kso else 0.0
        refused = sum(metric_sum(after, "kso_extender_bindings_total", result=res)
                      - metric_sum(before, "kso_extender_bindings_total", result=res)
                      for res in ("expired", "full")) if kso else 0.0
        bind_errors = (metric_sum(after, "kso_extender_bindings_total", result="error")
                       - metric_sum(before, "kso_extender_bindings_total", result="error")) if kso else 0.0
        return RunResult(config_name, rnd, (len(times) - 1) / max(times[-1] - times[0], 1e-9), times[-1] - t0,
                         mx, p95, len({n for n, _ in watch.bound.values()}), os.getloadavg()[0], verbs, filtered,
                         extender_cpu_ms=cpu_ms, extender_system_ms=(system1 - system0) * 1e3 / pods,
                         binds_refused=refused, bind_errors=bind_errors,
                         scheduler_cpu_ms=sched_cpu * 1e3 / max(1, pods - bound0))
    finally:
        delete_namespace_pods(api, ns)
        core.delete_namespace(ns)


def run_target(name: str) -> tuple[str | None, bool, bool]:
    """A run's extender process (its key in run_benchmark's extenders; None: kube-scheduler alone), and whether
    kube-scheduler binds through it and sends it NodeNames (``nodeCacheCapable``)."""
    base, _, label = name.partition("[")
    which = (None if name == "alone" else f"kso[{label}" if label else "kso" if base in KSO_CONFIGS
             else "trivial" if base in TRIVIAL_CONFIGS else name)
    return which, base == "kso-bind", base not in ("kso-full", "trivial-full")


def abba(configs: list[str], rounds: int) -> list[tuple[int, str]]:
    order: list[tuple[int, str]] = []
    for r in range(rounds):
        order += [(r, c) for c in (configs if r % 2 == 0 else list(reversed(configs)))]
    return order


def run_benchmark(nodes: int, pods: int, rounds: int, configs: list[str], kso_variants: dict[str, dict[str, str]],
                  timeout: float, out: Callable[[str], None] = print) -> list[RunResult]:
    results: list[RunResult] = []
    with ControlPlane() as cp:
        api = cp.api_client()
        create_nodes(api, bench_nodes(nodes))
        logs = cp.workdir or Path(".")
        extenders: dict[str, ExtenderProcess] = {}
        try:
            if any(c.startswith("kso") for c in configs):
                extenders["kso"] = kso_process(cp.kubeconfig, logs / "kso.log").start()
            for label, env in kso_variants.items():
                extenders[label] = kso_process(cp.kubeconfig, logs / f"{file_name(label)}.log", **env).start()
            if {"trivial", "trivial-full"} & set(configs):
                extenders["trivial"] = trivial_process(logs / "trivial.log").start()
            all_configs = configs + [c for label, env in kso_variants.items() for c in variant_configs(label, env)]
            for rnd, name in abba(all_configs, rounds):
                which, bind, node_cache = run_target(name)
                ext = extenders.get(which) if which else None
                cfg = scheduler_config(ext.url if ext else None, bind=bind, node_cache=node_cache)
                kso = ext if name not in TRIVIAL_CONFIGS else None
                res = run_once(cp, api, name, cfg, pods, rnd, kso, timeout, ext if name != "alone" else None)
                out(f"  round {rnd} {name:<28} {res.pods_per_s:7.1f} pods/s  max/p95 per node {res.max_per_node}/"
                    f"{res.p95_per_node:.0f} on {res.nodes_used} nodes  filtered {res.filtered:.0f}  extender CPU "
                    f"{res.extender_cpu_ms:.2f} ms/pod (system {res.extender_system_ms:.2f})  kube-scheduler CPU "
                    f"{res.scheduler_cpu_ms:.2f} ms/pod  binds refused "
                    f"{res.binds_refused:.0f}  bind errors {res.bind_errors:.0f}  load {res.load1:.1f}")
                results.append(res)
        finally:
            for ext in extenders.values():
                ext.stop()
            for label, ext in extenders.items():
                n = ext.log.read_text(errors="replace").count("Connection pool is full") if ext.log.exists() else 0
                out(f"  {label}: {n} 'Connection pool is full' warnings")
    alone = {r.round: r.pods_per_s for r in results if r.config == "alone"}
    for r in results:
        r.ratio = r.pods_per_s / alone[r.round] if r.round in alone else math.nan
    return results


def _med(values: list[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def table(results: list[RunResult]) -> str:
    names = list(dict.fromkeys(r.config for r in results))
    lines = ["| configuration | pods/s | ratio to alone | pods/node max / p95 | filter mean / p99 ms | "
             "prioritize mean / p99 ms | bind mean / p50 / p99 ms | bind API mean / p99 ms | API server Binding mean / "
             "p50 / p99 ms | binds refused / failed | extender CPU ms/pod (system) | kube-scheduler CPU ms/pod | load avg |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        rs = [r for r in results if r.config == name]

        def verb(v: str, keys: tuple[str, ...], rs: list[RunResult] = rs) -> str:
            vals = [_med([r.verbs[v][k] for r in rs if v in r.verbs and r.verbs[v]["calls"]]) for k in keys]
            return "-" if all(math.isnan(x) for x in vals) else " / ".join(f"{x:.1f}" for x in vals)

        lines.append(
            f"| {name} | {_med([r.pods_per_s for r in rs]):.0f} | {_med([r.ratio for r in rs]):.2f} | "
            f"{_med([r.max_per_node for r in rs]):.0f} / {_med([r.p95_per_node for r in rs]):.0f} | "
            f"{verb('filter', ('mean_ms', 'p99_ms'))} | {verb('prioritize', ('mean_ms', 'p99_ms'))} | "
            f"{verb('bind', ('mean_ms', 'p50_ms', 'p99_ms'))} | {verb('bind-api', ('mean_ms', 'p99_ms'))} | "
            f"{verb('api-binding', ('mean_ms', 'p50_ms', 'p99_ms'))} | "
            f"{_med([r.binds_refused for r in rs]):.0f} / {_med([r.bind_errors for r in rs]):.0f} | "
            f"{_med([r.extender_cpu_ms for r in rs]):.2f} ({_med([r.extender_system_ms for r in rs]):.2f}) | "
            f"{_med([r.scheduler_cpu_ms for r in rs]):.2f} | "
            f"{_med([r.load1 for r in rs]):.1f} |")
    return "\n".join(lines)


def _parse_variant(text: str) -> tuple[str, dict[str, str]]:
    env = dict(kv.strip().split("=", 1) for kv in text.split(";") if "=" in kv)
    if not env:
        raise argparse.ArgumentTypeError(f"--kso-env wants KEY=VALUE[;KEY=VALUE]: {text!r}")
    return f"kso[{text}]", env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.e2e", description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--configs", default="alone,kso,kso-bind,kso-full,trivial",
                    help="comma-separated: alone, kso, kso-bind, kso-full, trivial, trivial-full")
    ap.add_argument("--kso-env", action="append", default=[], type=_parse_variant,
                    help="an extra kso process with these settings (NodeNames, no bind), e.g. "
                         "'KSO_WEIGHTS=safe-balance=10,pigeon-holing=1;POLICY_OBJECTIVE=LOAD_BALANCE'; "
                         "KSO_BENCH_TREE=DIR runs the kso of another checkout, KSO_BENCH_CONFIGS=kso,kso-bind,kso-full "
                         "the variant's runs (default kso)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed for one run's pods to bind")
    ap.add_argument("--json", metavar="PATH", help="also write every run as JSON")
    args = ap.parse_args(argv)
    # SIGTERM (timeout, CI) unwinds like Ctrl-C, so the control plane and extenders are stopped.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = set(configs) - {"alone", *KSO_CONFIGS, *TRIVIAL_CONFIGS}
    if unknown:
        ap.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    variants = dict(args.kso_env)
    try:
        for label, env in variants.items():
            variant_configs(label, env)
    except ValueError as exc:
        ap.error(str(exc))
    print(f"e2e: {args.nodes} nodes x {args.pods} pods, {args.rounds} rounds (ABBA), cpu count {os.cpu_count()}, "
          f"load avg at start {os.getloadavg()[0]:.1f}", flush=True)
    results = run_benchmark(args.nodes, args.pods, args.rounds, configs, variants, args.timeout,
                            lambda s: print(s, flush=True))
    print()
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
