"""How long ``kso bench --prometheus`` takes to build a large cluster's scenario from Prometheus, and its peak memory.

``python -m benchmarks.history_scale generate --workdir W --nodes 500 --pods 10000 --days 7``: a generated history
(synthetic in its cluster, real in its usage: each pod reads one Google 2019 task's 5-minute usage, the job's
series read cyclically from a seeded offset, requests = the job's right-sized p90 as in benchmarks/sim/google.py;
80% of the pods run the whole range, the rest arrive at a seeded time and live an exponential lifetime of mean
one day; openb node shapes), written as kube-state-metrics/cAdvisor OpenMetrics with one scrape per step
(benchmarks/sim/history_openmetrics.py), one file per day each backfilled with promtool (time reported apart).

``python -m benchmarks.history_scale measure --workdir W``: starts Prometheus on that TSDB and runs the builder in
a child process under ``/usr/bin/time -v`` (wall time and peak RSS of the builder alone), cpu as ``irate`` over
10 minutes (a 5-minute scrape holds one sample per 5-minute window); Prometheus' own peak RSS sampled beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import requests

from benchmarks.sim.google import CPU_UNIT_MILLI, MEMORY_UNIT_BYTES, build_google_scenario, load_jobs
from benchmarks.sim.history_openmetrics import aligned_start, backfill, write_openmetrics
from benchmarks.sim.trace import MIB, STEP_S, Scenario
from forecasting.traces import DATA_DIR
from kso.core.net import free_port


def generated_scenario(n_nodes: int, n_pods: int, days: float, seed: int = 0, long_share: float = 0.8) -> Scenario:
    rng = np.random.default_rng(seed)
    jobs = load_jobs()
    names = sorted(jobs)
    nodes = pd.read_csv(DATA_DIR / "openb-nodes.csv")
    nodes = nodes.iloc[np.sort(rng.choice(len(nodes), n_nodes, replace=False))].reset_index(drop=True)
    T = int(round(days * 86400 / STEP_S))
    arrival = np.zeros(n_pods, dtype=np.int64)
    departure = np.full(n_pods, T + 1, dtype=np.int64)
    churn = rng.random(n_pods) >= long_share
    arrival[churn] = rng.integers(0, T, churn.sum())
    departure[churn] = np.minimum(T + 1, arrival[churn] + 1 + rng.exponential(288, churn.sum()).astype(np.int64))
    departure[churn & (departure >= T)] = T + 1
    order = np.argsort(arrival, kind="stable")
    arrival, departure = arrival[order], departure[order]
    usage = np.zeros((n_pods, T, 2), dtype=np.float32)
    cpu = np.zeros(n_pods)
    mem = np.zeros(n_pods)
    owners, pod_names = [], []
    p, dep = 0, 0
    while p < n_pods:  # Deployments of 1-14 replicas: one job's tasks at one offset
        job = jobs[names[int(rng.integers(len(names)))]]
        sized = np.array(job.right_sized()) * np.array([CPU_UNIT_MILLI, MEMORY_UNIT_BYTES])
        offset = int(rng.integers(job.history_end, job.n_bins))
        idx = (offset + np.arange(T)) % job.n_bins
        for t_i in range(len(job.tasks)):
            if p >= n_pods:
                break
            c = pd.Series(job.cpu[t_i, idx]).ffill().bfill().fillna(0.0).to_numpy()
            m = pd.Series(job.memory[t_i, idx]).ffill().bfill().fillna(0.0).to_numpy()
            a, d = int(arrival[p]), int(min(departure[p], T))
            cpu[p], mem[p] = sized
            usage[p, a:d, 0] = c[a:d] * CPU_UNIT_MILLI / sized[0]
            usage[p, a:d, 1] = m[a:d] * MEMORY_UNIT_BYTES / sized[1]
            owner = f"gen-{job.job[-4:]}-d{dep:05d}"
            owners.append(owner)
            pod_names.append(f"{owner}-t{job.tasks[t_i]}")
            p += 1
        dep += 1
    return Scenario(name=f"generated-{n_nodes}n-{days:g}d", step_s=STEP_S, n_steps=T, node_names=nodes.sn.tolist(),
                    node_cpu=nodes.cpu_milli.to_numpy(float), node_memory=nodes.memory_mib.to_numpy(float) * MIB,
                    pod_names=pod_names, pod_cpu=cpu, pod_memory=mem, pod_arrival=arrival, pod_departure=departure,
                    pod_usage=usage, pod_owner=owners, pod_cpu_limit=np.zeros(n_pods), pod_memory_limit=np.zeros(n_pods),
                    usage_label="usage: Google 2019 task series (right-sized requests) read cyclically; a generated cluster")


def generate(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    s = generated_scenario(args.nodes, args.pods, args.days, args.seed)
    t_scen = time.perf_counter() - t0
    start = aligned_start(86400, days_ago=args.days + 2)
    info = {"nodes": s.n_nodes, "pods": s.n_pods, "steps": s.n_steps, "start": start, "end": start + s.n_steps * STEP_S,
            "scenario_s": t_scen}
    print(f"scenario: {s.describe()} ({t_scen:.1f} s)", flush=True)
    info.update(write_s=0.0, backfill_s=0.0, om_bytes=0, samples=0)
    om = work / "history.om"
    n_scrapes = s.n_steps + 1  # one scrape per step
    for d, first in enumerate(range(0, n_scrapes, 288)):  # one file per day, backfilled on its own
        t0 = time.perf_counter()
        counts = write_openmetrics(s, om, start, scrape_s=STEP_S, pod_cgroup=False,
                                   scrapes=(first, min(n_scrapes, first + 288)))
        info["write_s"] += time.perf_counter() - t0
        info["om_bytes"] += om.stat().st_size
        info["samples"] += sum(counts.values())
        info["backfill_s"] += backfill(om, work / "tsdb", args.promtool, max_block_duration="24h")
        om.unlink()
        print(f"day {d}: {info['samples']:,} samples ({info['om_bytes'] / 2**30:.1f} GiB) so far; written in "
              f"{info['write_s']:.0f} s, backfilled in {info['backfill_s']:.0f} s", flush=True)
    (work / "generated.json").write_text(json.dumps(info, indent=1))
    return 0


CHILD = """
import json, sys, time
from benchmarks.sim.prometheus_history import build_history, save_scenario
from pathlib import Path
t0 = time.perf_counter()
h = build_history(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), 300.0)
save_scenario(h.scenario, Path(sys.argv[4]))
print(json.dumps({"build_s": time.perf_counter() - t0, "queries": h.queries, "points": h.points,
                  "pods": h.scenario.n_pods, "nodes": h.scenario.n_nodes, "steps": h.scenario.n_steps,
                  "gaps": h.gaps}))
