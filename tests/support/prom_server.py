"""A real Prometheus, backfilled from a slice of the real traces, for the forecasting tests.

The traces in /work/shared/data are not node-exporter data; this helper turns a 12-hour slice of them
into node-exporter-shaped series (a synthetic mapping, labelled as such in ``PromServer.provenance``):

- worker-0..2: Bitbrains Rnd 2013-08 VMs vm-001..vm-003, worker-3: Alibaba 2018 machine m_1933;
- one scrape every 60 s (the trace value in force at that moment, i.e. a step function), timestamps
  shifted so the slice ends a minute before now (so queries "ending now" work as in production);
- ``node_cpu_seconds_total{cpu,mode="idle"|"user"}`` counters whose increments over each 60 s interval
  are the utilisation at the interval's start, so ``rate()`` recovers the trace exactly;
- ``node_memory_MemAvailable_bytes`` / ``node_memory_MemTotal_bytes`` (MemTotal of the Alibaba machine is
  not in the trace: 512 GiB assumed); ``node_uname_info{nodename,instance}``;
- ``instance="10.0.0.N:9100"`` plus a ``node="worker-N"`` label (for the label mapping);
- worker-1 stops reporting for 40 min (a gap), worker-2's counters reset to 0 (a reboot), worker-0 has
  MemTotal 0 (-> +Inf ratio) and a NaN MemAvailable for a few scrapes, and worker-3 is scraped twice
  (a second exporter at 10.0.0.4:9101: duplicate series for one node);
- worker-4 is an idle node (cpu 2 %, memory 30 %, constant) whose last ``LAG_SCRAPES`` scrapes are
  missing: a node whose scrapes lag or stopped, so a query ending now sees partial rate windows;
- cAdvisor series for one pod (two containers) built from vm-004.

The OpenMetrics file is backfilled with ``promtool tsdb create-blocks-from openmetrics`` and served by the
``prometheus`` binary on 127.0.0.1 with a free port. Needs ``/usr/bin/prometheus`` and ``/usr/bin/promtool``
(Debian package ``prometheus``); ``prometheus_binaries()`` returns None when they are missing.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import requests

from forecasting.traces import DATA_DIR, TRACE_FILES
from kso.core.net import free_port

BITBRAINS = DATA_DIR / TRACE_FILES["bitbrains"]
ALIBABA = DATA_DIR / TRACE_FILES["alibaba"]

STEP = 60  # scrape interval, seconds
HOURS = 12
TRACE_OFFSET_S = 2 * 86400  # start two days into each trace (skips the traces' warm-up)
GAP_NODE, GAP_START_MIN, GAP_MINUTES = "worker-1", 300, 40
RESET_NODE, RESET_MIN = "worker-2", 400
NAN_NODE, INF_MINUTES, NAN_MINUTES = "worker-0", (100, 101, 102), (200,)
DUP_NODE, DUP_INSTANCE = "worker-3", "10.0.0.4:9101"
LAG_NODE, LAG_SCRAPES, LAG_CPU, LAG_MEM = "worker-4", 2, 0.02, 0.3
POD = ("shop", "web-0")


def prometheus_binaries() -> tuple[str, str] | None:
    prom = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
    tool = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    return (prom, tool) if prom and tool else None


@dataclass
class NodeTruth:
    name: str
    instance: str
    cpus: int
    cpu_interval: np.ndarray  # utilisation of each interval ending at scrape k (interval 0 unused)
    mem: np.ndarray  # memory utilisation at scrape k (NaN where the fixture injected bad values)
    mem_total: float
    present: np.ndarray  # bool: scrape k exists for this node


@dataclass
class PromServer:
    prometheus: str
    workdir: Path
    scrapes: np.ndarray  # unix seconds of the scrapes
    nodes: dict[str, NodeTruth]
    pod_cpu_cores: np.ndarray  # per scrape interval, whole pod
    pod_mem_bytes: np.ndarray
    provenance: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def expected_cpu(self, node: str, t: np.ndarray) -> np.ndarray:
        """What ``1 - avg(rate(idle[5m]))`` returns at times ``t`` (scrape-aligned): the mean of the four
        intervals whose end samples lie inside the window; NaN where a window touches missing scrapes."""
        truth = self.nodes[node]
        k = np.rint((np.asarray(t) - self.scrapes[0]) / STEP).astype(int)
        out = np.full(len(k), math.nan)
        for i, kk in enumerate(k):
            if kk < 4 or kk >= len(self.scrapes) or not truth.present[kk - 4: kk + 1].all():
                continue
            out[i] = truth.cpu_interval[kk - 3: kk + 1].mean()
        return out

    def expected_mem(self, node: str, t: np.ndarray) -> np.ndarray:
        truth = self.nodes[node]
        k = np.rint((np.asarray(t) - self.scrapes[0]) / STEP).astype(int)
        ok = (k >= 0) & (k < len(self.scrapes))
        out = np.full(len(k), math.nan)
        out[ok] = np.where(truth.present[k[ok]], truth.mem[k[ok]], math.nan)
        return out

    def start(self, timeout_s: float = 30.0) -> None:
        """Start (or restart, on the same port so URLs held by tests stay valid) and wait until ready."""
        self.port = self.port or free_port()
        # Nothing to scrape. The lookback must exceed the 60 s scrape interval, or instant selectors see gaps
        # between scrapes; retention counts back from the newest block: generous so no block is ever deleted.
        self.proc = launch(self.prometheus, self.workdir, self.port, "global:\n  scrape_interval: 1h\nscrape_configs: []\n",
                           "--storage.tsdb.retention.time=3650d", "--query.lookback-delta=5m", timeout_s=timeout_s)

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def log_tail(self) -> str:
        try:
            return (self.workdir / "prometheus.log").read_text()[-2000:]
        except OSError:
            return ""


def launch(prometheus: str, workdir: Path, port: int, config: str, *args: str,
           timeout_s: float = 30.0) -> subprocess.Popen[bytes]:
    """The ``prometheus`` binary on 127.0.0.1:``port`` with ``config`` (prometheus.yml text), its TSDB and log in
    ``workdir``, once ready; RuntimeError with the log's tail when it exits or is not ready in time."""
    (workdir / "prometheus.yml").write_text(config)
    log = open(workdir / "prometheus.log", "ab")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([prometheus, f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--log.level=warn", *args], stdout=log, stderr=subprocess.STDOUT, cwd=workdir)

    def tail() -> str:
        return (workdir / "prometheus.log").read_text(errors="replace")[-2000:]

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}: {tail()}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return proc
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.terminate()
    proc.wait(10)
    raise RuntimeError(f"prometheus not ready after {timeout_s}s: {tail()}")


def _step_values(trace_t: np.ndarray, trace_y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The trace value in force at each time of ``at`` (last sample at or before it)."""
    idx = np.clip(np.searchsorted(trace_t, at, side="right") - 1, 0, len(trace_t) - 1)
    return trace_y[idx]


def _fmt_labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def build(workdir: Path, now: float | None = None) -> PromServer:
    """Write the OpenMetrics file, backfill the TSDB and return a (not yet started) PromServer."""
    bins = prometheus_binaries()
    if bins is None:
        raise RuntimeError("prometheus/promtool not installed (apt-get install -y prometheus)")
    prom, promtool = bins
    workdir.mkdir(parents=True, exist_ok=True)
    end = (math.floor((time.time() if now is None else now) / STEP) - 1) * STEP
    n = HOURS * 3600 // STEP + 1
    scrapes = end - STEP * np.arange(n - 1, -1, -1, dtype=float)
    rel = scrapes - scrapes[0]

    bb = pd.read_csv(BITBRAINS, nrows=40_000, dtype={"vm": str})
    sources: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, int, float]] = []
    for i, vm in enumerate(("vm-001", "vm-002", "vm-003")):
        d = bb[bb.vm == vm].drop_duplicates("timestamp").sort_values("timestamp")
        t = d.timestamp.to_numpy(float)
        t0 = t[0] + TRACE_OFFSET_S
        cpu = (d.cpu_usage_mhz / d.cpu_capacity_mhz).to_numpy(float)
        mem = (d.mem_usage_kb / d.mem_capacity_kb).to_numpy(float)
        sources.append((f"worker-{i}", _step_values(t, cpu, t0 + rel), _step_values(t, mem, t0 + rel),
                        rel, int(min(d.cpu_cores.iloc[0], 4)), float(d.mem_capacity_kb.iloc[0]) * 1024))
    al = pd.read_csv(ALIBABA, usecols=["machine_id", "time_stamp", "cpu_util_percent", "mem_util_percent"])
    d = al[al.machine_id == "m_1933"].dropna().drop_duplicates("time_stamp").sort_values("time_stamp")
    t = d.time_stamp.to_numpy(float)
    t0 = t[0] + TRACE_OFFSET_S
    sources.append(("worker-3", _step_values(t, d.cpu_util_percent.to_numpy(float) / 100, t0 + rel),
                    _step_values(t, d.mem_util_percent.to_numpy(float) / 100, t0 + rel), rel, 4, 512 * 2.0**30))
    sources.append((LAG_NODE, np.full(n, LAG_CPU), np.full(n, LAG_MEM), rel, 2, 16 * 2.0**30))

    families: dict[str, list[str]] = {"node_cpu_seconds": [], "node_memory_MemAvailable_bytes": [],
                                      "node_memory_MemTotal_bytes": [], "node_uname_info": [],
                                      "container_cpu_usage_seconds": [], "container_memory_working_set_bytes": []}
    nodes: dict[str, NodeTruth] = {}
    for i, (name, cpu_at, mem_at, _, cpus, mem_total) in enumerate(sources):
        instance = f"10.0.0.{i + 1}:9100"
        util = np.clip(cpu_at, 0.0, 1.0)  # a cpu cannot be busier than 100%: idle >= 0
        interval = np.concatenate([[0.0], util[:-1]])  # interval ending at scrape k runs at util[k-1]
        present = np.ones(n, dtype=bool)
        if name == GAP_NODE:
            present[GAP_START_MIN: GAP_START_MIN + GAP_MINUTES] = False
        if name == LAG_NODE:
            present[n - LAG_SCRAPES:] = False
        busy = np.cumsum(interval * STEP)
        idle = np.cumsum((1 - interval) * STEP)
        if name == RESET_NODE:  # reboot just after scrape RESET_MIN - 1: counters restart from 0
            busy[RESET_MIN:] -= busy[RESET_MIN - 1]
            idle[RESET_MIN:] -= idle[RESET_MIN - 1]
        else:
            busy, idle = busy + 50_000.0, idle + 200_000.0  # uptime before the slice
        mem = np.clip(mem_at, 0.0, 1.0)
        total = np.full(n, mem_total)
        avail = mem_total * (1 - mem)
        truth_mem = mem.copy()
        if name == NAN_NODE:
            total[list(INF_MINUTES)] = 0.0  # avail / 0 = +Inf: exporter glitch
            avail[list(NAN_MINUTES)] = math.nan
            truth_mem[list(INF_MINUTES) + list(NAN_MINUTES)] = math.nan
        nodes[name] = NodeTruth(name, instance, cpus, interval, truth_mem, mem_total, present)
        instances = [instance] + ([DUP_INSTANCE] if name == DUP_NODE else [])
        for inst in instances:
            base = {"instance": inst, "job": "node-exporter", "node": name}
            for cpu in range(cpus):
                for mode, counter in (("idle", idle), ("user", busy)):
                    lab = _fmt_labels({**base, "cpu": str(cpu), "mode": mode})
                    families["node_cpu_seconds"] += [f"node_cpu_seconds_total{lab} {_fmt(v)} {ts:.0f}"
                                                     for v, ts, p in zip(counter, scrapes, present, strict=True) if p]
            for fam, values in (("node_memory_MemAvailable_bytes", avail), ("node_memory_MemTotal_bytes", total)):
                lab = _fmt_labels(base)
                families[fam] += [f"{fam}{lab} {_fmt(v)} {ts:.0f}"
                                  for v, ts, p in zip(values, scrapes, present, strict=True) if p]
            lab = _fmt_labels({**base, "nodename": name, "sysname": "Linux"})
            families["node_uname_info"] += [f"node_uname_info{lab} 1 {ts:.0f}"
                                            for ts, p in zip(scrapes, present, strict=True) if p]

    # One pod, two containers: 70/30 split of vm-004's cpu cores and memory.
    d = bb[bb.vm == "vm-004"].drop_duplicates("timestamp").sort_values("timestamp")
    t = d.timestamp.to_numpy(float)
    t0 = t[0] + TRACE_OFFSET_S
    cores = _step_values(t, (d.cpu_usage_mhz / d.cpu_capacity_mhz * d.cpu_cores).to_numpy(float), t0 + rel)
    pod_interval = np.concatenate([[0.0], cores[:-1]])
    pod_mem = _step_values(t, d.mem_usage_kb.to_numpy(float) * 1024, t0 + rel)
    for container, share in (("app", 0.7), ("sidecar", 0.3)):
        lab = _fmt_labels({"namespace": POD[0], "pod": POD[1], "container": container, "image": f"{container}:1",
                           "instance": "10.0.0.1:10250", "node": "worker-0"})
        counter = np.cumsum(pod_interval * share * STEP)
        families["container_cpu_usage_seconds"] += [f"container_cpu_usage_seconds_total{lab} {_fmt(v)} {ts:.0f}"
                                                    for v, ts in zip(counter, scrapes, strict=True)]
        families["container_memory_working_set_bytes"] += [
            f"container_memory_working_set_bytes{lab} {_fmt(v * share)} {ts:.0f}" for v, ts in zip(pod_mem, scrapes, strict=True)]

    types = {"node_cpu_seconds": "counter", "container_cpu_usage_seconds": "counter"}
    om = workdir / "traces.om"
    with om.open("w") as f:
        for fam, lines in families.items():
            f.write(f"# TYPE {fam} {types.get(fam, 'gauge')}\n")
            f.write("\n".join(lines) + "\n")
        f.write("# EOF\n")
    tsdb = workdir / "tsdb"
    res = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)],
                         capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {res.stderr[-2000:]}")
    return PromServer(prom, workdir, scrapes, nodes, pod_interval, pod_mem,
                      provenance="synthetic node-exporter series built from Bitbrains Rnd 2013-08 (vm-001..004) "
                                 "and Alibaba 2018 machine_usage (m_1933), time-shifted to end now")
