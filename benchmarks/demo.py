"""``kso demo``: the main job, end to end on data embedded in the package (no cluster, no Prometheus).

1. forecasts: the kso forecaster on the embedded history (20 Bitbrains VMs x 3 days);
2. a plan: CP-SAT on the embedded demo cluster (16 openb node shapes, pending openb pods);
3. the extender on 127.0.0.1 following that plan, driven over HTTP the way kube-scheduler drives it;
4. a replay of the embedded excerpt of the Google 2019 real-join scenario (rule fixed in advance: the
   first 4 hours of seed 0, right-sized requests, 40 openb node shapes, cluster-autoscaler model) through
   each policy's packing knob (kube-scheduler's default profile with LeastAllocated and MostAllocated,
   Trimaran TargetLoadPacking's target, Koordinator LoadAware's cpu threshold, kso's U*), kso plan-driven
   and the oracle reference: the cost-harm frontier (provisioned node-hours against overloaded
   node-hours and pods OOM-killed), whatever it shows, printed and written to report.md, with the
   output of steps 1-3.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

DEMO_POLICIES = "default-fit,tlp-target,koord-threshold,kso-ustar,kso-plan,oracle"  # sweep names: benchmarks/sim/cli.py


def _step(title: str) -> float:
    print(f"\n=== {title}")
    return time.perf_counter()


def steps_markdown(steps: list[tuple[str, str, float]]) -> list[str]:
    """Steps 1-3 as report.md sections: each step's full output, as printed by its command."""
    out = ["## Steps 1-3 of this run: forecasts, plan, extender", "",
           "Data of steps 1-3 (embedded in kso/data): openb node shapes and pod requests (Alibaba cluster-trace-gpu-v2023, "
           "Weng et al., USENIX ATC 2023) and Bitbrains Rnd 2013-08 utilisation (GWA-T-12, Shen et al., CCGrid 2015), "
           "a synthetic join.", ""]
    for title, text, seconds in steps:
        out += [f"### {title} ({seconds:.1f} s)", "", "```text", text.rstrip(), "```", ""]
    return out


def run_demo(out: str = "kso-demo-report", port: int = 0, hours: float = 4.0, verbose: bool = False) -> int:
    from benchmarks.sim.google import EMBEDDED_HOURS

    if not 0 < hours <= EMBEDDED_HOURS:  # checked before any step runs: step 4 cannot replay more than the excerpt
        print(f"kso demo: error: --hours {hours:g}: the embedded Google excerpt holds {EMBEDDED_HOURS:g} h "
              f"(0 < hours <= {EMBEDDED_HOURS:g})", file=sys.stderr)
        return 2
    logging.getLogger("kso").setLevel(logging.ERROR)
    t_all = time.perf_counter()
    print("kso demo: forecasts -> plan -> extender -> trace replay, on data embedded in the package")
    print("data: openb = Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC 2023) node shapes and pod requests; "
          "Bitbrains Rnd 2013-08 (GWA-T-12; Shen et al., CCGrid 2015) utilisation (steps 1-3, a synthetic join); "
          "Google cluster-data 2019 (Tirmazi et al., EuroSys 2020) requests and usage of the same tasks (step 4, a real "
          "join; series reuse at time offsets and Deployment lifetimes from openb are synthetic)")

    t = _step("1. forecasts (kso forecast --trace embedded)")
    from forecasting.cli import main as forecast_main

    buf = io.StringIO()
    with redirect_stdout(buf):
        forecast_main(["forecast", "--trace", "embedded", "--nodes", "20"])
    lines = buf.getvalue().splitlines()
    print("\n".join(lines[:8] + ([f"... ({len(lines) - 8} more lines)"] if len(lines) > 8 else [])))
    print(f"({time.perf_counter() - t:.1f} s)")
    steps = [("1. Forecasts (kso forecast --trace embedded --nodes 20)", buf.getvalue(), time.perf_counter() - t)]

    t = _step("2. a plan for the demo cluster's pending pods (kso plan --demo --trace embedded)")
    from optimizer.plan.cli import add_commands as plan_commands

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
    steps.append(("2. A plan for the demo cluster's pending pods (kso plan --demo --trace embedded)", buf.getvalue(),
                  time.perf_counter() - t))

    t = _step("3. the extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler")
    from extender.demo import run_demo as extender_demo

    buf = io.StringIO()
    with redirect_stdout(buf):
        extender_demo(port=port, plan_file=str(plan_file))
    text = buf.getvalue().splitlines()
    print("\n".join(text if verbose else text[:24] + [f"... ({len(text) - 24} more lines; --verbose shows all)"]))
    print(f"({time.perf_counter() - t:.1f} s)")
    steps.append(("3. The extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler", buf.getvalue(),
                  time.perf_counter() - t))

    t = _step(f"4. replay: {hours:g} h of the embedded Google excerpt (right-sized requests, autoscaler): the cost-harm "
              "frontier of each policy's packing knob, kso plan-driven and the oracle reference")
    from benchmarks.sim.cli import add_arguments, run_bench

    bench = argparse.ArgumentParser(prog="kso demo (step 4)")
    add_arguments(bench)
    argv = ["--scenario", "google-embedded", "--hours", str(hours), "--jobs", "2", "--policies", DEMO_POLICIES, "--out", out]
    args = bench.parse_args(argv)
    args.report_title = "kso demo: forecasts, a plan, the extender, and the replay's cost-harm frontier"
    args.appendix = steps_markdown(steps)
    rc = run_bench(args, argv)
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
