"""``kso bench`` (and ``python -m benchmarks.sim``): replay a trace through several policies and compare.

With no --scenario and no --trace, ``kso bench`` runs the embedded Google excerpt (``--scenario
google-embedded``): real requests and usage of the same tasks, with the autoscaler, so the policies differ.
``kso bench --prometheus URL --from T [--to T] [--step 5m]`` replays the cluster's own history instead
(benchmarks/sim/prometheus_history.py): the scenario is built once, saved in --out for the cells' processes, and
the report states the history's gaps and the builder's assumptions.
An option that cannot apply to the run asked for is an error (exit 2), never silently changed or dropped."""

from __future__ import annotations

import argparse
import csv
import logging
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_POLICIES = "default,trimaran-tlp,trimaran-lvrb,trimaran-lroc,koordinator,kso"
# the scenarios with an autoscaler and seeds (``--scenario``): what users actually pick, kso, and the oracle reference
SCENARIO_POLICIES = ("default,default-most,trimaran-tlp,trimaran-lvrb,trimaran-lroc,koordinator,kso-inproc,kso-plan,"
                     "kso-plan-lb,kso-plan+reopt,oracle")
SCENARIOS = ("google-rightsized", "google-limits", "google-embedded", "openb", "embedded")
FIXED_EXCERPTS = ("google-embedded",)  # one fixed excerpt: its own nodes, load and seed
OWN_NODES = ("google-embedded", "embedded")  # the shipped excerpts: their own 40 node shapes and load
DEFAULT_SCENARIO = "google-embedded"
# Named knob sweeps (``--policies frontier`` or any name below, mixed freely with specs): each policy's packing knob.
SWEEPS: dict[str, tuple[str, ...]] = {
    "default-fit": ("default", "default-most"),  # NodeResourcesFit LeastAllocated vs MostAllocated
    "tlp-target": tuple(f"trimaran-tlp:target={t}" for t in (20, 40, 60, 80)),  # TargetLoadPacking's target (40)
    "koord-threshold": tuple(f"koordinator:cpu_threshold={t}" for t in (45, 65, 85)),  # LoadAware cpu threshold (65)
    "kso-ustar": tuple(f"kso-inproc:env=SAFEUTILIZATION={u}" for u in (60, 70, 80, 90)),  # kso's U* (90)
    "kso-plan-ustar": tuple(f"kso-plan:env=SAFEUTILIZATION={u}" for u in (70, 80, 90)),
    "oracle": ("oracle",),
}
SWEEPS["frontier"] = tuple(dict.fromkeys(spec for specs in list(SWEEPS.values()) for spec in specs))
SWEEPS_EPILOG = "\n".join([
    "named sweeps (--policies NAME, mixed freely with specs; each point is a cell, its spec the label in every table):",
    *(f"  {name:<16} {', '.join(specs)}" for name, specs in SWEEPS.items() if name != "frontier"),
    f"  {'frontier':<16} all of the above: the cost-harm frontier's curves",
    "oracle: a reference that knows each pod's next-hour usage (benchmarks/sim/policies/oracle.py), not a scheduler.",
    "One seed: the report says 'one seed: no interval'; several: mean +- 95% over seeds (Student t)."])


# --policies' items are comma-separated, and a spec's value may itself hold commas (KSO_WEIGHTS=a=1,b=2): such a
# spec is written whole in double quotes, as a CSV field is (the csv module splits and says what is malformed).
QUOTED_EXAMPLE = "--policies 'default,\"kso-inproc:env=KSO_WEIGHTS=safe-overload=1,pigeon-holing=20\"'"


