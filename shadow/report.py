"""The shadow report (Markdown), rewritten periodically: how many placements kso would have changed for safety (it
refused the chosen node) and how many on score alone, how many of the nodes it warned about went over U* during the
horizon, and how many of its own picks did (its misses, in its own schedule); then kso's schedule per node, the
latest misses and the latest safety changes, one row each."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from shadow.counterfactual import NodeSchedule
from shadow.judge import NodeOutcome, Record

PLOT_POINTS = 5000

@dataclass
class Tally:
    """Counts over every bind since the start (the records themselves are bounded, these are not needed to be)."""

    seen: int = 0
    judged: int = 0
    skipped: int = 0
    unreadable: int = 0
    late: int = 0
    changed: int = 0
    changed_refused: int = 0  # of the changed, those whose chosen node kso refused
    changed_unknown: int = 0  # of the changed, those whose chosen node is not in kso's cache (the rest on score alone)
    held: int = 0
    held_warned: int = 0  # of the held, those whose chosen node kso refused
    warned: int = 0
    unknown_node: int = 0  # chosen node not in kso's node cache: not judged
    dropped: int = 0
    judge_seconds: float = 0.0
    # outcomes: (role, what kso said of the chosen node: Record.verdict) -> [over, under, no_data]
    outcomes: dict[tuple[str, bool | None], list[int]] = field(default_factory=dict)
    oom: dict[str, float] = field(default_factory=dict)  # each kill once per role (NodeOutcome.oom_new)
    throttled: dict[str, int] = field(default_factory=dict)
    with_outcome: int = 0
    started: float = field(default_factory=time.time)
    # (role, Record.verdict, risk at the bind, measured peak) of the latest nodes read: the plot's points
    points: deque[tuple[str, bool | None, float, float]] = field(default_factory=lambda: deque(maxlen=PLOT_POINTS))

    def add(self, record: Record) -> None:
        self.judged += 1
        self.late += record.late
        self.changed += record.pick is not None and record.changed
        self.changed_refused += record.pick is not None and record.changed and record.warned
        self.changed_unknown += record.pick is not None and record.unknown_node
        self.held += record.pick is None
        self.held_warned += record.pick is None and record.warned
        self.warned += record.warned
        self.unknown_node += record.unknown_node
        self.judge_seconds += record.seconds

    def add_outcome(self, record: Record, u_star: float, share: float) -> None:
        self.with_outcome += 1
        for role, o in (("chosen", record.chosen_outcome), ("kso_pick", record.pick_outcome)):
            if o is None:
                continue
            over = o.over(u_star)
            counts = self.outcomes.setdefault((role, record.verdict), [0, 0, 0])
            counts[2 if over is None else 0 if over else 1] += 1
            if o.oom_new:
                self.oom[role] = self.oom.get(role, 0.0) + o.oom_new
            if o.throttled is not None and o.throttled > share:
                self.throttled[role] = self.throttled.get(role, 0) + 1
            risk = record.chosen_risk if role == "chosen" else record.pick_risk
            if risk is not None and o.with_pod is not None:
                self.points.append((role, record.verdict, risk, o.with_pod))

    def count(self, role: str, warned: bool | None, which: int) -> int:
        """Outcome counts (``which``: 0 over, 1 under, 2 no data) of ``role``'s nodes in binds whose chosen node kso
        warned about (True) or accepted (False); None: all, those whose chosen node it could not judge included."""
        return sum(c[which] for (r, w), c in self.outcomes.items() if r == role and (warned is None or w is warned))


def _share(n: int, d: int) -> str:
    return f"{100 * n / d:.1f} %" if d else "-"


def _pct(n: int, d: int) -> str:
    return f"{n} of {d} ({100 * n / d:.0f} %)" if d else f"{n} of 0"


def _risk(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _outcome(o: NodeOutcome | None, u_star: float) -> str:
    if o is None:
        return "pending"
    peak = o.peak
    if peak is None:
        return "no data"
    text = f"{peak:.0%}"
    if o.pod_share is not None:
        text += f" (+kso {o.with_pod:.0%}{', the pod as measured' if o.pod_measured else ''})"
    if o.over(u_star):
        text += " > U*"
    if o.oom_kills:
        text += f", {o.oom_kills:g} OOM"
    if o.throttled is not None:
        text += f", {o.throttled:.0%} thr."
    return text


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def markdown(tally: Tally, changed: deque[Record] | list[Record], context: dict[str, Any], u_star: float,
             now: float | None = None, rows: int = 30, plot: str = "", throttled_share: float = 0.25,
             misses: deque[Record] | list[Record] = (), schedule: dict[str, NodeSchedule] | None = None,
             over_alloc: int = 0) -> str:
    """The report's text. ``context``: what kso judged with (agents, weights, U*, eps, horizon, Prometheus, nodes);
    ``plot``: the file name of the risk-against-outcome plot beside the report, when there is one; ``changed``: the
    latest safety changes; ``misses``: the latest binds whose pick went over U*; ``schedule``: kso's schedule per
    node (shadow.counterfactual); ``over_alloc``: its nodes whose requests passed their allocatable."""
    now = time.time() if now is None else now
    t = tally
    over_w, judged_w = t.count("chosen", True, 0), t.count("chosen", True, 0) + t.count("chosen", True, 1)
    over_nw, judged_nw = t.count("chosen", False, 0), t.count("chosen", False, 0) + t.count("chosen", False, 1)
    over_p, judged_p = t.count("kso_pick", None, 0), t.count("kso_pick", None, 0) + t.count("kso_pick", None, 1)
    over_alloc = f"{over_alloc} of {len(schedule or {})} it put pods on or took pods from"
    no_data = t.count("chosen", None, 2) + t.count("kso_pick", None, 2)
    changed_unknown = f"; {t.changed_unknown} of them placed elsewhere" if t.changed_unknown else ""
    lines = [
        "# kso shadow report", "",
        f"From {_iso(t.started)} to {_iso(now)}: what kso would have decided for each pod the cluster's schedulers "
        "bound, and what Prometheus saw on both nodes during the forecast horizon that followed.", "",
        "## Summary", "",
        "| | |", "|---|---|",
        f"| binds seen | {t.seen}: judged {t.judged}, **skipped with a full judging queue {t.skipped} "
        f"({_share(t.skipped, t.seen)} of binds; KSO_SHADOW_QUEUE)**, unreadable {t.unreadable}"
        f"{f', {t.late} seen late, after a watch gap' if t.late else ''}. The shares below are of judged binds |",
        f"| **kso would have refused the chosen node (a safety difference)** | {_pct(t.warned, t.judged)}: "
        f"{t.changed_refused} placed elsewhere, {t.held_warned} left pending |",
        f"| kso would have placed the pod elsewhere on score alone (it accepted the chosen node) | "
        f"{_pct(t.changed - t.changed_refused - t.changed_unknown, t.judged)} |",
        f"| kso would have left the pod pending (no node passes) | {_pct(t.held, t.judged)} |",
        f"| the chosen node was not in kso's node cache (not judged) | {_pct(t.unknown_node, t.judged)}"
        f"{changed_unknown} |",
        f"| binds whose horizon has passed and were read | {t.with_outcome} (dropped before it: {t.dropped}) |",
        f"| **warned nodes that went over U\\* ({u_star:.0%})** | {_pct(over_w, judged_w)} |",
        f"| chosen nodes kso did not warn about that went over U\\* | {_pct(over_nw, judged_nw)} |",
        f"| **kso's misses: its own picks that went over U\\*** (in its schedule: with the pods it put there at their "
        f"requests; same node included) | {_pct(over_p, judged_p)} |",
        f"| nodes whose requests passed their allocatable in kso's schedule | {over_alloc} |",
        f"| nodes without utilisation data in their window | {no_data} |",
        f"| OOM kills on chosen nodes / on kso's picks (each kill once) | {_kills(t.oom.get('chosen'))} / "
        f"{_kills(t.oom.get('kso_pick'))} |",
        f"| throttled nodes (over {throttled_share:.0%} of CFS periods): chosen / kso's picks | "
        f"{t.throttled.get('chosen', 0)} / {t.throttled.get('kso_pick', 0)} |",
        f"| time to judge a bind (mean) | {1000 * t.judge_seconds / t.judged:.2f} ms |" if t.judged else
        "| time to judge a bind (mean) | - |",
        "",
        *([f"![forecast risk at the bind against the peak utilisation measured after it]({plot})", "",
           "Each point a node of a bind whose horizon has passed: the safe agent's risk with the pod (x) against the "
           "peak utilisation Prometheus measured in the horizon (y; kso's picks with what its schedule put there at requests). "
           "Red: chosen nodes kso warned about; grey: chosen "
           "nodes it did not; blue: kso's own picks.", ""] if plot else []),
        "## What kso judged with", "",
        *(f"- {k}: {v}" for k, v in context.items()),
        "",
        "## How to read it", "",
        "- kso judges each bind at the moment the watch sees it, on its node cache as it was just before (the pod not "
        "yet counted on any node) with its own earlier picks applied: kso's schedule, every earlier judged pod still "
        "alive on kso's pick instead of the chosen node. Its decision is the extender's: kube-scheduler's core filters "
        "as kso reads them, then kso's predicates, and the best score of kso's priorities among the nodes that pass "
        "(the plan's slots are not used: a shadow does not run the plan's jobs). Its verdict on the chosen node (warned "
        "or not, and its risk) is on the real cache: that node ran the real schedule.",
        "- Risk: the safe agent's P(util > U*) with the pod added, the worse of cpu and memory.",
        "- Outcome: the node's peak cpu and memory utilisation in [bind, bind + horizon], from the series kso's "
        "forecasts predict. kso's pick ran the real schedule, not kso's: its peaks are judged with what kso's schedule "
        "put there beyond what ran there (the pod where it ran elsewhere, and the pods kso moved there before, less "
        "those it moved away) at their requests, the pod itself at its measured peak where cAdvisor has it (\"+kso\"), "
        "an estimate of what they would have added (below the measured peak where kso took more away). OOM kills: "
        "each kill once, however many binds' windows hold it.",
        "",
        *schedule_table(schedule or {}, u_star, rows),
        *misses_table(list(misses)[-rows:][::-1], u_star, rows),
        f"## The latest placements kso would have changed for safety (up to {rows})", "",
        "kso refused the chosen node (or, not in its node cache, could not judge it); the placements it would have "
        "changed on score alone are counted above, not listed.", "",
        "| bound at | pod | scheduler | chosen node | risk | kso refused it because | kso's pick | risk | "
        "chosen node after | kso's pick after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    shown = list(changed)[-rows:][::-1]
    for r in shown:
        reasons = "; ".join(r.reasons).replace("|", "\\|") or (
            "not judged: not in kso's node cache" if r.unknown_node else "not refused: no node passes in kso's schedule")
        lines.append(f"| {_iso(r.at)[11:19]} | {r.pod} | {r.scheduler} | {r.chosen} | {_risk(r.chosen_risk)} | "
                     f"{reasons} | {r.pick or '(none: held)'} | {_risk(r.pick_risk)} | "
                     f"{_outcome(r.chosen_outcome, u_star)} | "
                     f"{_outcome(r.pick_outcome, u_star) if r.pick is not None else '-'} |")
    if not shown:
        lines.append("| | none yet | | | | | | | | |")
    return "\n".join(lines) + "\n"


def _req(node: NodeSchedule, which: tuple[float, float]) -> str:
    return " / ".join(f"{r / a:.0%}" if a > 0 else "-" for r, a in zip(which, node.alloc, strict=True))


def schedule_table(schedule: dict[str, NodeSchedule], u_star: float, rows: int) -> list[str]:
    """kso's schedule, per node: the nodes it moved most pods onto first."""
    moved = sorted((n for n in schedule.items() if n[1].moved_in or n[1].moved_out),
                   key=lambda n: (-n[1].moved_in, -n[1].peak_share, n[0]))
    lines = [f"## kso's schedule: where it would have put the pods, per node (up to {rows} nodes)", "",
             "Each judged pod on kso's pick instead of the chosen node (on none when kso would have held it), so that "
             "its picks add up: a node's requests count every pod kso put there. Requests as shares of allocatable "
             "(cpu / memory) at the latest bind involving the node; measured: the largest peak Prometheus measured there "
             "in the horizons of the binds kso put there; with kso's pods: plus what kso's schedule put there beyond "
             "what ran there, at requests (the bind's own pod at its measured peak where cAdvisor has it).", "",
             "| node | kso put here (moved in / of them alive) | moved away | requests, kso's schedule | "
             "requests, real | largest share requested | measured | with kso's pods |",
             "|---|---|---|---|---|---|---|---|"]
    for name, n in moved[:rows]:
        with_pods = "-" if n.with_pods_peak is None else f"{n.with_pods_peak:.0%}" + (
            " > U*" if n.with_pods_peak > u_star else "")
        lines.append(f"| {name} | {n.picked} ({n.moved_in} / {n.live_in}) | {n.moved_out} | {_req(n, n.requested)} | "
                     f"{_req(n, n.real_requested)} | {n.peak_share:.0%} | "
                     f"{'-' if n.measured_peak is None else f'{n.measured_peak:.0%}'} | {with_pods} |")
    if not moved:
        lines.append("| none yet | | | | | | | |")
    return [*lines, ""]


