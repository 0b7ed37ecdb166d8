"""End to end: the real kube-scheduler schedules pods on fake nodes, alone and through extenders.

    python -m benchmarks.e2e [--nodes 100] [--pods 1000] [--rounds 2] [--configs alone,kso,...]
                             [--kso-env KEY=VALUE ...] [--bound-pods N] [--load-annotations] [--json PATH]

At scale, before/after (issue 40; benchmarks/figures/e2e-scale.md), one line per size:

    python -m benchmarks.e2e --nodes 5000 --bound-pods 50000 --pods 1500 --rounds 2 \
        --configs alone,trivial,kso,kso-bind --kso-env "KSO_BENCH_TREE=/work/before-40;KSO_BENCH_CONFIGS=kso,kso-bind"

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
runs the pods are force-deleted and the nodes are empty again (but for the bound pods).

At scale: ``--bound-pods N`` creates N pods already bound (spec.nodeName set, round-robin over the nodes, namespace
``e2e-bound``) before any extender starts, kept through every run: kso and kube-scheduler list and count them, as in a
real cluster. ``--load-annotations`` gives the nodes kube-safe-scheduler's load annotations, so kso has statistics
and re-solves its plan every 5 s during the runs (the filter latency is then measured during plan cycles). Also per
run: each process's RSS at the end and its peak (VmHWM, /proc; kso's children, the plan solver, beside it) and
kube-scheduler's start-up: seconds from its process's start to the first bind the watch sees (its informers synced,
every pod listed, one scheduling cycle and its Binding done) and its CPU by then; per extender process, the seconds
from its start to ready (kso: /readyz 200, its watch synced) and its CPU by then. The tables close with the start-ups
against kube-scheduler's first bind in its runs alone. The objects and processes are in benchmarks.e2e_cluster and
benchmarks.e2e_process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import signal
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.controlplane import ControlPlane, file_name
from benchmarks.e2e_cluster import (
    BOUND_NAMESPACE,
    NODE_SHAPES,
    SCHEDULER_NAME,
    BindWatch,
    bench_nodes,
    create_bound_pods,
    create_nodes,
    create_pods,
    delete_namespace_pods,
    delete_nodes,
    in_parallel,
    load_annotations,
    node_manifest,
    pod_manifest,
)
from benchmarks.e2e_process import (
    DEPLOY_SCHEDULER_CONFIG,
    REPO,
    ExtenderProcess,
    Memory,
    deploy_scheduler_config,
    kso_process,
    process_cpu_s,
    process_cpu_times,
    process_memory,
    scheduler_config,
    scheduler_http_timeout_s,
    tree_env,
    trivial_process,
)
from benchmarks.machine import machine_line
from benchmarks.prometheus_text import EMPTY, Scrape, histogram, metric_sum, parse_metrics

__all__ = [  # what tests and other benchmarks import from here
    "BOUND_NAMESPACE", "DEPLOY_SCHEDULER_CONFIG", "NODE_SHAPES", "REPO", "SCHEDULER_NAME", "BindWatch", "ExtenderProcess",
    "Memory", "bench_nodes", "create_bound_pods", "create_nodes", "create_pods", "delete_namespace_pods", "delete_nodes",
    "deploy_scheduler_config", "in_parallel", "kso_process", "load_annotations", "node_manifest", "pod_manifest",
    "process_cpu_s", "process_cpu_times", "process_memory", "scheduler_config", "scheduler_http_timeout_s", "tree_env",
    "trivial_process",
]

# The objects and processes live in benchmarks.e2e_cluster and benchmarks.e2e_process; they are re-exported here
# (tests and other benchmarks import them from benchmarks.e2e).

KSO_CONFIGS = ("kso", "kso-bind", "kso-full")
TRIVIAL_CONFIGS = ("trivial", "trivial-full")


def variant_configs(label: str, env: dict[str, str]) -> list[str]:
    """The runs of a ``--kso-env`` variant ``kso[TEXT]``: ``kso[TEXT]`` (NodeNames) unless its
    KSO_BENCH_CONFIGS lists others of KSO_CONFIGS, e.g. ``kso,kso-bind`` -> ``kso[TEXT]``, ``kso-bind[TEXT]``."""
    names = [c.strip() for c in env.get("KSO_BENCH_CONFIGS", "kso").split(",") if c.strip()]
    if not names or set(names) - set(KSO_CONFIGS):
        raise ValueError(f"KSO_BENCH_CONFIGS wants some of {', '.join(KSO_CONFIGS)}: {env['KSO_BENCH_CONFIGS']!r}")
    return [f"{c}{label[len('kso'):]}" for c in names]


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
    extender_memory: Memory = field(default_factory=Memory)  # at the end of the run
    scheduler_memory: Memory = field(default_factory=Memory)  # at the last bind, before it is stopped
    # kube-scheduler's start-up: seconds from its process's start to its first bind seen by the watch (its informers
    # synced, every bound pod listed, one scheduling cycle done and its Binding posted), and its CPU by then
    scheduler_first_bind_s: float = math.nan
    scheduler_first_bind_cpu_s: float = math.nan
    # kso's background plan solves that ended with a plan during the run (kso_plan_solves_total{result="ok"})
    plan_solves: float = 0.0


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
            first_bind_s = min((t for _, t in watch.bound.values()), default=math.nan) - t0
            done = first and watch.wait(pods, timeout)
            sched_cpu = process_cpu_s(sched) - sched_cpu0
            sched_memory = process_memory(sched)
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
        solves = (metric_sum(after, "kso_plan_solves_total", result="ok")
                  - metric_sum(before, "kso_plan_solves_total", result="ok")) if kso else 0.0
        return RunResult(config_name, rnd, (len(times) - 1) / max(times[-1] - times[0], 1e-9), times[-1] - t0,
                         mx, p95, len({n for n, _ in watch.bound.values()}), os.getloadavg()[0], verbs, filtered,
                         extender_cpu_ms=cpu_ms, extender_system_ms=(system1 - system0) * 1e3 / pods,
                         binds_refused=refused, bind_errors=bind_errors,
                         scheduler_cpu_ms=sched_cpu * 1e3 / max(1, pods - bound0),
                         extender_memory=process_memory(ext), scheduler_memory=sched_memory,
                         scheduler_first_bind_s=first_bind_s, scheduler_first_bind_cpu_s=sched_cpu0, plan_solves=solves)
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


PLAN_INTERVAL_S = "5"  # kso's KSO_PLAN_INTERVAL_S with --load-annotations (its minimum): plan cycles during every run


@dataclass
class Startup:
    """One extender process's start on the benchmark's cluster: seconds from its start to ready (kso: /readyz 200,
    its watch synced), its own CPU seconds by then, its memory then."""

    label: str
    ready_s: float
    cpu_s: float
    memory: Memory


@dataclass
class Setup:
    """What run_benchmark built before the runs: seconds to create the bound pods, each extender's start-up."""

    bound_pods: int = 0
    bound_pods_s: float = math.nan
    nodes: int = 0
    pods: int = 0  # pending pods per run
    startups: list[Startup] = field(default_factory=list)


