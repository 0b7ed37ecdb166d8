"""The example shadow report (benchmarks/figures/shadow-report-example.md): ``kso shadow`` as its own process beside
a stand-in for kube-scheduler, on the real control plane (etcd + kube-apiserver) and a real Prometheus, with its CPU
time and peak memory measured.

The cluster: NODES nodes of 4 cpus and 16 GiB. Their node-exporter series (cpu counters, memory, node_uname_info,
the OOM-kill counter) are generated, not measured: a steady load per node (15-88 % cpu, drawn with a fixed seed) with
noise, and three nodes whose load rises to 93-99 % from the start of the run on, with an OOM kill every five
minutes; backfilled with promtool from 6 hours before the run to an hour after it. The stand-in scheduler binds PODS
pods (100-250m cpu) with the Binding API, each to the node with the most unrequested cpu (kube-scheduler's LeastAllocated, which
reads requests, never usage), one every BIND_EVERY_S. The shadow then reads each bind's outcome once its horizon
(KSO_FORECAST_HORIZON=HORIZON_S) and one scrape interval have passed, and writes its report on SIGTERM.

    python -m benchmarks.shadow_example --out benchmarks/figures/shadow-report-example.md
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import requests

from benchmarks.controlplane import ControlPlane
from benchmarks.e2e import create_nodes, node_manifest, pod_manifest
from benchmarks.sim.history_openmetrics import backfill
from kso.core.net import free_port

NODES, PODS, BIND_EVERY_S, HORIZON_S = 12, 48, 2.0, 300  # the horizon: at least the 5-minute rate window
CPUS, SCRAPE, BEFORE_S, AFTER_S = 4, 60, 6 * 3600, 3600
RISING = {"node-03": 0.97, "node-07": 0.95, "node-10": 0.93}


def openmetrics(path: Path, now: float, seed: int = 1) -> dict[str, float]:
    """node-exporter series for the nodes (see the module docstring); returns each node's steady cpu load."""
    rng = np.random.default_rng(seed)
    end = math.floor(now / SCRAPE) * SCRAPE + AFTER_S
    t = np.arange(end - BEFORE_S - AFTER_S, end + 1, SCRAPE, dtype=float)
    loads = {f"node-{i:02d}": float(rng.uniform(0.15, 0.88)) for i in range(NODES)}
    fam: dict[str, list[str]] = {k: [] for k in ("node_cpu_seconds", "node_memory_MemAvailable_bytes",
                                                 "node_memory_MemTotal_bytes", "node_uname_info", "node_vmstat_oom_kill")}
    for i, (node, load) in enumerate(loads.items()):
        after = RISING.get(node, load)
        util = np.clip(np.where(t >= now - 300, after, load) + rng.normal(0, 0.02, len(t)), 0, 1)
        busy, idle = np.cumsum(util * SCRAPE) + 1e5, np.cumsum((1 - util) * SCRAPE) + 1e5
        base = f'instance="10.1.0.{i + 1}:9100",job="node-exporter"'
        for cpu in range(CPUS):
            for mode, counter in (("idle", idle), ("user", busy)):
                fam["node_cpu_seconds"] += [f'node_cpu_seconds_total{{cpu="{cpu}",{base},mode="{mode}"}} {v:.3f} {s:.0f}'
                                            for v, s in zip(counter, t, strict=True)]
        total, mem = 16 * 2.0**30, np.clip(0.3 + 0.5 * util + rng.normal(0, 0.01, len(t)), 0, 1)
        fam["node_memory_MemTotal_bytes"] += [f"node_memory_MemTotal_bytes{{{base}}} {total:.0f} {s:.0f}" for s in t]
        fam["node_memory_MemAvailable_bytes"] += [f"node_memory_MemAvailable_bytes{{{base}}} {total * (1 - m):.0f} {s:.0f}"
                                                  for m, s in zip(mem, t, strict=True)]
        fam["node_uname_info"] += [f'node_uname_info{{{base},nodename="{node}"}} 1 {s:.0f}' for s in t]
        kills = np.cumsum((t >= now) & ((t // SCRAPE) % 5 == 0)) if node in RISING else np.zeros(len(t))
        fam["node_vmstat_oom_kill"] += [f"node_vmstat_oom_kill{{{base}}} {k:.0f} {s:.0f}" for k, s in zip(kills, t, strict=True)]
    with path.open("w") as f:
        for name, lines in fam.items():
            f.write(f"# TYPE {name} {'counter' if name == 'node_cpu_seconds' else 'gauge'}\n" + "\n".join(lines) + "\n")
        f.write("# EOF\n")
    return loads


def start_prometheus(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    argv = ["prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d", "--log.level=warn"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return proc
        except requests.RequestException:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("prometheus did not start")


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/figures/shadow-report-example.md")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kso-shadow-example-"))
    now = time.time()
    loads = openmetrics(work / "nodes.om", now)
    backfill(work / "nodes.om", work / "tsdb")
    prom_port, shadow_port = free_port(), free_port()
    prom = start_prometheus(work, prom_port)
    cp = ControlPlane().start()
    shadow = None
    try:
        api = cp.api_client()
        core = client.CoreV1Api(api)
        create_nodes(api, [node_manifest(n, str(CPUS), "16Gi") for n in loads])
        core.create_namespace({"metadata": {"name": "shop"}})
        report = work / "shadow-report.md"
        env = {**os.environ, "KSO_PROMETHEUS_URL": f"http://127.0.0.1:{prom_port}", "KSO_PROMETHEUS_HISTORY": str(BEFORE_S),
               "KSO_FORECAST_HORIZON": str(HORIZON_S), "LOG_LEVEL": "INFO"}
        shadow = subprocess.Popen([sys.executable, "-m", "kso.cli", "shadow", "--kubeconfig", str(cp.kubeconfig),
                                   "--address", f"127.0.0.1:{shadow_port}", "--report", str(report),
                                   "--records", str(work / "records.jsonl")], env=env,
                                  stderr=open(work / "shadow.log", "w"))  # noqa: SIM115 - lives as long as the process
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # up, and the first forecasts in (a risk histogram needs them: wait a bit)
            try:
                if requests.get(f"http://127.0.0.1:{shadow_port}/healthz", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        time.sleep(15)
        requested = dict.fromkeys(loads, 0.0)
        rng = np.random.default_rng(2)
        for k in range(PODS):
            cpu = float(rng.choice([100, 150, 200, 250]))
            name = f"web-{k:02d}"
            core.create_namespaced_pod("shop", pod_manifest(name, cpu=f"{cpu:.0f}m", memory="512Mi",
                                                            scheduler="default-scheduler"))
            node = min(requested, key=lambda n: (requested[n], n))  # LeastAllocated by requests
            requested[node] += cpu
            time.sleep(BIND_EVERY_S / 2)
            core.create_namespaced_binding("shop", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                                                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                                           _preload_content=False)
            time.sleep(BIND_EVERY_S / 2)
        time.sleep(HORIZON_S + SCRAPE + 70)  # the last bind's horizon, the settling scrape, one check period
        shadow.send_signal(signal.SIGTERM)  # it reads the outcomes due, writes the report and exits
        _, status, usage = os.wait4(shadow.pid, 0)  # the whole process's CPU time and peak memory, from the kernel
        shadow.returncode = os.waitstatus_to_exitcode(status)
        cpu_s, hwm = usage.ru_utime + usage.ru_stime, usage.ru_maxrss  # seconds, KiB
        text = report.read_text()
        out = Path(args.out)
        image = report.with_suffix(".png")
        if image.exists():
            shutil.copy(image, out.with_suffix(".png"))
            text = text.replace(f"]({image.name})", f"]({out.with_suffix('.png').name})")
        lines = (work / "records.jsonl").read_text().splitlines()
        kib = (work / "records.jsonl").stat().st_size / 1024
        vm = psutil.virtual_memory()
        note = (f"\n## The run\n\nThis report was written by `kso shadow` (its own process) on the real control plane "
                f"(etcd + kube-apiserver) and a real Prometheus (backfilled with promtool), by "
                f"`python -m benchmarks.shadow_example` ({Path(__file__).name}'s docstring: {NODES} nodes whose "
                f"node-exporter series are generated, {len(RISING)} of them rising over U* from the run's start; "
                f"{PODS} pods of 100-250m cpu bound by a stand-in for kube-scheduler's LeastAllocated, which reads "
                f"requests, not usage). "
                f"No kubelet runs the pods: the measured load is the generated one, without the pods' own usage, while "
                f"kso counts each bound pod at its requests until its statistics can have seen it "
                f"(KSO_RECENT_BIND_WINDOW_S).\n\n"
                f"- kso shadow process, start to exit (getrusage of the child): {cpu_s:.1f} s of CPU time (user + "
                f"system) over {time.time() - now:.0f} s, peak resident memory {hwm / 1024:.0f} MiB (ru_maxrss), "
                f"including the Python interpreter, numpy, scipy, the kubernetes client, the forecasts' refresh every "
                f"60 s and the plot.\n"
                f"- `--records`: {len(lines)} JSON lines, one per judged bind ({kib:.0f} KiB).\n"
                f"- machine: {platform.machine()}, {psutil.cpu_count()} cores, {vm.total / 2**30:.1f} GiB, "
                f"{platform.platform()}, Python {platform.python_version()}; shared with other jobs "
                f"(load average {os.getloadavg()[0]:.1f} at the end).\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + note)
        print(f"wrote {out} (shadow: {cpu_s:.1f} s CPU, {hwm / 1024:.0f} MiB peak); logs in {work}")
        return 0
    finally:
        if shadow is not None and shadow.poll() is None:
            shadow.kill()
        cp.stop()
        prom.terminate()
        prom.wait(10)


if __name__ == "__main__":
    sys.exit(main())