def split_policies(text: str) -> list[str]:
    """The comma-separated items of ``text``, a double-quoted one whole; ValueError for a malformed list."""
    try:
        rows = list(csv.reader([text], skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise ValueError(f"--policies: {exc} in {text!r}; a spec holding a comma is quoted whole: {QUOTED_EXAMPLE}") from None
    items = [item.strip() for row in rows for item in row]
    if quoted := next((item for item in items if '"' in item), None):
        raise ValueError(f"--policies: {quoted!r} has a quote inside; a spec holding a comma is quoted whole: "
                         f"{QUOTED_EXAMPLE}")
    return items


def expand_policies(text: str) -> list[str]:
    """Comma-separated specs (a spec holding a comma double-quoted) and sweep names -> specs, in order, each once."""
    out: list[str] = []
    for item in split_policies(text):
        if item:
            out += SWEEPS.get(item, (item,))
    return list(dict.fromkeys(out))


def policy_specs(text: str, known: Any) -> list[str]:
    """expand_policies, each spec parsed (runner.parse_spec) and naming a policy in ``known``; ValueError otherwise."""
    from benchmarks.sim.runner import parse_spec

    specs = expand_policies(text)
    unknown = [p for p in specs if parse_spec(p)[0] not in known]
    if unknown:
        raise ValueError(f"unknown policies {', '.join(unknown)} (known: {', '.join(known)}; sweeps: {', '.join(SWEEPS)})")
    return specs


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


# Options whose default is None so that "given" can be told from "defaulted"; the defaults applied after the check.
SINGLE_DEFAULTS = {"trace": "embedded", "nodes": 100, "hours": 4.0, "seed": 0, "u_star": 0.9, "start_hour": 9.0,
                   "kso_stats": "forecast"}
SCENARIO_DEFAULTS = {"nodes": 100, "hours": 4.0, "seeds": 5, "seed_from": 0, "jobs": 1, "executor": "local"}


# "--from -7d": argparse takes an argument starting with "-" for an option unless it looks like a negative number;
# relative times (-7d, -1h30m) are made to look like one (no option of this parser does).
RELATIVE_TIME = re.compile(r"^-(\d+(\.\d+)?[smhdw]?)+$|^-\d*\.\d+$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.set_defaults(bench_parser=p)
    p._negative_number_matcher = RELATIVE_TIME  # type: ignore[attr-defined]
    p.epilog = SWEEPS_EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--scenario", default="", help=f"comma-separated, of {', '.join(SCENARIOS)}: google-rightsized (the "
                   "headline: requests = p90 of each job's first third), google-limits (requests = Borg limits), "
                   "google-embedded (kso/data excerpt: 40 nodes, 4 h, one fixed seed; the default when neither "
                   "--scenario nor --trace is given); runs every seed with the autoscaler and writes the cost-harm report")
    p.add_argument("--seeds", type=int, default=None, help="with --scenario: seeds FROM..FROM+N-1 (default 5; "
                   "google-embedded is one fixed excerpt: seed 0 only)")
    p.add_argument("--seed-from", type=int, default=None, help="with --scenario: the first seed (default 0)")
    p.add_argument("--jobs", type=int, default=None, help="with --scenario and the local executor: worker processes "
                   "(default 1)")
    p.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="with --scenario: where the cells run. local (default): --jobs worker processes here; ray: each "
                        "cell a Ray task (1 CPU) on the cluster ray.init() finds (RAY_ADDRESS, else a local one); its "
                        "workers need this package and its data: pip install 'kube-safe-optimizer[bench,ray]'")
    p.add_argument("--report-only", action="store_true", help="with --scenario: no replays; rewrite the report from the "
                   "rows already in --out/cells.jsonl (e.g. of a run that was stopped: its finished cells)")
    p.add_argument("--sweep", action="store_true", help="with --scenario: add the 'frontier' sweep to --policies")
    p.add_argument("--policies", default="", help=f"comma-separated policy specs and sweep names (default "
                   f"{DEFAULT_POLICIES}; with --scenario {SCENARIO_POLICIES}). A spec is NAME or "
                   "NAME:KEY=VALUE;KEY=VALUE, and env=VAR=VALUE&VAR=VALUE sets kso's settings: trimaran-tlp:target=80, "
                   "kso-plan:env=SAFEUTILIZATION=80, oracle:u_star=0.8. A spec holding a comma (a KSO_WEIGHTS value) is "
                   f"written whole in double quotes: {QUOTED_EXAMPLE}. A sweep name (below) stands for its specs: "
                   "--policies frontier")
    p.add_argument("--prometheus", default="", metavar="URL",
                   help="replay the cluster's own history read from this Prometheus (kube-state-metrics and cAdvisor; "
                        "names settable with KSO_HISTORY_* variables) between --from and --to, through the same "
                        "policies, sweeps, --jobs and --executor as --scenario; the report states every gap in the "
                        "history and every assumption")
    p.add_argument("--from", dest="history_from", default=None, metavar="TIME",
                   help="with --prometheus: the start, RFC3339 (2026-11-20T00:00:00Z), relative to now (-7d, -36h) or "
                        "unix seconds")
    p.add_argument("--to", dest="history_to", default=None, metavar="TIME",
                   help="with --prometheus: the end (same forms; default now)")
    p.add_argument("--step", dest="history_step", default=None, metavar="DURATION",
                   help="with --prometheus: the replay's step (default 5m)")
    p.add_argument("--fixed-size", action="store_true",
                   help="with --scenario or --prometheus: no autoscaler; every node of the pool (with --prometheus: the "
                        "cluster's own nodes) stays for the whole replay, as in a cluster of fixed size")
    p.add_argument("--trace", default=None, choices=("openb", "embedded"),
                   help="a single run (no autoscaler, one seed) of openb: ../shared/data openb + Bitbrains, or embedded: "
                        "the openb/Bitbrains excerpt shipped in kso/data")
    p.add_argument("--nodes", type=int, default=None, help="nodes to sample (default 100; not for the embedded "
                   "excerpts, which have their own 40)")
    p.add_argument("--hours", type=float, default=None, help="replay length (default 4; at most what the scenario holds)")
    p.add_argument("--seed", type=int, default=None, help="single run (--trace): trace sampling, usage join and tie-breaks")
    p.add_argument("--out", default="bench-report", help="folder for report.md and the plots")
    p.add_argument("--u-star", type=float, default=None, help="single run: overload threshold, fraction of allocatable "
                   "(default 0.9)")
    p.add_argument("--target-load", type=float, default=None,
                   help="time-averaged requested load the scenario's pods reach, fraction of the pool's capacity "
                        "(default 0.75 for --trace openb, 0.6 for --scenario google-*; fixed in the embedded excerpts)")
    p.add_argument("--start-hour", type=float, default=None, help="single run: time of day of the Bitbrains profiles at "
                   "replay start (default 9)")
    p.add_argument("--kso-stats", default=None, choices=("forecast", "window"),
                   help="single run: kso's node annotations: forecaster std/mean (default) or the 15-minute window only")
    p.add_argument("--kso-env", default="",
                   help="single run: extender settings for the kso policies, e.g. 'KSO_AGENTS=safe;SAFEPERCENTILE=10' "
                        "(with --scenario: per policy, kso-inproc:env=K=V&K=V)")
    p.add_argument("--no-sampling", action="store_true", help="single run: score every feasible node")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--start", choices=("cold", "warm"), default="cold",
                   help="cold (default): every policy places the trace from step 0 on an empty cluster; warm: "
                        "kube-scheduler's default (LeastAllocated, the 'default' policy) runs the warm-up (the first "
                        "hour, at most a quarter of the replay, never scored), then each policy takes over the running "
                        "cluster, as when kso is installed into one; the report names it")


FIXED_POOL = "fixed pool (--fixed-size): no autoscaler; every node of the scenario stays for the whole replay"


def _given(args: argparse.Namespace, *names: str) -> list[str]:
    flags = []
    for name in names:
        value = getattr(args, name)
        if value not in (None, False, ""):
            flags.append("--" + name.replace("_", "-"))
    return flags


def check_history_options(args: argparse.Namespace) -> str | None:
    """``--prometheus``'s share of ``check_options``: what cannot go with it."""
    prometheus = getattr(args, "prometheus", "")
    if not prometheus:
        given = [f for f, v in (("--from", getattr(args, "history_from", None)), ("--to", getattr(args, "history_to", None)),
                                ("--step", getattr(args, "history_step", None))) if v is not None]
        return f"{', '.join(given)}: only with --prometheus URL" if given else None
    if args.scenario or args.trace is not None:
        return "--prometheus replays the cluster's own history: drop --scenario / --trace"
    if bad := _given(args, "nodes", "hours", "target_load", "seeds", "seed_from", "seed", "u_star", "start_hour",
                     "kso_stats", "kso_env", "no_sampling"):
        return (f"{', '.join(dict.fromkeys(bad))}: a history has its own nodes, pods and length (one replay per policy; "
                "--from/--to/--step choose the history)")
    if args.history_from is None:
        return "--prometheus needs --from (RFC3339 such as 2026-11-20T00:00:00Z, or relative such as -7d)"
    if args.executor == "ray" and args.jobs is not None:
        return "--jobs sets local worker processes; with --executor ray each cell is a 1-CPU Ray task"
    return None


def check_options(args: argparse.Namespace) -> str | None:
    """The reason an option cannot apply to the run asked for, or None. Fills in the defaults."""
    if (problem := check_history_options(args)) is not None:
        return problem
    if getattr(args, "prometheus", ""):
        args.jobs = 1 if args.jobs is None else args.jobs
        args.executor = args.executor or "local"
        return "--jobs must be at least 1" if args.jobs < 1 else None
    if not args.scenario and args.trace is None:
        if args.nodes is not None or args.target_load is not None:
            return "--nodes / --target-load need a sampled scenario: add --trace openb or --scenario google-rightsized"
        args.scenario = DEFAULT_SCENARIO
        args.default_scenario = True
    if args.scenario:
        kinds = [k.strip() for k in args.scenario.split(",") if k.strip()]
        if unknown := [k for k in kinds if k not in SCENARIOS]:
            return f"--scenario: unknown {', '.join(unknown)} (known: {', '.join(SCENARIOS)})"
        if args.trace is not None:
            return "--trace picks a single run; with --scenario the scenario names the trace (drop one of the two)"
        if bad := _given(args, "seed", "u_star", "start_hour", "kso_stats", "kso_env", "no_sampling"):
            return (f"{', '.join(bad)}: single-run options (--trace), they do not apply with --scenario (the seeds are "
                    "--seeds/--seed-from; kso settings go in the spec: kso-inproc:env=K=V)")
        own = [k for k in kinds if k in OWN_NODES]
        if own and len(own) == len(kinds) and (bad := _given(args, "nodes", "target_load")):
            return f"{', '.join(bad)}: {', '.join(own)} ha{'s' if len(own) == 1 else 've'} its own 40 nodes and load"
        fixed = [k for k in kinds if k in FIXED_EXCERPTS]
        if fixed and len(fixed) == len(kinds) and ((args.seeds not in (None, 1)) or args.seed_from not in (None, 0)):
            return (f"--seeds/--seed-from: {', '.join(fixed)} is one fixed excerpt (seed 0); more seeds need "
                    "--scenario google-rightsized")
        if args.executor == "ray" and args.jobs is not None:
            return "--jobs sets local worker processes; with --executor ray each cell is a 1-CPU Ray task"
        for key, value in SCENARIO_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        if args.seeds < 1 or args.jobs < 1:
            return "--seeds and --jobs must be at least 1"
        args.target_load = 0.6 if args.target_load is None else args.target_load
    else:
        if getattr(args, "fixed_size", False):
            return "--fixed-size: a --trace run is already one replay on a fixed pool (no autoscaler)"
        if bad := _given(args, "seeds", "seed_from", "jobs", "executor", "report_only", "sweep"):
            return f"{', '.join(bad)}: only with --scenario (a --trace run is one seed, in this process)"
        if args.trace == "embedded" and (bad := _given(args, "nodes", "target_load")):
            return f"{', '.join(bad)}: the embedded excerpt has its own 40 nodes and load (use --trace openb)"
        for key, value in SINGLE_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        args.target_load = 0.75 if args.target_load is None else args.target_load
    if args.hours <= 0:
        return "--hours must be positive"
    return None


def usage_error(args: argparse.Namespace, message: str) -> int:
    """argparse's error (usage, the message, exit 2) from the parser the options came from."""
    parser = getattr(args, "bench_parser", None)
    if parser is not None:
        parser.error(message)  # raises SystemExit(2)
    print(f"kso bench: error: {message}", file=sys.stderr)
    return 2


def _short(hours: float, scenario: Any) -> str | None:
    have = scenario.n_steps * scenario.step_s / 3600.0
    if have + 1e-9 < hours:
        return f"--hours {hours:g}: {scenario.name} holds {have:g} h; ask for at most that"
    return None


def run_bench(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    from benchmarks.sim.engine import run
    from benchmarks.sim.metrics import compute
    from benchmarks.sim.policies import POLICIES, make_policy
    from benchmarks.sim.report import machine_line, terminal_table, write_report
    from benchmarks.sim.runner import parse_spec
    from benchmarks.sim.trace import build_scenario

    if (problem := check_options(args)) is not None:
        return usage_error(args, problem)
    if getattr(args, "prometheus", ""):
        return run_history(args, argv)
    if args.scenario:
        return run_scenarios(args, argv)
    try:
        specs = policy_specs(args.policies or DEFAULT_POLICIES, POLICIES)
    except ValueError as exc:
        return usage_error(args, str(exc))
    logging.getLogger("kso").setLevel(logging.ERROR)  # the offline binder's one-time warning is expected here
    t0 = time.perf_counter()
    scenario = build_scenario(args.trace, args.nodes, args.hours, args.seed, args.target_load, args.start_hour)
    if (problem := _short(args.hours, scenario)) is not None:
        return usage_error(args, problem)
    print(f"scenario built in {time.perf_counter() - t0:.1f} s: {scenario.describe()}", file=sys.stderr)
    results = []
    for spec in specs:
        name, kwargs = parse_spec(spec)
        kwargs["sample"] = not args.no_sampling
        if name.startswith("kso") and name != "kso-plan":
            kwargs.setdefault("stats", args.kso_stats)
            if args.kso_env:
                kwargs["env"] = dict(item.split("=", 1) for item in args.kso_env.split(";") if "=" in item)
        policy = make_policy(name, args.seed, **kwargs)
        policy.name = spec if ":" in spec else policy.name
        warm = make_policy("default", args.seed) if args.start == "warm" else None
        result = run(scenario, policy, Progress(spec), warm_start=warm)
        results.append(compute(result, args.u_star))
    print(terminal_table(results, scenario))
    print(f"machine: {machine_line()}")
    command = "kso bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    path = write_report(results, scenario, Path(args.out), command, with_plots=not args.no_plots)
    print(f"report: {path}")
    return 0


def fluid_bounds(kinds: list[str], seeds: dict[str, list[int]], args: argparse.Namespace,
                 rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The fluid lower bound's node-hours per scenario and seed, scored from the cells' warm-up step on."""
    from benchmarks.sim.bound import fluid_bound
    from benchmarks.sim.metrics import DEFAULT_U_STAR
    from benchmarks.sim.runner import scenario_for

    out: dict[str, list[float]] = {}
    for kind in kinds:
        for seed in seeds[kind]:
            warm = {int(r["warmup_steps"]) for r in rows if r["scenario"] == kind and r.get("seed") == seed
                    and isinstance(r.get("warmup_steps"), int | float)}
            s = scenario_for(kind, args.nodes, args.hours, seed, args.target_load)
            out.setdefault(kind, []).append(fluid_bound(s, DEFAULT_U_STAR, from_step=min(warm, default=0)).best_node_hours)
    scenario_for.cache_clear()  # a 500-node day is hundreds of MB; the report needs only these numbers
    return out


def pool_short(kind: str, seed: int, args: argparse.Namespace, rows: list[dict[str, Any]]) -> Any:
    """U* -> (steps the whole pool cannot keep demand under U*, steps scored, the resource that binds), from the
    fluid bound of the scenario's first seed over the cells' scored steps: why a lower U* can do worse."""
    from benchmarks.sim.bound import fluid_bound
    from benchmarks.sim.runner import scenario_for

    warm = min((int(r["warmup_steps"]) for r in rows if r["scenario"] == kind
                and isinstance(r.get("warmup_steps"), int | float)), default=0)

    def short(u_star: float) -> tuple[int, int, str]:
        s = scenario_for(kind, args.nodes, args.hours, seed, args.target_load)
        b = fluid_bound(s, u_star, from_step=warm)
        res = max((k for k in b.binding if k.endswith("demand")), key=lambda k: b.binding[k]).split()[0]
        return b.short_steps, s.n_steps - warm, res

    return short


def run_scenarios(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Every scenario x seed x policy with the autoscaler (local processes or Ray), then the cost-harm report."""
    from benchmarks.sim.bench_report import write_bench_report
    from benchmarks.sim.engine import Autoscaler
    from benchmarks.sim.policies import POLICIES
    from benchmarks.sim.runner import Cell, read_rows, run_cells, scenario_for

    try:
        specs = policy_specs(args.policies or SCENARIO_POLICIES, POLICIES)
    except ValueError as exc:
        return usage_error(args, str(exc))
    if args.sweep:
        specs += [p for p in SWEEPS["frontier"] if p not in specs]
    if args.executor == "ray" and not args.report_only:
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError:
            return usage_error(args, "--executor ray needs ray: pip install 'kube-safe-optimizer[ray]' (or pip install ray)")
    kinds = [k.strip() for k in args.scenario.split(",") if k.strip()]
    asked = list(range(args.seed_from, args.seed_from + args.seeds))
    seeds = {k: [0] if k in FIXED_EXCERPTS else asked for k in kinds}
    out = Path(args.out)
    notes, sources = {}, ()
    for kind in kinds:
        try:
            s = scenario_for(kind, args.nodes, args.hours, seeds[kind][0], args.target_load)
        except ValueError as exc:  # e.g. more hours than the trace's jobs hold
            return usage_error(args, f"--scenario {kind}: {exc}")
        if (problem := _short(args.hours, s)) is not None:
            return usage_error(args, problem)
        notes[kind] = [s.describe(), *s.notes]
        sources = s.sources
        print(f"{kind}: {s.describe()}", file=sys.stderr)
        if kind in FIXED_EXCERPTS and len(kinds) > 1:
            print(f"{kind}: one fixed excerpt, seed 0 only; the other scenarios run seeds {asked[0]}..{asked[-1]}",
                  file=sys.stderr)
        if kind in OWN_NODES and len(kinds) > 1:
            print(f"{kind}: its own {s.n_nodes} nodes and load (--nodes / --target-load are for the others)", file=sys.stderr)
    if getattr(args, "default_scenario", False):
        print(f"no --scenario or --trace: the default, --scenario {DEFAULT_SCENARIO}", file=sys.stderr)
    start = getattr(args, "start", "cold")
    autoscale = not getattr(args, "fixed_size", False)
    pool = "autoscaler" if autoscale else "fixed"
    cells = [Cell(k, args.nodes, args.hours, seed, args.target_load, p, start, autoscale)
             for k in kinds for seed in seeds[k] for p in specs]
    where = "Ray tasks" if args.executor == "ray" else f"{args.jobs} process(es)"
    print(f"{len(cells)} replays ({' + '.join(f'{k}: {len(seeds[k])} seed(s)' for k in kinds)}, x {len(specs)} "
          f"policies) as {where}; rows written to {out / 'cells.jsonl'}", file=sys.stderr)
    if args.report_only:
        rows = [r for r in read_rows(out) if r["scenario"] in kinds and r["policy"] in specs
                and r.get("start", "cold") == start and r.get("pool", "autoscaler") == pool]
        print(f"report only: {len(rows)} finished rows of {len(cells)} cells in {out / 'cells.jsonl'}", file=sys.stderr)
    else:
        rows = run_cells(cells, out, args.jobs, executor=args.executor)
    given = argv if argv is not None else sys.argv[1:]
    command = "kso bench " + " ".join(shlex.quote(a) for a in (given[1:] if given[:1] == ["bench"] else given))
    bounds = fluid_bounds(kinds, seeds, args, rows)
    rows += getattr(args, "actual_rows", [])  # --prometheus: what the cluster actually ran, beside every policy
    engine = Autoscaler().describe() if autoscale else FIXED_POOL
    path = write_bench_report(rows, out, notes, sources, engine, command, specs, not args.no_plots,
                              bounds=bounds, appendix=getattr(args, "appendix", ()),
                              pool_short={k: pool_short(k, seeds[k][0], args, rows) for k in kinds},
                              **({"title": args.report_title} if getattr(args, "report_title", "") else {}))
    print(path.read_text().split("### Harm per policy")[0])
    print(f"report: {path}")
    if failed := sum("error" in r for r in rows):
        print(f"kso bench: {failed} cell(s) failed (listed in the report)", file=sys.stderr)
        return 1
    return 0


def short_cause(cause: str) -> str:
    """A connection error's cause without urllib3's pool and URL details."""
    for marker, text in (("Connection refused", "connection refused"), ("Name or service not known", "unknown host"),
                         ("timed out", "timed out"), ("No route to host", "no route to host")):
        if marker in cause:
            return f"{cause.split(':')[0]}: {text}"
    return cause[:300]


def _actual_run(args: argparse.Namespace, meta: dict[str, Any] | None, start: float, step: float, s: Any) -> Any:
    """What the cluster ran, measured on its history from the replay's warm-up on (with --report-only: as saved);
    None, said on stderr, when the history cannot give it (the replay's rows still stand)."""
    from benchmarks.sim.engine import EngineRules
    from benchmarks.sim.history_actual import ActualRun, measure_actual
    from forecasting.prometheus import PrometheusError

    if meta is not None:
        return ActualRun(**meta["actual"]) if meta.get("actual") else None
    try:
        return measure_actual(args.prometheus, start, step, s.n_steps, EngineRules().warmup_steps(s.step_s, s.n_steps))
    except PrometheusError as exc:  # PrometheusUnavailable too: the history was just read, so rare
        print(f"kso bench: the cluster's own row is left out: {short_cause(str(exc))}", file=sys.stderr)
        return None


HISTORY_FILE = "history-scenario.npz"  # in --out: the built scenario, loaded by every cell's process
HISTORY_INFO = "history.json"  # in --out: its gaps and assumptions, for --report-only


def run_history(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """``--prometheus``: build the scenario from the history (or, with --report-only, load the one in --out), save
    it for the cells, then the same cells and report as ``--scenario``, with the gaps and assumptions added and a
    row for what the cluster actually ran (benchmarks/sim/history_actual.py)."""
    import dataclasses
    import json
    import os

    from benchmarks.sim.prometheus_history import (
        History,
        HistoryError,
        build_history,
        load_scenario,
        parse_duration,
        parse_time,
        save_scenario,
    )
    from benchmarks.sim.runner import HISTORY_ENV, scenario_for
    from forecasting.prometheus import PrometheusError, PrometheusUnavailable

    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # its retry warning; the error says it all
    out = Path(args.out)
    path, info = out / HISTORY_FILE, out / HISTORY_INFO
    try:
        now = time.time()
        start = parse_time(args.history_from, now)
        end = parse_time(args.history_to or "now", now)
        step = parse_duration(args.history_step or "5m")
    except HistoryError as exc:
        print(f"kso bench: error: {exc}", file=sys.stderr)
        return 2
    if args.report_only:
        if not path.exists() or not info.exists():
            print(f"kso bench: error: --report-only: no {path} / {info} (a --prometheus run writes them)", file=sys.stderr)
            return 2
        meta = json.loads(info.read_text())
        history = History(load_scenario(path), meta["gaps"], meta["assumptions"], meta["queries"], meta["points"],
                          meta["seconds"])
    else:
        try:
            history = build_history(args.prometheus, start, end, step)
        except HistoryError as exc:
            print(f"kso bench: error: {exc}", file=sys.stderr)
            return 2 if "not before" in str(exc) or "shorter than" in str(exc) or "--step" in str(exc) else 1
        except PrometheusUnavailable as exc:
            print(f"kso bench: error: Prometheus at {exc.url} unavailable: {short_cause(exc.cause)}", file=sys.stderr)
            return 1
        except PrometheusError as exc:
            print(f"kso bench: error: {exc}", file=sys.stderr)
            return 1
        save_scenario(history.scenario, path)
        info.write_text(json.dumps({"gaps": history.gaps, "assumptions": history.assumptions, "queries": history.queries,
                                    "points": history.points, "seconds": history.seconds}, indent=1))
        print(f"history built in {history.seconds:.1f} s ({history.queries} queries, {history.points:,} points): "
              f"{len(history.gaps)} gap(s) listed in the report; saved to {path}", file=sys.stderr)
    s = history.scenario
    actual = _actual_run(args, meta if args.report_only else None, start, step, s)
    if actual is not None and not args.report_only:
        info.write_text(json.dumps({**json.loads(info.read_text()), "actual": dataclasses.asdict(actual)}, indent=1))
    hours = s.n_steps * s.step_s / 3600.0
    args.actual_rows = [actual.row("history", s.n_nodes, hours, actual.from_step)] if actual is not None else []
    args.scenario, args.seeds, args.seed_from = "history", 1, 0
    args.nodes, args.hours, args.target_load = s.n_nodes, s.n_steps * s.step_s / 3600.0, 0.0
    args.appendix = history.markdown()
    args.report_title = f"kso bench: replay of the cluster's own history ({args.prometheus}), cost against harm"
    before = os.environ.get(HISTORY_ENV)
    os.environ[HISTORY_ENV] = str(path.resolve())  # the cells' processes (forked, or Ray's) load it from there
    scenario_for.cache_clear()
    try:
        return run_scenarios(args, argv)
    finally:  # the run's own: a caller in the same process (a test, kso demo) keeps its environment
        scenario_for.cache_clear()
        if before is None:
            os.environ.pop(HISTORY_ENV, None)
        else:
            os.environ[HISTORY_ENV] = before


def add_commands(subparsers: Any) -> None:
    """Register ``kso bench`` on the ``kso`` command's subparsers."""
    p = subparsers.add_parser("bench", help="replay a trace through the default scheduler, the peers, kso and the oracle "
                                            "reference, and write the cost-harm report", description=__doc__)
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
