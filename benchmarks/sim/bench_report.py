"""The multi-seed report: the cost-harm frontier first (figure, which policies lie on the Pareto frontier,
kso's harm at each peer's cost), then harm and cost per policy (mean and 95% interval over seeds), then the
other counters. Cells written by an older engine lack the newer metrics: those show as n/a."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.sim.frontier import Point, cost_range, dominated_by, dominates_all, interpolate, pareto_front, undominated
from benchmarks.sim.report import machine_line
from benchmarks.sim.runner import aggregate, parse_spec

Agg = dict[tuple[str, str], dict[str, tuple[float, float, int]]]
PoolShort = Callable[[float], tuple[int, int, str]]  # U* fraction -> (steps short, steps scored, binding resource)
NAN3 = (math.nan, math.nan, 0)
ACTUAL = "actual"  # the row of what the cluster ran, measured on its history (benchmarks/sim/history_actual.py)


@dataclass(frozen=True)
class Column:
    key: str  # the metric's name in cells.jsonl
    label: str
    digits: int
    better: str = "lower"  # or "higher"

    @property
    def header(self) -> str:
        return f"{self.label} {'↓' if self.better == 'lower' else '↑'}"


BETTER_NOTE = "↓ lower is better, ↑ higher is better"
HARM = (Column("overloaded_node_hours", "overloaded node-h", 1),
        Column("overloaded_node_hours_80", "overloaded node-h at 80%", 1),
        Column("overloaded_node_hours_100", "overloaded node-h at 100%", 1),
        Column("memory_over_allocatable_node_hours", "node-h memory above allocatable", 1),
        Column("unmet_cpu_core_hours", "unmet cpu core-h", 1),
        Column("memory_overcommit_tib_hours", "memory overcommit TiB-h", 2),
        Column("pods_oom_killed", "pods OOM-killed", 0), Column("oom_kills", "OOM kills (events)", 0),
        Column("pod_hours_lost_to_kills", "pod-h lost to kills", 1), Column("pending_pod_hours", "pending pod-h", 1),
        Column("pods_never_served", "pods never served", 0), Column("pod_time_served_pct", "pod-time served %", 2, "higher"),
        Column("start_latency_p50_s", "p50 start latency s", 0), Column("start_latency_p99_s", "p99 start latency s", 0),
        Column("mem_pressure_node_hours", "memory-pressure node-h", 1),
        Column("overload_episodes", "overload episodes (secondary)", 0))
COST = (Column("provisioned_node_hours", "node-h", 1), Column("provisioned_core_hours", "core-h", 0),
        Column("provisioned_memory_tib_hours", "memory TiB-h", 2))
OTHER = (Column("overload_node_steps", "overload node-steps", 0), Column("unmet_cpu_core_min", "unmet cpu core-min", 0),
         Column("pending_mean", "pending pods (mean)", 1), Column("pending_p95_min", "p95 pending min", 0),
         Column("failed", "pods deleted while pending", 0), Column("pods_moved", "moves", 0),
         Column("ca_evictions", "CA evictions", 0), Column("scale_ups", "scale-ups", 0), Column("scale_downs", "scale-downs", 0))
COST_KEY = "provisioned_node_hours"
FRONTIER_HARMS = (("overloaded_node_hours", "overloaded node-hours"), ("pods_oom_killed", "pods OOM-killed"),
                  ("pods_never_served", "pods never served"), ("start_latency_p99_s", "p99 start latency (s)"))
ORACLE_NOTE = ("the oracle is a labelled reference, not a scheduler anyone could run: it reads each pod's true usage over "
               "the next hour and packs best-fit-decreasing so that no node passes U* in that hour, showing the pods it "
               "refuses to the autoscaler as placeholders (benchmarks/sim/policies/oracle.py); it is left out of the "
               "Pareto frontier")

KNOBS = ("target", "cpu_threshold", "SAFEUTILIZATION", "u_star")  # each policy's packing knob: the points of one curve


def family(policy: str) -> str:
    """The curve a policy spec belongs to: its knob points share one line in the frontier plot; any other
    setting (kso's stats, prior, eps) makes its own curve."""
    name, kwargs = parse_spec(policy)
    if name in ("default", "default-most"):
        return "default (Least/MostAllocated)"
    env = {k: v for k, v in (kwargs.pop("env", None) or {}).items() if k not in KNOBS}
    rest = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(kwargs.items()) if k not in KNOBS]
    rest += [f"{k}={v}" for k, v in sorted(env.items())]
    return f"{name} ({', '.join(rest)})" if rest else name


