"""The comparison as a terminal table and as a Markdown report with plots (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.machine import machine_line  # sim/cli and bench_report import it from here
from benchmarks.sim.metrics import RunMetrics, overload_counts
from benchmarks.sim.trace import USAGE_LABEL, Scenario

SENSITIVITY_U_STARS = (0.5, 0.6, 0.7, 0.8, 0.9)

HEADERS = ("policy", "scheduled", "pending", "failed", "attempts", "overload>U*", "cpu/mem", ">100%", "sev sum",
           "sev max", "node-h", "nodes used", "frag cpu", "frag mem", "spread cpu", "util cpu", "moved", "ext p50/p99 ms",
           "wall s")


def rows(metrics: Sequence[RunMetrics]) -> list[list[str]]:
    out = []
    for m in metrics:
        lat = ", ".join(f"{v[:4]} {p50:.2f}/{p99:.2f}" for v, (p50, p99, _) in m.latency_ms.items()) or "-"
        out.append([m.policy, str(m.scheduled), str(m.pending_end), str(m.failed), str(m.attempts), str(m.overload_events),
                    f"{m.overload_cpu}/{m.overload_memory}", str(m.overload_events_100), f"{m.severity_sum:.3f}",
                    f"{m.severity_max:.3f}", f"{m.node_hours:.1f}", f"{m.nodes_in_use_mean:.1f}", f"{m.fragmentation_cpu:.1%}",
                    f"{m.fragmentation_memory:.1%}", f"{m.spread_cpu:.3f}", f"{m.mean_util_cpu:.1%}", str(m.pods_moved), lat,
                    f"{m.wall_s:.1f}"])
    return out


def sensitivity(metrics: Sequence[RunMetrics], u_stars: Sequence[float] = SENSITIVITY_U_STARS) -> list[list[str]]:
    """Overload events (node-steps above U*) at several U*, per policy."""
    return [[m.policy, *(str(int(overload_counts(m.util, u)[0].sum())) for u in u_stars)] for m in metrics]


def no_overload(metrics: Sequence[RunMetrics]) -> bool:
    return all(int(np.sum(m.per_step_overloads)) == 0 for m in metrics)


def peak_demand(m: RunMetrics) -> np.ndarray:
    """(T,) per step, the fullest node's max(cpu, memory) demand / allocatable (0 with no node)."""
    return m.util.max(axis=2).max(axis=0) if m.util.size else np.zeros(0)


def usage_share(scenario: Scenario) -> tuple[float, float]:
    """What the scenario's pods use, as a share of what they request (cpu, memory), over every pod-step they exist."""
    steps = np.arange(scenario.n_steps)
    alive = (scenario.pod_arrival[:, None] <= steps[None, :]) & (steps[None, :] < scenario.pod_departure[:, None])
    out = []
    for r, req in enumerate((scenario.pod_cpu, scenario.pod_memory)):
        used = (np.where(alive, np.nan_to_num(scenario.pod_usage[:, :, r]), 0.0) * req[:, None]).sum()
        asked = (alive * req[:, None]).sum()
        out.append(float(used / asked) if asked else 0.0)
    return out[0], out[1]


def no_overload_note(metrics: Sequence[RunMetrics], scenario: Scenario) -> str:
    """Why a run has no overload at all, in numbers (empty when some policy had one)."""
    if not metrics or not no_overload(metrics):
        return ""
    cpu, mem = usage_share(scenario)
    top = max(float(peak_demand(m).max(initial=0.0)) for m in metrics)
    return (f"No policy had a node above U* = {metrics[0].u_star:.0%} at any step (the fullest node reached {top:.0%}): "
            f"this scenario's pods use {cpu:.0%} of their cpu request and {mem:.0%} of their memory request on average "
            f"({scenario.usage_label}), so no packing here comes near U*. For a scenario where policies differ: "
            "kso bench --scenario google-embedded (real requests and usage of the same tasks, with the autoscaler).")


def terminal_table(metrics: Sequence[RunMetrics], scenario: Scenario) -> str:
    table = [list(HEADERS), *rows(metrics)]
    widths = [max(len(r[c]) for r in table) for c in range(len(HEADERS))]
    lines = [f"{scenario.describe()}", f"U* = {metrics[0].u_star:.0%}; {USAGE_LABEL}", ""]
    for i, r in enumerate(table):
        lines.append("  ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths, strict=True))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("overload events at other U* (sensitivity): " + ", ".join(f"U*={u:.0%}" for u in SENSITIVITY_U_STARS))
    for r in sensitivity(metrics):
        lines.append(f"  {r[0]:<16}" + "".join(f"{v:>10}" for v in r[1:]))
    lines.append("")
    for m in metrics:
        lines.append(f"  {m.policy}: {m.mode}{_extra(m)}")
    if note := no_overload_note(metrics, scenario):
        lines += ["", note]
    return "\n".join(lines)


def _extra(m: RunMetrics) -> str:
    if not m.extra:
        return ""
    return " (" + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in m.extra.items()) + ")"


