"""What one forecast refresh costs: PrometheusSource.node_series against a real Prometheus holding N nodes x D days
of node-exporter-shaped history, timed, with Prometheus's own CPU time (its process's utime + stime from /proc).

    python -m benchmarks.forecast_refresh --nodes 20 --days 7
    python -m benchmarks.forecast_refresh --nodes 1000 --days 7 --refreshes 6
    python -m benchmarks.forecast_refresh --nodes 20 --tree /work/main     # the source of another checkout

The history is synthetic and labelled so: each node a diurnal sine with noise (random phase and level, seed 1),
``node_cpu_seconds_total{cpu,mode="idle"|"user"}`` counters for ``--cpus`` cpus, ``node_memory_MemAvailable_bytes``
/ ``node_memory_MemTotal_bytes`` and ``node_uname_info``, one scrape every 60 s ending a minute before the run
starts, backfilled with ``promtool tsdb create-blocks-from openmetrics`` and compacted by Prometheus before any
timing (the timings wait until its CPU is idle). The refreshes run as kso's background job does: one source kept
across refreshes, "now" advancing 60 s a refresh (the first from ``--refreshes`` minutes before the history's end,
so every refresh sees data). Prints numbers with the machine, never asserts a time.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SCRAPE_S = 60
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


def write_history(path: Path, nodes: int, days: float, cpus: int, end: float, modes: tuple[str, ...] = ("idle", "user"),
                  seed: int = 1) -> int:
    """The OpenMetrics file of ``nodes`` nodes x ``days`` days (scrapes every 60 s ending at ``end``); returns the
    number of samples written."""
    rng = np.random.default_rng(seed)
    n = int(days * 86400 // SCRAPE_S) + 1
    ts = (end - SCRAPE_S * np.arange(n - 1, -1, -1)).astype(np.int64)
    ts_text = [str(t) for t in ts]
    phase = rng.uniform(0, 2 * math.pi, nodes)
    level = rng.uniform(0.15, 0.6, nodes)
    mem_level = rng.uniform(0.3, 0.7, nodes)
    mem_total = 16 * 2.0**30
    day = 2 * math.pi * ts / 86400.0
    samples = 0
    with path.open("w") as f:
        def series(name: str, labels: dict[str, str], values: np.ndarray) -> None:
            nonlocal samples
            head = f"{name}{_labels(labels)} "
            text = np.char.mod("%.2f", values)
            f.write("".join(f"{head}{v} {t}\n" for v, t in zip(text, ts_text, strict=True)))
            samples += len(values)

        util = np.empty((nodes, n))
        for i in range(nodes):
            u = level[i] + 0.25 * np.sin(day + phase[i]) + rng.normal(0, 0.03, n)
            util[i] = np.clip(u, 0.01, 0.99)
        f.write("# TYPE node_cpu_seconds counter\n")
        for i in range(nodes):
            inst = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:9100"
            busy = np.cumsum(util[i] * SCRAPE_S) + 50_000.0
            idle = np.cumsum((1 - util[i]) * SCRAPE_S) + 200_000.0
            for c in range(cpus):
                for mode, counter in (("idle", idle), ("user", busy)):
                    if mode not in modes:
                        continue
                    series("node_cpu_seconds_total", {"instance": inst, "job": "node-exporter", "cpu": str(c),
                                                      "mode": mode}, counter)
        for fam, fn in (("node_memory_MemAvailable_bytes",
                         lambda i: mem_total * (1 - np.clip(mem_level[i] + 0.1 * np.sin(day + phase[i]), 0, 1))),
                        ("node_memory_MemTotal_bytes", lambda i: np.full(n, mem_total)),
                        ("node_uname_info", lambda i: np.ones(n))):
            f.write(f"# TYPE {fam} gauge\n")
            for i in range(nodes):
                inst = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:9100"
                extra = {"nodename": f"node-{i:05d}", "sysname": "Linux"} if fam == "node_uname_info" else {}
                series(fam, {"instance": inst, "job": "node-exporter", **extra}, fn(i))
        f.write("# EOF\n")
    return samples


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, seconds (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def start_prometheus(workdir: Path, port: int) -> subprocess.Popen[bytes]:
    import requests

    (workdir / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    log = open(workdir / "prometheus.log", "ab")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([shutil.which("prometheus") or "prometheus", f"--config.file={workdir / 'prometheus.yml'}",
                             f"--storage.tsdb.path={workdir / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=3650d", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/-/ready", timeout=1).status_code == 200:
                return proc
        except requests.RequestException:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit("prometheus not ready after 300 s")


def wait_idle(pid: int, limit_s: float = 900.0, quiet_cpu_per_s: float = 0.02, quiet_for_s: float = 10.0) -> float:
    """Wait until the process used under ``quiet_cpu_per_s`` cpu-seconds per second for ``quiet_for_s`` seconds (its
    start-up compaction done); returns the seconds waited."""
    t0 = time.monotonic()
    quiet = 0.0
    last = cpu_seconds(pid)
    while time.monotonic() - t0 < limit_s and quiet < quiet_for_s:
        time.sleep(2.0)
        now = cpu_seconds(pid)
        quiet = quiet + 2.0 if (now - last) / 2.0 < quiet_cpu_per_s else 0.0
        last = now
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=20)
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--cpus", type=int, default=2, help="cpus per node (a counter per cpu and mode)")
    p.add_argument("--modes", default="idle,user", help="node_cpu_seconds_total modes written (kso reads idle)")
    p.add_argument("--refreshes", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60.0, help="KSO_PROMETHEUS_TIMEOUT for the runs (default 60: "
                                                               "measure, do not fail)")
    p.add_argument("--tree", help="import forecasting/ from this checkout (the 'before')")
    p.add_argument("--workdir", help="keep the TSDB here and reuse it when it exists (same --nodes/--days/--cpus)")
    p.add_argument("--port", type=int, default=0)
    args = p.parse_args(argv)
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    from benchmarks.machine import machine_line
    from forecasting.prometheus import PrometheusSettings, PrometheusSource
    from kso.core.net import free_port

    if not (shutil.which("prometheus") and shutil.which("promtool")):
        print("prometheus/promtool not installed (apt-get install -y prometheus)", file=sys.stderr)
        return 1
    import forecasting.prometheus as fp

    print(f"# forecasting.prometheus from {Path(fp.__file__).resolve().parents[1]}")
    print(f"# machine: {machine_line()}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="kso-refresh-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    meta = workdir / "history.txt"
    key = f"{args.nodes} {args.days} {args.cpus} {args.modes}"
    if not (meta.exists() and meta.read_text().split("\n")[0] == key):
        shutil.rmtree(workdir / "tsdb", ignore_errors=True)
        end = (math.floor(time.time() / SCRAPE_S) - 1) * SCRAPE_S
        om = workdir / "history.om"
        t0 = time.monotonic()
        samples = write_history(om, args.nodes, args.days, args.cpus, end, tuple(args.modes.split(",")))
        t1 = time.monotonic()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(workdir / "tsdb")],
                       check=True, capture_output=True)
        om.unlink()
        print(f"# history: {args.nodes} nodes x {args.days:g} days x {args.cpus} cpus ({args.modes}), "
              f"{samples / 1e6:.1f} M samples; written in {t1 - t0:.0f} s, backfilled in {time.monotonic() - t1:.0f} s")
        meta.write_text(f"{key}\n{end}\n")
    end = float(meta.read_text().split("\n")[1])
    port = args.port or free_port()
    proc = start_prometheus(workdir, port)
    try:
        waited = wait_idle(proc.pid)
        print(f"# prometheus {port} pid {proc.pid}: idle after {waited:.0f} s (compaction)")
        settings = PrometheusSettings(url=f"http://127.0.0.1:{port}", timeout_s=args.timeout)
        source = PrometheusSource(settings)
        rows: list[dict[str, Any]] = []
        for k in range(args.refreshes):
            now = end - 60.0 * (args.refreshes - 1 - k)
            cpu0, t0 = cpu_seconds(proc.pid), time.perf_counter()
            error = ""
            try:
                out = source.node_series(now)
            except Exception as exc:  # noqa: BLE001 - a failed refresh is a result here
                out, error = {}, f"{type(exc).__name__}: {str(exc)[:120]}"
            wall = time.perf_counter() - t0
            time.sleep(0.5)  # Prometheus's last bits of work for the query
            cpu = cpu_seconds(proc.pid) - cpu0
            rows.append({"refresh": k + 1, "wall_s": wall, "prom_cpu_s": cpu, "nodes": len(out), "error": error})
            read = getattr(source, "last_read", "") or "full"
            rows[-1]["read"] = read
            print(f"refresh {k + 1}: {wall:7.2f} s wall, Prometheus {cpu:6.2f} cpu-s, {len(out)} nodes, {read} read"
                  + (f"  FAILED {error}" if error else ""), flush=True)
        later = [r for r in rows[1:] if not r["error"]] or rows
        wall = sorted(r["wall_s"] for r in later)[len(later) // 2]
        cpu = sorted(r["prom_cpu_s"] for r in later)[len(later) // 2]
        print(f"# {args.nodes} nodes x {args.days:g} d: first refresh {rows[0]['wall_s']:.2f} s / "
              f"{rows[0]['prom_cpu_s']:.2f} cpu-s; later refreshes median {wall:.2f} s / {cpu:.2f} cpu-s of Prometheus "
              f"= {100 * cpu / 60:.2f} % of one core at one refresh a minute")
        print(f"# machine after: {machine_line()}")
    finally:
        proc.terminate()
        proc.wait(30)
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