def misses_table(misses: list[Record], u_star: float, rows: int) -> list[str]:
    lines = [f"## kso's latest misses: its own picks that went over U\\* (up to {rows})", "",
             "| bound at | pod | kso's pick | risk | kso's pick after | chosen node | chosen node after |",
             "|---|---|---|---|---|---|---|"]
    for r in misses:
        lines.append(f"| {_iso(r.at)[11:19]} | {r.pod} | {r.pick} | {_risk(r.pick_risk)} | "
                     f"{_outcome(r.pick_outcome, u_star)} | {r.chosen}{'' if r.changed else ' (same)'} | "
                     f"{_outcome(r.chosen_outcome, u_star)} |")
    if not misses:
        lines.append("| | none yet | | | | | |")
    return [*lines, ""]


def _kills(value: float | None) -> str:
    return f"{value:g}" if value else "0"


def plot(points: list[tuple[str, bool | None, float, float]], u_star: float, eps: float, path: str) -> bool:
    """The risk-against-outcome scatter as a PNG at ``path``; False (nothing written) without matplotlib or points."""
    import importlib.util

    if not points or importlib.util.find_spec("matplotlib") is None:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (role, warned), (color, marker, label) in {
            ("chosen", True): ("tab:red", "x", "chosen node, kso warned"),
            ("chosen", False): ("tab:gray", "o", "chosen node, not warned"),
            ("kso_pick", True): ("tab:blue", "^", "kso's pick"), ("kso_pick", False): ("tab:blue", "^", ""),
            ("kso_pick", None): ("tab:blue", "^", "")}.items():
        xy = [(x, y) for r, w, x, y in points if r == role and w is warned]
        if xy:
            ax.scatter(*zip(*xy, strict=True), c=color, marker=marker, s=22, alpha=0.7, label=label or None)
    ax.axhline(u_star, color="black", lw=0.8, ls="--", label=f"U* {u_star:.0%}")
    ax.axvline(eps, color="black", lw=0.8, ls=":", label=f"eps {eps:.0%}")
    ax.set_xlabel("forecast P(util > U*) with the pod, at the bind")
    ax.set_ylabel("peak utilisation in the horizon")
    ax.set_xlim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