def knob(policy: str) -> str:
    """A point's label on its curve: the knob's value, or the policy's name."""
    name, kwargs = parse_spec(policy)
    values = {**kwargs, **(kwargs.get("env") or {})}
    got = [f"{k}={values[k]:g}" if isinstance(values[k], float) else f"{k}={values[k]}" for k in KNOBS if k in values]
    return ", ".join(got) or name


def _knob_value(policy: str) -> float:
    name, kwargs = parse_spec(policy)
    values = {**kwargs, **(kwargs.get("env") or {})}
    for k in KNOBS:
        try:
            return float(values[k])
        except (KeyError, ValueError):
            continue
    return {"default": 0.0, "default-most": 1.0}.get(name, math.nan)


def is_oracle(policy: str) -> bool:
    return parse_spec(policy)[0] == "oracle"


def is_kso(policy: str) -> bool:
    return parse_spec(policy)[0].startswith("kso")


def fmt(mean: float, half: float, digits: int) -> str:
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def seeds_of(agg: Agg, scenario: str) -> int:
    """The most seeds any policy of the scenario has (the interval's n)."""
    return max((max((n for _, _, n in a.values()), default=0) for (s, _), a in agg.items() if s == scenario), default=0)


def interval_note(n_seeds: int) -> str:
    return "one seed: no interval" if n_seeds <= 1 else f"mean ± 95% over {n_seeds} seeds (Student t)"


def ordered(agg: Agg, scenario: str, policies: Sequence[str]) -> list[str]:
    """The requested policies in their order, then any other policy the rows have (report-only runs)."""
    have = [p for (s, p) in agg if s == scenario]
    return [p for p in policies if p in have] + sorted(p for p in have if p not in policies)


