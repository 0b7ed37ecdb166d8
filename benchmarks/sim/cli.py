"""``kso bench`` (and ``python -m benchmarks.sim``): replay a trace through several policies and compare."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_POLICIES = "default,trimaran-tlp,trimaran-lvrb,trimaran-lroc,koordinator,kso"
# the scenarios with an autoscaler and seeds (``--scenario``): what users actually pick, and kso
SCENARIO_POLICIES = ("default,default-most,trimaran-tlp,trimaran-lvrb,trimaran-lroc,koordinator,kso-inproc,kso-plan,"
                     "kso-plan-lb,kso-plan+reopt")
# each policy's packing knob (added by --sweep): TLP target, LoadAware cpu threshold, kso's U* (SAFEUTILIZATION)
SWEEP_POLICIES = ("trimaran-tlp:target=60,trimaran-tlp:target=80,koordinator:cpu_threshold=45,"
                  "koordinator:cpu_threshold=85,kso-inproc:env=SAFEUTILIZATION=70,kso-inproc:env=SAFEUTILIZATION=80,"
                  "kso-plan:env=SAFEUTILIZATION=70,kso-plan:env=SAFEUTILIZATION=80")


class Progress:
    """A plain progress bar on stderr (one line, rewritten), no dependency."""

    def __init__(self, label: str, stream: Any = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / max(total, 1))
        if not self.tty and pct // 25 == self._last // 25 and done != total:
            return  # not a terminal: a line every 25 %, not every step
        self._last = pct
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if done >= total else ("\r" if self.tty else "\n")
        self.stream.write(f"{self.label:<16} [{bar}] {done}/{total} steps {time.perf_counter() - self.t0:6.1f} s{end}")
        self.stream.flush()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default="embedded", choices=("openb", "embedded"),
                   help="openb: ../shared/data openb + Bitbrains; embedded: the excerpt shipped in kso/data")
    p.add_argument("--scenario", default="", help="comma-separated: google-rightsized (the headline: requests = p90 of "
                   "each job's first third), google-limits (requests = Borg limits), google-embedded (kso/data "
                   "excerpt); runs every seed with the autoscaler, in --jobs processes, and writes the trade-off report")
    p.add_argument("--seeds", type=int, default=5, help="with --scenario: seeds 0..N-1 (default 5)")
    p.add_argument("--seed-from", type=int, default=0, help="with --scenario: the first seed (seeds FROM..FROM+N-1)")
    p.add_argument("--jobs", type=int, default=1, help="with --scenario: worker processes (default 1)")
    p.add_argument("--report-only", action="store_true", help="with --scenario: no replays; rewrite the report from the "
                   "rows already in --out/cells.jsonl (e.g. of a run that was stopped: its finished cells)")
    p.add_argument("--sweep", action="store_true", help=f"with --scenario: add each policy's packing knob ({SWEEP_POLICIES})")
    p.add_argument("--policies", default="", help=f"comma-separated specs (default {DEFAULT_POLICIES}; with --scenario "
                   f"{SCENARIO_POLICIES}); a spec may set a knob: trimaran-tlp:target=80, kso-plan:env=SAFEUTILIZATION=80")
    p.add_argument("--nodes", type=int, default=100, help="nodes to sample (openb; the embedded scenario has its own)")
    p.add_argument("--hours", type=float, default=4.0, help="replay length")
    p.add_argument("--seed", type=int, default=0, help="trace sampling, usage join and tie-breaks")
    p.add_argument("--out", default="bench-report", help="folder for report.md and the plots")
    p.add_argument("--u-star", type=float, default=0.9, help="overload threshold, fraction of allocatable (default 0.9)")
    p.add_argument("--target-load", type=float, default=None,
                   help="time-averaged requested load the scenario's pods reach, fraction of the pool's capacity "
                        "(default 0.75 for --trace openb, 0.6 for --scenario google-*)")
    p.add_argument("--start-hour", type=float, default=9.0, help="time of day of the Bitbrains profiles at replay start")
    p.add_argument("--kso-stats", default="forecast", choices=("forecast", "window"),
                   help="kso's node annotations: forecaster std/mean (default) or the 15-minute window only")
    p.add_argument("--kso-env", default="",
                   help="extender settings for the kso policies, e.g. 'KSO_AGENTS=safe;SAFEPERCENTILE=10' (the policy "
                        "name then shows them); default: kso's defaults")
    p.add_argument("--no-sampling", action="store_true", help="score every feasible node (no percentageOfNodesToScore)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run_bench(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    from benchmarks.sim.engine import run
    from benchmarks.sim.metrics import compute
    from benchmarks.sim.policies import POLICIES, make_policy
    from benchmarks.sim.report import machine_line, terminal_table, write_report
    from benchmarks.sim.trace import build_scenario

    if args.scenario:
        return run_scenarios(args, argv)
    names = [p.strip() for p in (args.policies or DEFAULT_POLICIES).split(",") if p.strip()]
    args.target_load = 0.75 if args.target_load is None else args.target_load
    unknown = [p for p in names if p not in POLICIES]
    if unknown:
        print(f"kso bench: unknown policies {', '.join(unknown)} (known: {', '.join(POLICIES)})", file=sys.stderr)
        return 2
    logging.getLogger("kso").setLevel(logging.ERROR)  # the offline binder's one-time warning is expected here
    t0 = time.perf_counter()
    scenario = build_scenario(args.trace, args.nodes, args.hours, args.seed, args.target_load, args.start_hour)
    print(f"scenario built in {time.perf_counter() - t0:.1f} s: {scenario.describe()}", file=sys.stderr)
    results = []
    for name in names:
        kwargs: dict[str, Any] = {"sample": not args.no_sampling}
        if name.startswith("kso") and name != "kso-plan":
            kwargs["stats"] = args.kso_stats
            if args.kso_env:
                kwargs["env"] = dict(item.split("=", 1) for item in args.kso_env.split(";") if "=" in item)
        policy = make_policy(name, args.seed, **kwargs)
        result = run(scenario, policy, Progress(name))
        results.append(compute(result, args.u_star))
    print(terminal_table(results, scenario))
    print(f"machine: {machine_line()}")
    command = "kso bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    path = write_report(results, scenario, Path(args.out), command, with_plots=not args.no_plots)
    print(f"report: {path}")
    return 0


def run_scenarios(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Every scenario x seed x policy with the autoscaler (multi-process), then the report with 95% intervals."""
    from benchmarks.sim.bench_report import write_bench_report
    from benchmarks.sim.engine import Autoscaler
    from benchmarks.sim.policies import POLICIES
    from benchmarks.sim.runner import Cell, parse_spec, read_rows, run_cells, scenario_for

    specs = [p.strip() for p in (args.policies or SCENARIO_POLICIES).split(",") if p.strip()]
    if args.sweep:
        specs += [p for p in SWEEP_POLICIES.split(",") if p not in specs]
    unknown = [p for p in specs if parse_spec(p)[0] not in POLICIES]
    if unknown:
        print(f"kso bench: unknown policies {', '.join(unknown)} (known: {', '.join(POLICIES)})", file=sys.stderr)
        return 2
    kinds = [k.strip() for k in args.scenario.split(",") if k.strip()]
    args.target_load = 0.6 if args.target_load is None else args.target_load
    seeds = [0] if "google-embedded" in kinds else list(range(args.seed_from, args.seed_from + args.seeds))
    out = Path(args.out)
    notes, sources = {}, ()
    for kind in kinds:
        s = scenario_for(kind, args.nodes, args.hours, 0, args.target_load)
        notes[kind] = [s.describe(), *s.notes]
        sources = s.sources
        print(f"{kind}: {s.describe()}", file=sys.stderr)
    cells = [Cell(k, args.nodes, args.hours, seed, args.target_load, p) for k in kinds for seed in seeds for p in specs]
    print(f"{len(cells)} replays ({len(kinds)} scenario(s) x {len(seeds)} seed(s) x {len(specs)} policies) in {args.jobs} "
          f"process(es); rows written to {out / 'cells.jsonl'}", file=sys.stderr)
    if args.report_only:
        rows = [r for r in read_rows(out) if r["scenario"] in kinds and r["policy"] in specs]
        print(f"report only: {len(rows)} finished rows of {len(cells)} cells in {out / 'cells.jsonl'}", file=sys.stderr)
    else:
        rows = run_cells(cells, out, args.jobs)
    given = argv if argv is not None else sys.argv[1:]
    command = "kso bench " + " ".join(shlex.quote(a) for a in (given[1:] if given[:1] == ["bench"] else given))
    path = write_bench_report(rows, out, notes, sources, Autoscaler().describe(), command, specs, not args.no_plots)
    print(path.read_text().split("## Data sources")[0])
    print(f"report: {path}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``kso bench`` on the ``kso`` command's subparsers."""
    p = subparsers.add_parser("bench", help="replay a trace through the default scheduler, the peers and kso, "
                                            "and write a comparison report")
    add_arguments(p)
    p.set_defaults(func=run_bench)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sim", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_bench(args, argv)


if __name__ == "__main__":
    sys.exit(main())
