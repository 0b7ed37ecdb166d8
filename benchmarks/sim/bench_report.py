"""The multi-seed report: tables with 95% intervals, the trade-off plot (provisioned node-hours vs overload
episodes, one curve per policy family over its packing knob), and the issue's aims checked as measured."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.sim.report import machine_line
from benchmarks.sim.runner import aggregate

COLUMNS = (("overload_episodes", "overload episodes", 0), ("overload_node_steps", "overload node-steps", 0),
           ("unmet_cpu_core_min", "unmet cpu core-min", 0), ("oom_kills", "OOM kills", 0),
           ("provisioned_node_hours", "node-hours", 1), ("pending_mean", "pending pods (mean)", 1),
           ("pending_p95_min", "p95 pending min", 0), ("failed", "pods deleted while pending", 0), ("pods_moved", "moves", 0),
           ("ca_evictions", "CA evictions", 0))


KNOBS = ("target", "cpu_threshold", "SAFEUTILIZATION")  # each policy's packing knob: the points of one curve


def family(policy: str) -> str:
    """The curve a policy spec belongs to: its knob points share one line in the trade-off plot; any other
    setting (kso's stats, prior, eps) makes its own curve."""
    from benchmarks.sim.runner import parse_spec

    name, kwargs = parse_spec(policy)
    if name in ("default", "default-most"):
        return "default (Least/MostAllocated)"
    env = {k: v for k, v in (kwargs.pop("env", None) or {}).items() if k not in KNOBS}
    rest = [f"{k}={v}" for k, v in sorted(kwargs.items()) if k not in KNOBS] + [f"{k}={v}" for k, v in sorted(env.items())]
    return f"{name} ({', '.join(rest)})" if rest else name


def knob(policy: str) -> str:
    """A point's label on its curve: the knob's value, or the policy's name."""
    from benchmarks.sim.runner import parse_spec

    name, kwargs = parse_spec(policy)
    values = {**kwargs, **(kwargs.get("env") or {})}
    got = [f"{k}={values[k]:g}" if isinstance(values[k], float) else f"{k}={values[k]}" for k in KNOBS if k in values]
    return ", ".join(got) or name


def fmt(mean: float, half: float, digits: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" if math.isnan(half) else f"{mean:.{digits}f} ± {half:.{digits}f}"


def table(agg: dict[tuple[str, str], dict[str, tuple[float, float, int]]], scenario: str, policies: Sequence[str]) -> str:
    head = ["policy", "seeds", *(label for _, label, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for p in policies:
        a = agg.get((scenario, p))
        if a is None:
            continue
        cells = [fmt(*a[m][:2], d) for m, _, d in COLUMNS]
        lines.append(f"| {p} | {a['overload_episodes'][2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def aims(agg: dict[tuple[str, str], dict[str, tuple[float, float, int]]], scenario: str, policies: Sequence[str]) -> list[str]:
    """The issue's aims, measured on means (intervals in the table): met or not, per kso policy point."""
    most, least = agg.get((scenario, "default-most")), agg.get((scenario, "default"))
    out = []
    for p in policies:
        if not p.startswith("kso") or (scenario, p) not in agg:
            continue
        a = agg[(scenario, p)]
        nh, ep, unmet, oom = (a[m][0] for m in ("provisioned_node_hours", "overload_episodes", "unmet_cpu_core_min",
                                                   "oom_kills"))
        gone = a["failed"][0]  # the aims do not count pods that never ran: said beside them
        if most is not None:
            m_nh, m_ep, m_unmet, m_oom = (most[m][0] for m in ("provisioned_node_hours", "overload_episodes",
                                                               "unmet_cpu_core_min", "oom_kills"))
            ok = nh <= m_nh and ep <= 0.5 * m_ep and unmet <= 0.5 * m_unmet and oom <= m_oom
            vacuous = " (MostAllocated has no episode and no unmet cpu here: only node-hours and OOM decide)" \
                if m_ep == 0 and m_unmet == 0 else ""
            out.append(f"- `{p}` vs default MostAllocated: node-hours {nh:.0f} vs {m_nh:.0f}, episodes {ep:.1f} vs {m_ep:.1f}, "
                       f"unmet cpu {unmet:.0f} vs {m_unmet:.0f} core-min, OOM kills {oom:.0f} vs {m_oom:.0f}: "
                       "aim 1 (no more node-hours, >= 50% fewer episodes and unmet cpu, no more OOM) "
                       f"**{'met' if ok else 'not met'}**{vacuous}; pods deleted while pending {gone:.0f} vs "
                       f"{most['failed'][0]:.0f}")
        if least is not None:
            l_nh, l_ep = least["provisioned_node_hours"][0], least["overload_episodes"][0]
            ok = ep <= l_ep and nh <= 0.85 * l_nh
            out.append(f"- `{p}` vs default LeastAllocated: episodes {ep:.1f} vs {l_ep:.1f}, node-hours {nh:.0f} vs {l_nh:.0f} "
                       f"({(nh / l_nh - 1) if l_nh else math.nan:+.1%}): aim 2 (no more episodes, >= 15% fewer node-hours) "
                       f"**{'met' if ok else 'not met'}**; pods deleted while pending {gone:.0f} vs {least['failed'][0]:.0f}")
    return out


def frontier_note(agg: dict[tuple[str, str], dict[str, tuple[float, float, int]]], scenario: str) -> str:
    """Aim 3 as measured: is every peer point dominated by some kso point (fewer or equal node-hours and episodes)?"""
    pts = {p: (a["provisioned_node_hours"][0], a["overload_episodes"][0]) for (s, p), a in agg.items() if s == scenario}
    kso = {p: v for p, v in pts.items() if p.startswith("kso")}
    peers = {p: v for p, v in pts.items() if not p.startswith("kso")}
    if not kso or not peers:
        return "aim 3: not measurable (no kso or no peer points)"
    undominated = [p for p, (nh, ep) in peers.items() if not any(k_nh <= nh and k_ep <= ep for k_nh, k_ep in kso.values())]
    if not undominated:
        return "aim 3 (kso's curve below every peer's): **met** on means: every peer point has a kso point with no more " \
               "node-hours and no more overload episodes"
    return ("aim 3 (kso's curve below every peer's): **not met** on means: no kso point has both no more node-hours and no "
            f"more episodes than {', '.join(f'`{p}`' for p in sorted(undominated))}")


def tradeoff_plot(agg: dict[tuple[str, str], dict[str, tuple[float, float, int]]], scenario: str, path: Path,
                  title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, metric, label in ((axes[0], "overload_episodes", "overload episodes (runs of node-steps with demand > U* = 90%)"),
                              (axes[1], "oom_kills", "OOM kills (memory demand above allocatable)")):
        fams: dict[str, list[tuple[float, float, float, float, str]]] = {}
        for (s, p), a in agg.items():
            if s != scenario:
                continue
            nh, nh_ci, _ = a["provisioned_node_hours"]
            y, y_ci, _ = a[metric]
            fams.setdefault(family(p), []).append((nh, y, nh_ci, y_ci, p))
        for fam, pts in sorted(fams.items()):
            pts.sort()
            kso = fam.startswith("kso")
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], xerr=[0 if math.isnan(p[2]) else p[2] for p in pts],
                        yerr=[0 if math.isnan(p[3]) else p[3] for p in pts], marker="o" if kso else "s", capsize=3,
                        linewidth=2.2 if kso else 1.2, linestyle="-" if kso else "--", label=fam)
            for nh, y, _, _, p in pts:
                ax.annotate(knob(p), (nh, y), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xlabel("provisioned node-hours (autoscaler, billed)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_bench_report(rows: list[dict[str, Any]], out: Path, notes: dict[str, list[str]], sources: Sequence[str],
                       autoscaler: str, command: str, policies: Sequence[str], with_plots: bool = True) -> Path:
    agg = aggregate(rows)
    scenarios = sorted({r["scenario"] for r in rows})
    parts = ["# kso bench: trace replay, several seeds", "", f"- machine: {machine_line()}", f"- command: `{command}`",
             f"- engine: {autoscaler}; cpu throttled above allocatable (unmet cpu counted), memory above allocatable "
             "OOM-kills the pod with the largest usage over request (re-queued); overload episode = a run of consecutive "
             "node-steps whose cpu or memory demand exceeds U* = 90% of allocatable",
             "- intervals: 95% (Student t over seeds, mean ± half-width)", ""]
    errors = [r for r in rows if "error" in r]
    if errors:
        parts += ["**Failed cells:**", "",
                  *(f"- {r['scenario']} seed {r['seed']} {r['policy']}: {r['error']}" for r in errors), ""]
    for s in scenarios:
        seeds = sorted({r["seed"] for r in rows if r["scenario"] == s})
        size = next((f"{r['nodes']} nodes, {r['hours']:g} h" for r in rows if r["scenario"] == s), "")
        parts += [f"## {s} ({size}, seeds {', '.join(map(str, seeds))})", "", "Rules (every one stated):", "",
                  *(f"- {n}" for n in notes.get(s, [])), "", table(agg, s, policies), ""]
        if with_plots:
            name = f"tradeoff-{s}.png"
            tradeoff_plot(agg, s, out / name, f"{s} ({size}): provisioned node-hours vs overload episodes and OOM kills, "
                          "mean ± 95% over seeds")
            parts += [f"![trade-off {s}]({name})", ""]
        parts += ["Aims, as measured (means):", "", *aims(agg, s, policies), f"- {frontier_note(agg, s)}", ""]
    parts += ["## Data sources", "", *(f"- {src}" for src in sources), ""]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