def table(agg: Agg, scenario: str, policies: Sequence[str], columns: Sequence[Column] = HARM) -> str:
    head = ["policy", "seeds", *(c.header for c in columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for p in ordered(agg, scenario, policies):
        a = agg[(scenario, p)]
        cells = [fmt(*a.get(c.key, NAN3)[:2], c.digits) for c in columns]
        label = f"{p} (reference)" if is_oracle(p) else f"{p} (measured: the cluster's history)" if p == ACTUAL else p
        n = max((m[2] for m in a.values()), default=0)
        lines.append(f"| {label} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def frontier_points(agg: Agg, scenario: str, harm: str) -> list[Point]:
    out = []
    for (s, p), a in sorted(agg.items()):
        if s != scenario:
            continue
        c, c_ci, _ = a.get(COST_KEY, NAN3)
        h, h_ci, _ = a.get(harm, NAN3)
        out.append(Point(p, family(p), c, h, c_ci, h_ci))
    return out


def _finite(p: Point) -> bool:
    return math.isfinite(p.cost) and math.isfinite(p.harm)


def frontier_lines(agg: Agg, scenario: str, harm: str, harm_label: str) -> list[str]:
    """The Pareto statement for one harm metric (means), the oracle's place, and kso's harm at each peer's cost."""
    pts = [p for p in frontier_points(agg, scenario, harm) if _finite(p)]
    runnable = [p for p in pts if not is_oracle(p.label)]
    if not runnable:
        return [f"- {harm_label}: n/a (the cells have no `{harm}` or no `{COST_KEY}`: written by an older engine)"]
    xy = [(p.cost, p.harm) for p in runnable]
    front = pareto_front(xy)
    on = [f"`{p.label}`" for p, f in zip(runnable, front, strict=True) if f]
    out = [f"- **Pareto frontier, cost = provisioned node-hours vs harm = {harm_label}** (means; a point is on it when "
           f"no other point has no more cost and no more harm, one of them strictly less): {', '.join(on)}"]
    dominated = [f"`{p.label}` (by {', '.join(f'`{runnable[j].label}`' for j in dominated_by(xy, i))})"
                 for i, (p, f) in enumerate(zip(runnable, front, strict=True)) if not f]
    if dominated:
        out.append(f"  - dominated: {'; '.join(dominated)}")
    for o in (p for p in pts if is_oracle(p.label)):
        beaten = sum(1 for q in runnable if (o.cost, o.harm) != (q.cost, q.harm) and o.cost <= q.cost and o.harm <= q.harm)
        out.append(f"  - `{o.label}` (reference, not runnable): {o.cost:.1f} node-h, {harm_label} {o.harm:.1f}; "
                   f"it dominates {beaten} of the {len(runnable)} runnable points")
    return out


# Every axis at once, so that no single harm can be bought with another: cost, the frontier harms, pod-time served
# (higher is better: negated), pods never served and the p99 start latency. A policy that refuses or holds pods looks
# cheap and safe on the two-axis frontiers; here the pods it never served and the time they waited count against it.
ALL_AXES = (("provisioned_node_hours", 1.0), ("overloaded_node_hours", 1.0), ("pods_oom_killed", 1.0),
            ("pod_time_served_pct", -1.0), ("pods_never_served", 1.0), ("start_latency_p99_s", 1.0))
AXIS_LABELS = {"provisioned_node_hours": "node-hours", "overloaded_node_hours": "overloaded node-hours",
               "pods_oom_killed": "pods OOM-killed", "pod_time_served_pct": "pod-time served",
               "pods_never_served": "pods never served", "start_latency_p99_s": "p99 start latency"}
ALL_AXES_LABEL = ", ".join(AXIS_LABELS[k] for k, _ in ALL_AXES[:-1]) + f" and {AXIS_LABELS[ALL_AXES[-1][0]]}"


def axes_of(agg: Agg, scenario: str) -> tuple[tuple[str, float], ...]:
    """``ALL_AXES`` less the ones no row of ``scenario`` has (cells written before the engine measured them)."""
    rows = [a for (s, _), a in agg.items() if s == scenario]
    return tuple((k, sign) for k, sign in ALL_AXES if any(math.isfinite(a.get(k, NAN3)[0]) for a in rows))


def axes_label(axes: Sequence[tuple[str, float]]) -> str:
    names = [AXIS_LABELS[k] for k, _ in axes]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def every_axis_lines(agg: Agg, scenario: str) -> list[str]:
    """Which runnable policies no other dominates on every axis at once, and for each peer point whether some kso
    configuration is at least as good on every axis (no more node-hours, overloaded node-hours, pods OOM-killed,
    pods never served and p99 start latency, at least its pod-time served)."""
    axes = axes_of(agg, scenario)
    rows = [(p, [sign * a.get(key, NAN3)[0] for key, sign in axes]) for (s, p), a in sorted(agg.items())
            if s == scenario and not is_oracle(p)]
    rows = [(p, v) for p, v in rows if all(math.isfinite(x) for x in v)]
    if not rows:
        return []
    front = undominated([v for _, v in rows])
    out = [f"- **Every axis at once** ({axes_label(axes)}; means): not dominated: "
           + ", ".join(f"`{p}`" for (p, _), f in zip(rows, front, strict=True) if f)]
    kso = [(p, v) for p, v in rows if is_kso(p)]
    if kso:
        for p, v in rows:
            if is_kso(p):
                continue
            by = [q for q, w in kso if w == v or dominates_all(w, v)]
            out.append(f"  - `{p}`: " + (f"matched or beaten on every axis by {', '.join(f'`{q}`' for q in by)}" if by
                                         else "no kso configuration is at least as good on every axis"))
    return out


# kso measured against a peer at the same cost: the packing default, whose node-hours kso should not exceed.
EQUAL_COST_PEER = "default-most"
EQUAL_COST_BAND = 0.02  # "the same cost": mean node-hours within +-2% of the peer's
PAIRED = (("provisioned_node_hours", "node-h"), ("overloaded_node_hours", "overloaded node-h"),
          ("pods_oom_killed", "pods OOM-killed"))
DEFAULT_KSO = "kso"  # what deploy/ ships (benchmarks/sim/policies/kso_shipped.py)


def paired_change(rows: Sequence[dict[str, Any]], scenario: str, policy: str, peer: str, key: str) -> tuple[float, float, int]:
    """``policy``'s ``key`` relative to ``peer``'s on the same seeds (value / peer's - 1): mean, 95% half-width, n. A
    seed where the peer's value is 0 is left out."""
    from benchmarks.sim.runner import mean_ci

    def per_seed(p: str) -> dict[int, float]:
        return {r["seed"]: float(r[key]) for r in rows if r["scenario"] == scenario and r["policy"] == p
                and "error" not in r and isinstance(r.get(key), int | float)}

    mine, theirs = per_seed(policy), per_seed(peer)
    return mean_ci([mine[s] / theirs[s] - 1.0 for s in sorted(mine.keys() & theirs.keys()) if theirs[s]])


def _change(c: tuple[float, float, int]) -> str:
    mean, half, _ = c
    if math.isnan(mean):
        return "n/a"
    return f"{mean:+.1%}" if math.isnan(half) else f"{mean:+.1%} ± {half:.1%}"


def aims_lines(rows: Sequence[dict[str, Any]], agg: Agg, scenario: str, peer: str = EQUAL_COST_PEER,
               band: float = EQUAL_COST_BAND) -> list[str]:
    """kso against ``peer`` at its node-hours (+-``band``), with each kso configuration's changes paired by seed; kso's
    default configuration's place; the kso configurations at or under the oracle's harm and their node-hours."""
    kso = sorted((p for (s, p) in agg if s == scenario and is_kso(p)), key=lambda p: agg[(scenario, p)][COST_KEY][0])
    out: list[str] = []
    ref = agg.get((scenario, peer))
    if kso and ref is not None and math.isfinite(ref[COST_KEY][0]):
        cost = ref[COST_KEY][0]
        near = [p for p in kso if abs(agg[(scenario, p)][COST_KEY][0] / cost - 1.0) <= band]
        out.append(f"- **At `{peer}`'s node-hours** ({cost:.1f} ± {band:.0%}: {cost * (1 - band):.1f}-"
                   f"{cost * (1 + band):.1f}): " + (", ".join(f"`{p}`" for p in near) if near else
                                                    "no kso configuration's mean is in that band")
                   + f"; each kso configuration against `{peer}` on the same seeds (value / its value - 1; "
                   f"{interval_note(seeds_of(agg, scenario))}):")
        for p in kso:
            changes = "; ".join(f"{label} {_change(paired_change(rows, scenario, p, peer, key))}" for key, label in PAIRED)
            out.append(f"  - `{p}`{' (in the band)' if p in near else ''}: {changes}")
    if (scenario, DEFAULT_KSO) in agg:
        a = agg[(scenario, DEFAULT_KSO)]
        axes = axes_of(agg, scenario)
        mine = [a.get(key, NAN3)[0] * sign for key, sign in axes]
        others = [(p, [agg[(scenario, p)].get(key, NAN3)[0] * sign for key, sign in axes])
                  for (s, p) in agg if s == scenario and p != DEFAULT_KSO and not is_oracle(p)]
        by = [p for p, v in others if dominates_all(v, mine)]
        served, never = a.get("pod_time_served_pct", NAN3), a.get("pods_never_served", NAN3)
        late = a.get("start_latency_p99_s", NAN3)
        out.append(f"- **`{DEFAULT_KSO}`, kso as deploy/ ships it**: "
                   + (f"dominated on every axis by {', '.join(f'`{p}`' for p in sorted(by))}" if by else
                      "not dominated on every axis")
                   + f"; pod-time served {fmt(served[0], served[1], 2)}%, pods never served {fmt(never[0], never[1], 0)}"
                   + (f", p99 start latency {fmt(late[0], late[1], 0)} s" if math.isfinite(late[0]) else ""))
    for (s, o) in sorted(agg):
        if s != scenario or not is_oracle(o):
            continue
        oa = agg[(s, o)]
        h, k = oa.get("overloaded_node_hours", NAN3)[0], oa.get("pods_oom_killed", NAN3)[0]
        under = [p for p in kso if agg[(s, p)].get("overloaded_node_hours", NAN3)[0] <= h
                 and agg[(s, p)].get("pods_oom_killed", NAN3)[0] <= k]
        head = (f"- **At `{o}`'s harm** ({oa[COST_KEY][0]:.1f} node-h, {h:.1f} overloaded node-h, {k:.1f} pods "
                "OOM-killed; means): ")
        if not under:
            out.append(head + "no kso configuration has no more of both harms")
        else:
            out.append(head + "kso configurations with no more of both harms, node-hours against the oracle's on the "
                       "same seeds: " + "; ".join(f"`{p}` {_change(paired_change(rows, s, p, o, COST_KEY))}"
                                                 for p in under))
    return out


def interpolation_table(agg: Agg, scenario: str, harm: str, harm_label: str) -> list[str]:
    """At each peer point's cost, each kso curve's harm, linear in cost between its neighbouring points."""
    pts = [p for p in frontier_points(agg, scenario, harm) if _finite(p) and not is_oracle(p.label)]
    curves: dict[str, list[tuple[float, float]]] = {}
    for p in pts:
        if is_kso(p.label):
            curves.setdefault(p.family, []).append((p.cost, p.harm))
    # a one-point curve interpolates nothing: its row in the tables and the every-axis check say where it stands
    curves = {f: c for f, c in curves.items() if len({cost for cost, _ in c}) > 1}
    peers = [p for p in pts if not is_kso(p.label)]
    if not curves or not peers:
        return []
    head = ["peer point", "its node-h", f"its {harm_label}", *(f"`{f}` at that node-h" for f in curves)]
    lines = [f"kso's {harm_label} at each peer's cost (means; linear in node-hours between the neighbouring points of "
             "each kso curve of two or more knob points; no extrapolation):", "",
             "| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for p in sorted(peers, key=lambda q: q.cost):
        cells = []
        for curve in curves.values():
            got = interpolate(curve, p.cost)
            if got is None:
                lo, hi = cost_range(curve)  # type: ignore[misc]
                cells.append(f"outside kso's range ({lo:.1f}-{hi:.1f} node-h)" if lo != hi else
                             f"outside kso's range (one point, {lo:.1f} node-h)")
            else:
                cells.append(f"{got:.1f} ({got - p.harm:+.1f})")
        lines.append(f"| `{p.label}` | {p.cost:.1f} | {p.harm:.1f} | " + " | ".join(cells) + " |")
    return lines


def _curve_order(points: list[Point]) -> list[Point]:
    """A curve's points in knob order (the sweep), by cost when the knob is not a number."""
    return sorted(points, key=lambda p: (_knob_value(p.label), p.cost) if not math.isnan(_knob_value(p.label))
                  else (math.inf, p.cost))


# Label placement: each point's knob label tries these offsets (points; ha, va) in turn and takes the first
# whose box overlaps no other text, marker or legend; a label that fits nowhere is left off the axes (its
# value is in the legend entry of its curve).
LABEL_OFFSETS = tuple((dx * r, dy * r, ha, va) for r in (1.0, 2.5, 4.0)
                      for dx, dy, ha, va in ((4, 4, "left", "bottom"), (4, -4, "left", "top"),
                                             (-4, 4, "right", "bottom"), (-4, -4, "right", "top"),
                                             (0, 6, "center", "bottom"), (0, -6, "center", "top")))


def frontier_figure(agg: Agg, scenario: str, title: str, bound_node_hours: float = math.nan,
                    actual: dict[str, tuple[float, float, int]] | None = None) -> Any:
    """The headline figure: per harm metric a panel of cost (x) against harm (y), one curve per policy family over
    its knob, the oracle as a star, the fluid lower bound as a vertical line, and (a history replay) what the cluster
    actually ran as a cross where its history measures that harm. Returns the matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(2, len(FRONTIER_HARMS))
    rows_ = -(-len(FRONTIER_HARMS) // cols)
    fig, grid = plt.subplots(rows_, cols, figsize=(13, 6.2 * rows_), layout="constrained", squeeze=False)
    axes = list(grid.flat)
    handles: dict[str, Any] = {}
    markers: list[list[tuple[float, float]]] = []
    labels: list[list[tuple[float, float, str]]] = []
    fams = sorted({family(p) for (s, p) in agg if s == scenario and not is_oracle(p)})
    palette = plt.get_cmap("tab10" if len(fams) <= 10 else "tab20")  # no two curves share a colour up to 20
    colors = {f: palette(i % palette.N) for i, f in enumerate(fams)}
    for ax, (harm, harm_label) in zip(axes, FRONTIER_HARMS, strict=True):
        pts = [p for p in frontier_points(agg, scenario, harm) if _finite(p)]
        ax_markers: list[tuple[float, float]] = []
        ax_labels: list[tuple[float, float, str]] = []
        extent: list[tuple[float, float]] = []  # the points with their intervals: the axes' limits
        by_fam: dict[str, list[Point]] = {}
        for p in pts:
            by_fam.setdefault("oracle" if is_oracle(p.label) else p.family, []).append(p)
        for fam, fpts in sorted(by_fam.items()):
            fpts = _curve_order(fpts)
            xs, ys = [p.cost for p in fpts], [p.harm for p in fpts]
            xerr = [0.0 if math.isnan(p.cost_ci) else p.cost_ci for p in fpts]
            yerr = [0.0 if math.isnan(p.harm_ci) else p.harm_ci for p in fpts]
            values = ", ".join(knob(p.label) for p in fpts)
            if fam == "oracle":
                values = "" if values == "oracle" else f" ({values})"
                h = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="*", markersize=13, color="black", linestyle=":",
                                capsize=3, label=f"oracle{values}: knows next-hour usage; a reference, not a scheduler")
            else:
                kso = fam.startswith("kso")
                label = fam if values == fam else f"{fam} ({values})"
                h = ax.errorbar(xs, ys, xerr=xerr, yerr=yerr, marker="o" if kso else "s", capsize=3, color=colors[fam],
                                linewidth=2.2 if kso else 1.2, linestyle="-" if kso else "--", label=label)
            handles.setdefault(fam, h)
            ax_markers += list(zip(xs, ys, strict=True))
            extent += [(x - dx, y - dy) for x, y, dx, dy in zip(xs, ys, xerr, yerr, strict=True)]
            extent += [(x + dx, y + dy) for x, y, dx, dy in zip(xs, ys, xerr, yerr, strict=True)]
            ax_labels += [(p.cost, p.harm, knob(p.label)) for p in fpts]
        ran = (actual or {}).get(COST_KEY, NAN3)[0], (actual or {}).get(harm, NAN3)[0]
        if all(math.isfinite(v) for v in ran):
            h = ax.plot(*ran, marker="X", markersize=11, color="black", linestyle="none",
                        label="what the cluster ran (its history)")[0]
            handles.setdefault(ACTUAL, h)
            ax_markers.append(ran)
            extent.append(ran)
        if math.isfinite(bound_node_hours):
            h = ax.axvline(bound_node_hours, color="grey", linestyle="-.", linewidth=1.2,
                           label=f"fluid lower bound on node-h with no node above U* ({bound_node_hours:.1f})")
            handles.setdefault("bound", h)
        xs = [x for x, _ in extent] + ([bound_node_hours] if math.isfinite(bound_node_hours) else [])
        ys = [y for _, y in extent]
        if xs and ys:
            x_lo, x_hi = min(xs), max(xs)
            y_hi = max(ys)
            pad_x = 0.08 * (x_hi - x_lo or max(abs(x_hi), 1.0))
            ax.set_xlim(x_lo - pad_x, x_hi + pad_x)
            y_lo = min(0.0, min(ys))
            ax.set_ylim(y_lo - 0.06 * (y_hi - y_lo or 1.0), y_hi + 0.12 * (y_hi - y_lo or 1.0))
        else:
            ax.text(0.5, 0.5, f"n/a: the cells have no {harm}", transform=ax.transAxes, ha="center", va="center")
        ax.set_xlabel("cost: provisioned node-hours (lower is better)")
        ax.set_ylabel(f"harm: {harm_label} (lower is better)")
        ax.set_title(f"{harm_label} against node-hours", fontsize=9)
        ax.grid(alpha=0.3)
        markers.append(ax_markers)
        labels.append(ax_labels)
    fig.suptitle(title, fontsize=9)
    if handles:
        fig.legend(list(handles.values()), [h.get_label() for h in handles.values()], loc="outside lower center",
                   ncol=2, fontsize=7, frameon=False)
    fig.canvas.draw()
    fig.set_layout_engine("none")  # the layout is fixed from here: labels are placed against final positions
    place_labels(fig, list(axes), markers, labels)
    return fig


def place_labels(fig: Any, axes: list[Any], markers: list[list[tuple[float, float]]],
                 labels: list[list[tuple[float, float, str]]]) -> int:
    """Annotate each (x, y, text) at the first offset of ``LABEL_OFFSETS`` whose box overlaps no text already on the
    figure (ticks, axis labels, titles, legend, earlier labels) and no marker; returns how many were left off."""
    from matplotlib.transforms import Bbox

    renderer = fig.canvas.get_renderer()
    taken: list[Any] = [t.get_window_extent(renderer) for t in fig.findobj(match=lambda a: hasattr(a, "get_text"))
                        if t.get_visible() and t.get_text()]
    taken += [leg.get_window_extent(renderer) for leg in fig.legends]
    left_off = 0
    for ax, ax_markers, ax_labels in zip(axes, markers, labels, strict=True):
        frame = ax.get_window_extent(renderer)
        for x, y in ax_markers:
            px, py = ax.transData.transform((x, y))
            taken.append(Bbox.from_extents(px - 5, py - 5, px + 5, py + 5))
        for x, y, text in ax_labels:
            for dx, dy, ha, va in LABEL_OFFSETS:
                ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=6, ha=ha, va=va,
                                  arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5} if abs(dx) > 6 or abs(dy) > 8
                                  else None)
                box = ann.get_window_extent(renderer)
                inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                if inside and not any(box.overlaps(t) for t in taken):
                    taken.append(box)
                    break
                ann.remove()
            else:
                left_off += 1
    return left_off


def frontier_plot(agg: Agg, scenario: str, path: Path, title: str, bound_node_hours: float = math.nan,
                  actual: dict[str, tuple[float, float, int]] | None = None) -> None:
    import matplotlib.pyplot as plt

    fig = frontier_figure(agg, scenario, title, bound_node_hours, actual)
    fig.savefig(path, dpi=120)
    plt.close(fig)


START_NOTES = {
    "cold": "cold (every policy places the trace from step 0 on an empty cluster)",
    "warm": ("warm (the cluster already ran the trace under kube-scheduler's default, LeastAllocated, for the "
             "warm-up, when each policy takes over: as when kso is installed into a running cluster)"),
}


def start_line(rows: Sequence[dict[str, Any]]) -> str:
    """The rows' start scenario (cells written before the option: cold)."""
    starts = sorted({str(r.get("start", "cold")) for r in rows if "error" not in r}) or ["cold"]
    return "; ".join(START_NOTES.get(s, s) for s in starts)


def write_bench_report(rows: list[dict[str, Any]], out: Path, notes: dict[str, list[str]], sources: Sequence[str],
                       autoscaler: str, command: str, policies: Sequence[str], with_plots: bool = True,
                       bounds: dict[str, list[float]] | None = None, appendix: Sequence[str] = (),
                       title: str = "kso bench: trace replay, cost against harm",
                       pool_short: dict[str, PoolShort] | None = None) -> Path:
    """``bounds``: scenario -> the fluid lower bound's node-hours per seed (benchmarks/sim/bound.py), scored over the
    same steps as the cells. ``appendix``: Markdown put after the scenarios (``kso demo``'s steps 1-3).
    ``pool_short``: scenario -> the fluid bound's steps short at a U* (explains a non-monotone U* sweep)."""
    from benchmarks.sim.verdict import glossary_lines, no_difference, sweep_lines, verdict_lines

    agg_all = aggregate(rows)  # the tables and the verdict: the policies and what the cluster actually ran
    agg = aggregate([r for r in rows if r["policy"] != ACTUAL])  # the frontier statements: the policies
    scenarios = sorted({r["scenario"] for r in rows})
    parts = [f"# {title}", "", "**Verdict** (computed from this run's cells, means; harms: lower is better):", ""]
    for s in scenarios:
        said = verdict_lines(agg_all, s) + sweep_lines(agg, s, (pool_short or {}).get(s))
        parts += [f"- {s}:", *(f"  {line}" for line in said)]
    parts += ["- the policies:", *glossary_lines([r["policy"] for r in rows]), ""]
    parts += [f"- machine: {machine_line()}", f"- command: `{command}`",
             f"- engine: {autoscaler}; overloaded node-hours = node-time whose cpu or memory demand exceeds U* = 90% of "
             "allocatable (also at 80% and 100%); start latency = seconds from entering the queue to starting, per "
             "start (a pod that never started is in pods never served); cost = provisioned (billed) node-hours, "
             "core-hours and memory TiB-hours",
             f"- start: {start_line(rows)}",
             f"- columns: {BETTER_NOTE}", ""]
    warm = sorted({int(r["warmup_steps"]) for r in rows if isinstance(r.get("warmup_steps"), int | float)})
    if warm:
        parts[-1:-1] = [f"- scored after a warm-up of {', '.join(map(str, warm))} step(s) of the replay (every metric, "
                        "the bound too)"]
    if any(is_oracle(r["policy"]) for r in rows):
        parts[-1:-1] = [f"- {ORACLE_NOTE}"]
    errors = [r for r in rows if "error" in r]
    if errors:
        parts += ["**Failed cells:**", "",
                  *(f"- {r['scenario']} seed {r['seed']} {r['policy']}: {r['error']}" for r in errors), ""]
    for s in scenarios:
        seeds = sorted({r["seed"] for r in rows if r["scenario"] == s})
        n = seeds_of(agg, s)
        size = next((f"{r['nodes']} nodes, {r['hours']:g} h" for r in rows if r["scenario"] == s and "nodes" in r), "")
        bound = (bounds or {}).get(s) or []
        bound_mean = sum(bound) / len(bound) if bound else math.nan
        parts += [f"## {s} ({size}, seeds {', '.join(map(str, seeds))}; {interval_note(n)})", "",
                  "### The frontier: cost against harm", ""]
        if with_plots:
            name = f"frontier-{s}.png"
            frontier_plot(agg, s, out / name, f"{s} ({size}): cost against harm, {interval_note(n)}", bound_mean,
                          agg_all.get((s, ACTUAL)))
            parts += [f"![frontier {s}]({name})", ""]
        if (same := no_difference(agg, s)) is not None:
            parts.append(f"- {same}")
        for harm, label in FRONTIER_HARMS if same is None else ():
            parts += frontier_lines(agg, s, harm, label)
        if same is None:
            parts += every_axis_lines(agg, s)
            parts += aims_lines([r for r in rows if r["scenario"] == s], agg, s)
        if math.isfinite(bound_mean):
            parts.append(f"- fluid lower bound (benchmarks/sim/bound.py, mean over {len(bound)} seed(s)): any policy with "
                         f"no node above U* provisions at least {bound_mean:.1f} node-hours")
        parts.append("")
        for harm, label in FRONTIER_HARMS if same is None else ():
            lines = interpolation_table(agg, s, harm, label)
            parts += [*lines, ""] if lines else []
        parts += [f"### Harm per policy ({interval_note(n)}; {BETTER_NOTE})", "", table(agg_all, s, policies, HARM), "",
                  f"### Cost per policy ({interval_note(n)}; {BETTER_NOTE})", "", table(agg_all, s, policies, COST), "",
                  f"### Other counters ({interval_note(n)})", "", table(agg, s, policies, OTHER), "",
                  "Rules (every one stated):", "", *(f"- {n_}" for n_ in notes.get(s, [])), ""]
    parts += [*appendix, "## Data sources", "", *(f"- {src}" for src in sources), ""]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
