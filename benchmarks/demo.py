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
import re
import sys
import time
from contextlib import redirect_stdout
from importlib import resources
from pathlib import Path

import orjson

DEMO_POLICIES = "default-fit,tlp-target,koord-threshold,kso-ustar,kso-plan,oracle"  # sweep names: benchmarks/sim/cli.py


def _step(title: str) -> float:
    print(f"kso demo: {title} ...", file=sys.stderr)  # progress; stdout leads with the verdict, so it waits for step 4
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


EXTENDER_ROW = re.compile(r"^(\S+)\s+\S+\s+\S+\s+(\d+)\s+(\d+)\s+(\S+)")  # pod cpu memory pass fail node (extender/demo.py)


def agreement_lines(plan_file: Path, extender_text: str) -> list[str]:
    """Steps 2 and 3 side by side: pods the plan placed against pods the extender bound, and why they differ (the
    load each step read), from the plan file, the demo snapshot and step 3's rows."""
    from kso.core.snapshot import DEMO_SNAPSHOT

    plan = orjson.loads(plan_file.read_bytes())
    planned = sum(c["count"] - c["unplaced"] for c in plan["classes"].values())
    pending = sum(c["count"] for c in plan["classes"].values())
    rows = [m for ln in extender_text.splitlines() if (m := EXTENDER_ROW.match(ln)) and m.group(2).isdigit()]
    bound = sum(1 for m in rows if m.group(4) != "(none)")
    held = len(rows) - bound
    line = (f"  steps 2-3: the plan placed {planned} of {pending} pending pods; the extender following it bound "
            f"{bound} and held {held}")
    if bound >= planned:
        return [line + ": the extender followed the plan's count."]
    doc = orjson.loads(resources.files("kso.data").joinpath(DEMO_SNAPSHOT).read_bytes())
    annotated = {o["metadata"]["name"]: float(o["metadata"]["annotations"]["mean-free-cpu"]) for o in doc["items"]
                 if o.get("kind") == "Node" and "mean-free-cpu" in o["metadata"].get("annotations", {})}
    nodes = {n: v for n, v in plan["nodes"].items() if n in annotated}  # the nodes both steps have a load for
    cap = sum(v["capacity"]["cpu"] for v in nodes.values()) / 1000
    plan_used = sum(v["before"]["mean"]["cpu"] for v in nodes.values()) / 1000
    ann_used = cap - sum(annotated[n] for n in nodes) / 1000
    why = (f"  why: the plan read the nodes' load from step 1's trace forecasts ({plan_used:.0f} of {cap:.0f} cores in "
           f"use on the {len(nodes)} annotated nodes), the extender reads the demo nodes' annotations "
           f"({ann_used:.0f} cores in use) and counts each new pod at its requests; by the annotations the held pods "
           "take every node where their requests fit past U* (safe-overload, step 3's reasons). In a cluster the plan "
           "and the extender read the same load, so the extender holds only what that load forbids; here the two steps "
           "read different data by construction.")
    return [line + ".", why]


EXPLAIN_ROW = re.compile(r"^  (\S+): (passed|rejected), score (\d+)")  # /debug/explain's ranking (extender/demo.py)


def ranking_note(extender_text: str) -> list[str]:
    """A word when step 3's /debug/explain ranking shows a rejected node above one that passed."""
    ranked = [(m.group(2), int(m.group(3))) for ln in extender_text.splitlines() if (m := EXPLAIN_ROW.match(ln))]
    passed = [score for verdict, score in ranked if verdict == "passed"]
    if not any(verdict == "rejected" and passed and score > min(passed) for verdict, score in ranked):
        return []
    return ["  note: in step 3's /debug/explain ranking a rejected node scores higher than a passed one: it scores "
            "every node, the filter's rejected ones too; kube-scheduler ranks only the nodes that passed, so a "
            "rejected node is never chosen whatever its score."]


def report_verdict(report: Path) -> list[str]:
    """The verdict block at the top of step 4's report.md (benchmarks/sim/verdict.py), as printed there."""
    lines = report.read_text().splitlines()
    try:
        first = next(i for i, ln in enumerate(lines) if ln.startswith("**Verdict**"))
    except StopIteration:
        return []
    block = []
    for ln in lines[first + 1:]:
        if ln.startswith("- machine:"):
            break
        if ln.strip():
            block.append(ln)
    return block