"""


def measure(args: argparse.Namespace) -> int:
    work = Path(args.workdir)
    info = json.loads((work / "generated.json").read_text())
    port = free_port()
    proc = subprocess.Popen([args.prometheus, f"--config.file={work / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=3650d", "--log.level=warn"],
                            stdout=open(work / "prometheus.log", "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    url = f"http://127.0.0.1:{port}"
    peak = {"prometheus_rss": 0}
    stop = threading.Event()
    try:
        for _ in range(600):
            try:
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)

        def sample() -> None:
            p = psutil.Process(proc.pid)
            while not stop.is_set():
                peak["prometheus_rss"] = max(peak["prometheus_rss"], p.memory_info().rss)
                time.sleep(0.5)

        threading.Thread(target=sample, daemon=True).start()
        env = {**os.environ, "KSO_HISTORY_CPU_RATE": "irate", "KSO_HISTORY_CPU_WINDOW": "10m"}
        res = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", CHILD, url, str(info["start"]), str(info["end"]),
                              str(work / "built.npz")], capture_output=True, text=True, env=env, cwd=os.getcwd())
        stop.set()
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        out = json.loads(res.stdout.strip().splitlines()[-1])
        rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", res.stderr).group(1))
        wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", res.stderr).group(1)
        out.update(builder_peak_rss_mib=rss_kb / 1024, builder_wall=wall,
                   prometheus_peak_rss_mib=peak["prometheus_rss"] / 2**20, load_after=os.getloadavg(),
                   cpus=os.cpu_count(), **{k: info[k] for k in ("write_s", "backfill_s", "om_bytes", "samples")})
        print(json.dumps(out, indent=1))
        (work / "measured.json").write_text(json.dumps(out, indent=1))
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
    return 0


def google(args: argparse.Namespace) -> int:
    """The Google 2019 join (benchmarks/sim/google.py, right-sized) of this size and seed as a cluster's history:
    60 s scrapes, the pod cgroup's own cAdvisor series too."""
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    s = build_google_scenario(args.nodes, args.hours, seed=args.seed, target_load=0.6, requests="p90")
    start = aligned_start(STEP_S, days_ago=2)
    om = work / "history.om"
    counts = write_openmetrics(s, om, start)
    seconds = backfill(om, work / "tsdb", args.promtool)
    om.unlink()
    info = {"start": start, "end": start + s.n_steps * STEP_S, "samples": sum(counts.values()), "backfill_s": seconds,
            "scenario": s.describe()}
    (work / "generated.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info, indent=1))
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(args: argparse.Namespace) -> int:
    """Prometheus on the workdir's TSDB until interrupted (or --seconds)."""
    work = Path(args.workdir)
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    info = json.loads((work / "generated.json").read_text())
    proc = subprocess.Popen([args.prometheus, f"--config.file={work / 'prometheus.yml'}",
                             f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{args.port}",
                             "--storage.tsdb.retention.time=3650d", "--log.level=warn"])
    signal.signal(signal.SIGTERM, _interrupt)  # a terminated server stops its Prometheus too
    iso = [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info[k])) for k in ("start", "end")]
    print(f"serving http://127.0.0.1:{args.port}: --from {iso[0]} --to {iso[1]}", flush=True)
    try:
        proc.wait(args.seconds or None)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        pass
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.history_scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--workdir", required=True)
    g.add_argument("--nodes", type=int, default=500)
    g.add_argument("--pods", type=int, default=10_000)
    g.add_argument("--days", type=float, default=7.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--promtool", default="promtool")
    m = sub.add_parser("measure")
    m.add_argument("--workdir", required=True)
    m.add_argument("--prometheus", default="prometheus")
    gg = sub.add_parser("google", help="the Google 2019 join of benchmarks/sim/google.py as a history")
    gg.add_argument("--workdir", required=True)
    gg.add_argument("--nodes", type=int, default=30)
    gg.add_argument("--hours", type=float, default=6.0)
    gg.add_argument("--seed", type=int, default=0)
    gg.add_argument("--promtool", default="promtool")
    sv = sub.add_parser("serve", help="Prometheus on a generated history")
    sv.add_argument("--workdir", required=True)
    sv.add_argument("--port", type=int, default=9090)
    sv.add_argument("--seconds", type=float, default=0.0)
    sv.add_argument("--prometheus", default="prometheus")
    args = p.parse_args(argv)
    return {"generate": generate, "measure": measure, "google": google, "serve": serve}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