def run_benchmark(nodes: int, pods: int, rounds: int, configs: list[str], kso_variants: dict[str, dict[str, str]],
                  timeout: float, out: Callable[[str], None] = print, *, bound_pods: int = 0,
                  annotated: bool = False) -> tuple[list[RunResult], Setup]:
    """``bound_pods`` pods bound in advance over the nodes (their own namespace, kept through every run);
    ``annotated``: the nodes carry load annotations and each kso re-solves its plan every PLAN_INTERVAL_S."""
    results: list[RunResult] = []
    setup = Setup(bound_pods, nodes=nodes, pods=pods)
    with ControlPlane() as cp:
        api = cp.api_client()
        manifests = bench_nodes(nodes, annotated=annotated)
        create_nodes(api, manifests)
        if bound_pods:
            setup.bound_pods_s = create_bound_pods(api, [m["metadata"]["name"] for m in manifests], bound_pods,
                                                   progress=out)
            out(f"  {bound_pods} bound pods on {nodes} nodes created in {setup.bound_pods_s:.0f} s "
                f"({bound_pods / setup.bound_pods_s:.0f}/s), load {os.getloadavg()[0]:.1f}")
        logs = cp.workdir or Path(".")
        extenders: dict[str, ExtenderProcess] = {}
        plan_env = {"KSO_PLAN_INTERVAL_S": PLAN_INTERVAL_S} if annotated else {}

        def started(label: str, ext: ExtenderProcess) -> ExtenderProcess:
            mem = process_memory(ext)
            setup.startups.append(Startup(label, ext.ready_s, ext.ready_cpu_s, mem))
            out(f"  {label}: ready in {ext.ready_s:.1f} s, its CPU {ext.ready_cpu_s:.1f} s, RSS {mem.rss_mib:.0f} MiB "
                f"(peak {mem.hwm_mib:.0f}), load {os.getloadavg()[0]:.1f}")
            return ext

        try:
            if any(c.startswith("kso") for c in configs):
                extenders["kso"] = started("kso", kso_process(cp.kubeconfig, logs / "kso.log", **plan_env).start())
            for label, env in kso_variants.items():
                extenders[label] = started(label, kso_process(cp.kubeconfig, logs / f"{file_name(label)}.log",
                                                              **{**plan_env, **env}).start())
            if {"trivial", "trivial-full"} & set(configs):
                extenders["trivial"] = started("trivial", trivial_process(logs / "trivial.log").start())
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
                    f"{res.binds_refused:.0f}  bind errors {res.bind_errors:.0f}  RSS extender/kube-scheduler "
                    f"{res.extender_memory.rss_mib:.0f}/{res.scheduler_memory.rss_mib:.0f} MiB (peak "
                    f"{res.extender_memory.hwm_mib:.0f}/{res.scheduler_memory.hwm_mib:.0f})  kube-scheduler first bind "
                    f"{res.scheduler_first_bind_s:.1f} s (CPU {res.scheduler_first_bind_cpu_s:.1f} s)  plan solves "
                    f"{res.plan_solves:.0f}  load {res.load1:.1f}")
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
    return results, setup


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


