"""``kso demo``: the main job, end to end on data embedded in the package (no cluster, no Prometheus).

1. forecasts: the kso forecaster on the embedded history (20 Bitbrains VMs x 3 days);
2. a plan: CP-SAT on the embedded demo cluster (16 openb node shapes, pending openb pods);
3. the extender on 127.0.0.1 following that plan, driven over HTTP the way kube-scheduler drives it;
4. a replay of 4 hours of the embedded openb excerpt (40 nodes, ~350 pods; usage: synthetic join with
   Bitbrains) through the default-scheduler model, a peer, kso's heuristics and kso plan-driven, with
   the comparison printed and a report (Markdown + plots) written.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path


def _step(title: str) -> float:
    print(f"\n=== {title}")
    return time.perf_counter()


def run_demo(out: str = "kso-demo-report", port: int = 0, hours: float = 4.0, verbose: bool = False) -> int:
    logging.getLogger("kso").setLevel(logging.ERROR)
    t_all = time.perf_counter()
    print("kso demo: forecasts -> plan -> extender -> trace replay, on data embedded in the package")
    print("data: openb = Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC 2023) node shapes and pod requests; "
          "Bitbrains Rnd 2013-08 (GWA-T-12; Shen et al., CCGrid 2015) utilisation; "
          "usage attached to pods and nodes is a synthetic join")

    t = _step("1. forecasts (kso forecast --trace embedded)")
    from forecasting.cli import main as forecast_main

    buf = io.StringIO()
    with redirect_stdout(buf):
        forecast_main(["forecast", "--trace", "embedded", "--nodes", "20"])
    lines = buf.getvalue().splitlines()
    print("\n".join(lines[:8] + ([f"... ({len(lines) - 8} more lines)"] if len(lines) > 8 else [])))
    print(f"({time.perf_counter() - t:.1f} s)")

    t = _step("2. a plan for the demo cluster's pending pods (kso plan --demo --trace embedded)")
    from optimizer.cli import add_commands as plan_commands

    parser = argparse.ArgumentParser(prog="kso")
    plan_commands(parser.add_subparsers())
    plan_file = Path(out) / "plan.json"
    plan_file.parent.mkdir(parents=True, exist_ok=True)
    args = parser.parse_args(["plan", "--demo", "--trace", "embedded", "--time-limit", "10", "--out", str(plan_file)])
    buf = io.StringIO()
    with redirect_stdout(buf):
        args.func(args)
    print("\n".join(buf.getvalue().splitlines()[:12]))
    print(f"({time.perf_counter() - t:.1f} s)")

    t = _step("3. the extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler")
    from extender.demo import run_demo as extender_demo

    buf = io.StringIO()
    with redirect_stdout(buf):
        extender_demo(port=port, plan_file=str(plan_file))
    text = buf.getvalue().splitlines()
    print("\n".join(text if verbose else text[:24] + [f"... ({len(text) - 24} more lines; --verbose shows all)"]))
    print(f"({time.perf_counter() - t:.1f} s)")

    t = _step(f"4. replay: {hours:g} h of the embedded openb excerpt through default, a peer, kso and kso plan-driven")
    from benchmarks.sim.cli import add_arguments, run_bench

    bench = argparse.ArgumentParser()
    add_arguments(bench)
    argv = ["--trace", "embedded", "--hours", str(hours), "--policies", "default,koordinator,kso,kso-plan", "--out", out]
    rc = run_bench(bench.parse_args(argv), argv)
    print(f"({time.perf_counter() - t:.1f} s)")
    print(f"\nkso demo done in {time.perf_counter() - t_all:.0f} s; report: {Path(out) / 'report.md'}, plan: {plan_file}")
    return rc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.demo", description=__doc__)
    p.add_argument("--out", default="kso-demo-report")
    p.add_argument("--hours", type=float, default=4.0)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args(argv)
    return run_demo(a.out, hours=a.hours, verbose=a.verbose)


if __name__ == "__main__":
    sys.exit(main())