def run_demo(out: str = "kso-demo-report", port: int = 0, hours: float = 4.0, verbose: bool = False) -> int:
    from benchmarks.sim.google import EMBEDDED_HOURS

    if not 0 < hours <= EMBEDDED_HOURS:  # checked before any step runs: step 4 cannot replay more than the excerpt
        print(f"kso demo: error: --hours {hours:g}: the embedded Google excerpt holds {EMBEDDED_HOURS:g} h "
              f"(0 < hours <= {EMBEDDED_HOURS:g})", file=sys.stderr)
        return 2
    logging.getLogger("kso").setLevel(logging.ERROR)
    t_all = time.perf_counter()
    body: list[str] = []  # steps 1-4 as printed after the verdict

    t = _step("1. forecasts (kso forecast --trace embedded)")
    from forecasting.cli import main as forecast_main

    buf = io.StringIO()
    with redirect_stdout(buf):
        forecast_main(["forecast", "--trace", "embedded", "--nodes", "20"])
    lines = buf.getvalue().splitlines()
    notes = [ln for ln in lines[8:] if ln.startswith("# note:")]  # e.g. stale forecasts: shown, not cut
    body += ["", "=== 1. forecasts (kso forecast --trace embedded)", *lines[:8],
             *([f"... ({len(lines) - 8} more lines)"] if len(lines) > 8 else []), *notes,
             f"({time.perf_counter() - t:.1f} s)"]
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
    body += ["", "=== 2. a plan for the demo cluster's pending pods (kso plan --demo --trace embedded)",
             *buf.getvalue().splitlines()[:12], f"({time.perf_counter() - t:.1f} s)"]
    steps.append(("2. A plan for the demo cluster's pending pods (kso plan --demo --trace embedded)", buf.getvalue(),
                  time.perf_counter() - t))

    t = _step("3. the extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler")
    from extender.demo import run_demo as extender_demo

    buf = io.StringIO()
    with redirect_stdout(buf):
        extender_demo(port=port, plan_file=str(plan_file))
    text = buf.getvalue().splitlines()
    agree = agreement_lines(plan_file, buf.getvalue())
    ranking = ranking_note(buf.getvalue())
    body += ["", "=== 3. the extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler",
             *(text if verbose else text[:24] + [f"... ({len(text) - 24} more lines; --verbose shows all)"]),
             *agree, *ranking, f"({time.perf_counter() - t:.1f} s)"]
    steps.append(("3. The extender on 127.0.0.1 following that plan, driven over HTTP like kube-scheduler",
                  "\n".join([*text, "", *agree, *ranking]), time.perf_counter() - t))

    title = (f"4. replay: {hours:g} h of the embedded Google excerpt (right-sized requests, autoscaler): the cost-harm "
             "frontier of each policy's packing knob, kso plan-driven and the oracle reference")
    t = _step(title)
    from benchmarks.sim.cli import add_arguments, run_bench

    bench = argparse.ArgumentParser(prog="kso demo (step 4)")
    add_arguments(bench)
    argv = ["--scenario", "google-embedded", "--hours", str(hours), "--jobs", "2", "--policies", DEMO_POLICIES, "--out", out]
    args = bench.parse_args(argv)
    args.report_title = "kso demo: forecasts, a plan, the extender, and the replay's cost-harm frontier"
    args.appendix = steps_markdown(steps)
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = run_bench(args, argv)
    replay = buf.getvalue().splitlines()
    if (first := next((i for i, ln in enumerate(replay) if ln.startswith("**Verdict**")), None)) is not None:
        last = next((i for i, ln in enumerate(replay) if i > first and ln.startswith("- machine:")), first + 1)
        replay[first:last] = ["(verdict and policies: at the top)", ""]  # printed first, not twice
    body += ["", f"=== {title}", *replay, f"({time.perf_counter() - t:.1f} s)"]
    report = Path(out) / "report.md"
    print(f"kso demo: forecasts -> plan -> extender -> trace replay, on data embedded in the package "
          f"({time.perf_counter() - t_all:.0f} s; report: {report}, plan: {plan_file})")
    verdict = report_verdict(report) if report.exists() else []
    print(f"verdict of step 4's replay ({hours:g} h of the Google 2019 excerpt; numbers measured in this run):")
    print("\n".join(verdict or ["  (no verdict: step 4 wrote no report; its output is below)"]))
    print("steps 2-3 (the demo cluster):")
    print("\n".join(agree))
    print("data: openb = Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC 2023) node shapes and pod requests; "
          "Bitbrains Rnd 2013-08 (GWA-T-12; Shen et al., CCGrid 2015) utilisation (steps 1-3, a synthetic join); "
          "Google cluster-data 2019 (Tirmazi et al., EuroSys 2020) requests and usage of the same tasks (step 4, a real "
          "join; series reuse at time offsets and Deployment lifetimes from openb are synthetic)")
    print("\n".join(body))
    print(f"\nkso demo done in {time.perf_counter() - t_all:.0f} s; report: {report}, plan: {plan_file}")
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