def scale_table(results: list[RunResult]) -> str:
    """Per configuration (medians over rounds): the figures that matter at scale, each process's own."""
    lines = ["| configuration | ratio to alone | extender CPU ms/pod | filter p50 / p99 ms | kube-scheduler CPU ms/pod | "
             "RSS MiB extender (peak) + its children | RSS MiB kube-scheduler (peak) | kube-scheduler first bind s "
             "(its CPU s) | plan solves | load avg |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r.config for r in results):
        rs = [r for r in results if r.config == name]
        filt = [r.verbs["filter"] for r in rs if "filter" in r.verbs and r.verbs["filter"]["calls"]]
        ext_rss = _med([r.extender_memory.rss_mib for r in rs])
        lines.append(
            f"| {name} | {_med([r.ratio for r in rs]):.2f} | {_med([r.extender_cpu_ms for r in rs]):.2f} | "
            + (f"{_med([f['p50_ms'] for f in filt]):.2f} / {_med([f['p99_ms'] for f in filt]):.1f}" if filt else "-")
            + f" | {_med([r.scheduler_cpu_ms for r in rs]):.2f} | "
            + ("-" if math.isnan(ext_rss) else f"{ext_rss:.0f} ({_med([r.extender_memory.hwm_mib for r in rs]):.0f}) + "
               f"{_med([r.extender_memory.children_rss_mib for r in rs]):.0f}")
            + f" | {_med([r.scheduler_memory.rss_mib for r in rs]):.0f} ({_med([r.scheduler_memory.hwm_mib for r in rs]):.0f})"
            f" | {_med([r.scheduler_first_bind_s for r in rs]):.1f} ({_med([r.scheduler_first_bind_cpu_s for r in rs]):.1f})"
            f" | {_med([r.plan_solves for r in rs]):.0f} | {_med([r.load1 for r in rs]):.1f} |")
    return "\n".join(lines)


def startup_table(setup: Setup, results: list[RunResult]) -> str:
    """Each extender's seconds to ready against kube-scheduler's own seconds to its first bind (its runs alone,
    else all its runs): the same cluster, the same bound pods."""
    alone = [r.scheduler_first_bind_s for r in results if r.config == "alone"]
    anchor, which = (_med(alone), "alone") if alone else (_med([r.scheduler_first_bind_s for r in results]), "all runs")
    lines = [f"kube-scheduler's start to its first bind (median, {which}): {anchor:.1f} s",
             "| process | ready s | its CPU s by then | RSS MiB then (peak) | ready / kube-scheduler's first bind |",
             "|---|---|---|---|---|"]
    for st in setup.startups:
        lines.append(f"| {st.label} | {st.ready_s:.1f} | {st.cpu_s:.1f} | {st.memory.rss_mib:.0f} "
                     f"({st.memory.hwm_mib:.0f}) | {st.ready_s / anchor:.2f} |")
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
    ap.add_argument("--bound-pods", type=int, default=0, metavar="N",
                    help=f"N pods bound in advance, spread over the nodes (namespace {BOUND_NAMESPACE}, kept through "
                         "every run): what kso and kube-scheduler list and count, as in a real cluster")
    ap.add_argument("--load-annotations", action="store_true",
                    help="nodes carry kube-safe-scheduler's load annotations, so kso has statistics and re-solves its "
                         f"plan every {PLAN_INTERVAL_S} s (KSO_PLAN_INTERVAL_S) during the runs")
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
    print(f"e2e: {args.nodes} nodes x {args.pods} pods, {args.bound_pods} bound in advance"
          f"{', load annotations' if args.load_annotations else ''}, {args.rounds} rounds (ABBA); "
          f"machine: {machine_line(os.getloadavg())}", flush=True)
    results, setup = run_benchmark(args.nodes, args.pods, args.rounds, configs, variants, args.timeout,
                                   lambda s: print(s, flush=True), bound_pods=args.bound_pods,
                                   annotated=args.load_annotations)
    print()
    print(table(results))
    print()
    print(scale_table(results))
    print()
    print(startup_table(setup, results))
    print(f"\nload at the end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps({"setup": dataclasses.asdict(setup),
                                               "runs": [dataclasses.asdict(r) for r in results]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