def _md_table(headers: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out)


def plots(metrics: Sequence[RunMetrics], scenario: Scenario, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    hours = np.arange(scenario.n_steps) * scenario.step_s / 3600.0
    n = len(metrics)
    cols = min(3, n)
    rows_ = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows_, cols, figsize=(4.6 * cols, 3.4 * rows_), squeeze=False, sharey=True,
                             layout="constrained")
    im = None
    for ax, m in zip(axes.flat, metrics, strict=False):
        im = ax.imshow(m.util.max(axis=2), aspect="auto", origin="lower", vmin=0.0, vmax=1.0, cmap="magma",
                       extent=(0, scenario.n_steps * scenario.step_s / 3600.0, 0, scenario.n_nodes), interpolation="nearest")
        ax.set_title(f"{m.policy}: {m.overload_events} node-steps > U*", fontsize=9)
        ax.set_xlabel("hours")
        ax.set_ylabel("node")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if im is not None:
        fig.colorbar(im, ax=axes.ravel().tolist(), label="max(cpu, memory) utilisation (true usage)")
    fig.suptitle(f"{scenario.name}: node utilisation ({USAGE_LABEL})", fontsize=9)
    files.append("heatmap.png")
    fig.savefig(out / files[-1], dpi=110)
    plt.close(fig)
    u_star = metrics[0].u_star
    none_over = no_overload(metrics)
    for fname, attr, ylabel in (("overloads.png", "per_step_overloads", f"nodes above U*={u_star:.0%} (lower is better)"),
                                ("nodes_in_use.png", "per_step_nodes_in_use", "nodes with at least one pod")):
        fig, ax = plt.subplots(figsize=(8, 3.6))
        title = f"{scenario.name} ({scenario.usage_label})"
        if attr == "per_step_overloads" and none_over:
            # every policy's count is 0 at every step: a flat line says nothing; how close the fullest node came does
            for m in metrics:
                ax.step(hours, peak_demand(m), where="post", label=m.policy)
            ax.axhline(u_star, color="black", linestyle="--", linewidth=1, label=f"U* = {u_star:.0%}")
            ylabel = "fullest node's demand / allocatable"
            title = f"no node above U* = {u_star:.0%} for any policy: the fullest node's demand per step\n{title}"
        else:
            for m in metrics:
                ax.step(hours, getattr(m, attr), where="post", label=m.policy)
        ax.set_xlabel("hours since replay start")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8, ncol=2)
        ax.set_title(title, fontsize=9)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
        files.append(fname)
    return files


def write_report(metrics: Sequence[RunMetrics], scenario: Scenario, out: Path, command: str = "",
                 with_plots: bool = True) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    images = plots(metrics, scenario, out) if with_plots else []
    parts = [
        f"# Trace replay: {scenario.name}",
        "",
        f"**{USAGE_LABEL}.** Nodes, requests and arrival/departure times are real (openb); what each pod *uses* is "
        "a Bitbrains VM's utilisation profile attached to it by a seeded synthetic join.",
        "",
        f"- scenario: {scenario.describe()}",
        *(f"- {note}" for note in scenario.notes),
        f"- U* = {metrics[0].u_star:.0%} (overload event = a node-step whose true cpu or memory usage exceeds U* of "
        "allocatable); severity = excess over U* in fractions of capacity",
        f"- machine: {machine_line()}",
        *([f"- command: `{command}`"] if command else []),
        "",
        "## Results (same trace, same seed, one run per policy)",
        "",
        _md_table(HEADERS, rows(metrics)),
        "",
        "pending = never placed and still waiting at the end; failed = never placed, left the trace while pending; "
        "frag = free capacity on used nodes that cannot hold the median pod, as a share of free capacity there; "
        "spread = std of cpu utilisation across used nodes; ext = extender call latency, client side.",
        "",
        *([no_overload_note(metrics, scenario), ""] if no_overload(metrics) else []),
        "## Sensitivity: overload events at other U* (same runs)",
        "",
        _md_table(["policy", *(f"U*={u:.0%}" for u in SENSITIVITY_U_STARS)], sensitivity(metrics)),
        "",
        "## How each policy ran",
        "",
        *(f"- `{m.policy}`: {m.mode}{_extra(m)}" for m in metrics),
        "",
        *(f"![{name}]({name})\n" for name in images),
        "## Data sources",
        "",
        *(f"- {src}" for src in scenario.sources),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path
